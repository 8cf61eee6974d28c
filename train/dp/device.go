package dp

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
)

// DDP on GPUs (-device cuda): each rank's model placed with
// devmodel.Place on its GPU (rankdev.Device: the nccl Comm's, LOCAL_RANK),
// parameters, gradients and the optimizer's state in device memory; each
// step uploads the rank's batch and runs forward and backward there,
// averaging the gradients over the ranks in place (over NCCL on the
// device buffer with -backend nccl, in buckets while backward runs,
// unless -no-overlap; with a host backend, after backward, copied
// through host memory: devComm), and clips and updates on the device.
// Evaluations run on the device (devmodel.Eval, after giving every rank
// rank 0's batch-norm statistics, as train does on the host). Saves go
// through the host model: its parameters, batch-norm statistics and a
// host optimizer's state are copied down first (once per update at
// most), and copied up after a resume, so the checkpoints are the CPU's
// files.

// checkDDPDevice refuses what DDP cannot do on a GPU yet.
func checkDDPDevice(cfg *train.Config) error {
	o := cfg.Options.(*DDPOptions)
	first, _ := cfg.CUDADevice()
	if err := checkNCCLDevice(cfg.Device, first, cfg.Backend); err != nil {
		return err
	}
	switch {
	case o.Compress != "none":
		return fmt.Errorf("-compress %s compresses the gradient all-reduce, which -device %s does not do yet: drop -compress", o.Compress, cfg.Device)
	case o.Debug:
		return fmt.Errorf("-debug compares the ranks' parameters on the host, which -device %s does not do yet: drop -debug", cfg.Device)
	}
	return nil
}

// deviceBase is what the device strategies share: the placed model, the
// device collectives, the host model the saves go through.
type deviceBase struct {
	snaps train.SnapshotBuffers
	c     comm.Comm
	dc    *devComm
	m     *models.Model
	d     *devmodel.Model
	st    streams // the collectives' events and Works (device_order.go)
	stale bool    // the host model (and optimizer) are behind the device
	// failed is the first failed step's or update's error: Close then
	// aborts the Comm before it waits for the device (quiesce)
	failed error
	// syncBNClose frees syncbn.Device's resources (-syncbn over NCCL;
	// nil otherwise: syncbn_device.go)
	syncBNClose func() error
}

// place puts s.Model on this rank's GPU (rankdev.Device) for devmodel's
// configuration dcfg (its Device is set here). Every rank starts from
// rank 0's parameters: the caller broadcasts them on the host first.
func (b *deviceBase) place(s train.Setup, first int, dcfg devmodel.Config) error {
	cfg := s.Config
	if err := devmodel.Check(s.Model); err != nil {
		return fmt.Errorf("%w: -device %s: %v", train.ErrConfig, cfg.Device, err)
	}
	b.c, b.m = s.Comm, s.Model
	b.dc = newDevComm(s.Comm, first)
	if b.dc.direct {
		if err := checkNCCLDevice(cfg.Device, first, "nccl"); err != nil {
			return fmt.Errorf("%w: %v", train.ErrConfig, err)
		}
	}
	dcfg.Device = b.dc.dev
	d, err := devmodel.Place(s.Model, dcfg)
	if err != nil {
		return fmt.Errorf("train: rank %d: -device %s (GPU %d): %w", s.Comm.Rank(), cfg.Device, b.dc.dev, err)
	}
	// Dropout's masks: this rank's samples' place in the global batch.
	d.SampleOffset = s.Comm.Rank() * cfg.Batch
	b.d = d
	err = b.st.open(d.Stream())
	if err == nil {
		err = b.dc.bind(d.Stream())
	}
	if err != nil {
		// the caller closes nothing of a failed place: free the model
		// (its device memory, stream) and the events made so far
		b.d = nil
		err = errors.Join(err, d.Close(), b.st.close(), b.dc.close())
		return fmt.Errorf("train: rank %d: -device %s: %w", s.Comm.Rank(), cfg.Device, err)
	}
	return nil
}

// note keeps err, if any, as the failure that Close aborts for, and
// returns it.
func (b *deviceBase) note(err error) error {
	if err != nil && b.failed == nil {
		b.failed = err
	}
	return err
}

// closeDevice frees the device state of a strategy (the model, -syncbn's
// memory and events, the collectives' events), after quiesce: if the
// device is still busy after an abort, nothing is freed (leaked, not
// freed under an NCCL kernel). comms are those the collectives run on.
func (b *deviceBase) closeDevice(comms ...comm.Comm) error {
	if b.d == nil {
		return nil
	}
	free, err := b.quiesce(b.failed, comms...)
	if !free {
		return err
	}
	err = errors.Join(err, b.d.Close(), b.closeSyncBN(), b.st.close(), b.dc.close())
	b.d = nil
	return err
}

// Device is the placed model (for tests and tools).
func (b *deviceBase) Device() *devmodel.Model { return b.d }

func (b *deviceBase) DataRank() (rank, world int) { return b.c.Rank(), b.c.Size() }

// settle checks the collectives issued so far (device_order.go), before
// the host reads the model.
func (b *deviceBase) settle(ctx context.Context) error { return b.st.settle(ctx, b.c.Rank()) }

// sync waits for the model's queued work (before a collective through
// host memory reads or writes its buffers).
func (b *deviceBase) sync() error {
	if err := b.d.Stream().Synchronize(); err != nil {
		return fmt.Errorf("train: rank %d: the device: %w", b.c.Rank(), err)
	}
	return nil
}

// syncBN gives every rank rank 0's batch-norm running statistics on the
// device (train does so on the host before evaluating and saving). The
// other ranks' statistics are never used but there, so this changes no
// result. Collective.
func (b *deviceBase) syncBN(ctx context.Context) error {
	if err := b.settle(ctx); err != nil {
		return err
	}
	bufs := b.d.BNBuffers()
	if len(bufs) == 0 || b.c.Size() == 1 {
		return nil
	}
	if err := b.sync(); err != nil {
		return err
	}
	for _, x := range bufs {
		if err := b.dc.broadcast(ctx, x.Ptr, x.N, 0); err != nil {
			return fmt.Errorf("train: broadcasting batch norm's statistics on the device: %w", err)
		}
	}
	return nil
}

// EvalBatches evaluates on the device (devmodel.Eval), every rank with
// rank 0's batch-norm statistics (train.BatchEvaluator).
func (b *deviceBase) EvalBatches(ctx context.Context, eval func(batch train.EvalBatch) error) error {
	if err := b.syncBN(ctx); err != nil {
		return err
	}
	return eval(func(x []float32, y []int32) (float64, int, error) {
		loss, correct, err := b.d.Eval(x, y)
		return float64(loss), correct, err
	})
}

// Eval evaluates the host model (the CPU path), copied from the device;
// Run evaluates with EvalBatches instead.
func (b *deviceBase) hostEval(ctx context.Context, toHost func() error, eval func() error) error {
	if err := b.syncBN(ctx); err != nil {
		return err
	}
	if err := toHost(); err != nil {
		return err
	}
	return eval()
}

// Report: peak device memory; no overlap, no buckets (the reduction
// follows backward; deviceDDP reports its buckets).
func (b *deviceBase) Report(_ context.Context, sum *train.Summary) error {
	sum.Overlap = false
	sum.Buckets = 0
	sum.PeakDeviceBytes = b.d.PeakBytes()
	return nil
}

// overlapped runs forward and backward with each bucket's collective
// (launch, with the ctx to issue it with; buckets last first) started as
// soon as backward has queued its gradients (devmodel's OnGradsReady),
// NCCL's stream waiting on the device for an event recorded on the
// model's stream then; after backward the model's stream waits for an
// event recorded after the last bucket's collective (NCCL runs them in
// order), so the update reads the reduced gradients; the host waits for
// none of them (device_order.go). verb ("averaging", "reducing") names
// what they do in errors.
func (b *deviceBase) overlapped(ctx context.Context, x []float32, y []int32, buckets []devBucket, verb string, launch func(ctx context.Context, b devBucket) (comm.Work, error)) (float32, error) {
	prev := b.st.pending // the last step's, done on the device once this step's loss is down
	b.st.pending = nil
	done, err := b.st.event()
	if err != nil {
		return 0, err
	}
	next := 0
	start := func(from int) error {
		for ; next < len(buckets) && buckets[next].lo >= from; next++ {
			octx, err := b.st.ordered(ctx, done)
			if err != nil {
				return err
			}
			w, err := launch(octx, buckets[next])
			if err != nil {
				return fmt.Errorf("train: %s gradient bucket %d on the device: %w", verb, next, err)
			}
			b.st.track(w, verb+" gradients", buckets[next].lo, buckets[next].hi)
		}
		return nil
	}
	b.d.OnGradsReady = start
	loss, err := b.d.ForwardBackward(x, y)
	b.d.OnGradsReady = nil
	if err == nil {
		err = start(0) // every bucket is ready by now
	}
	if jerr := b.st.join(done); err == nil {
		err = jerr
	}
	b.st.pending = append(prev, b.st.pending...)
	if err != nil {
		return loss, err
	}
	return loss, b.settlePrevious(ctx, len(prev))
}

// settlePrevious checks the first n pending collectives, the last step's
// (this step's loss came down: the device has done them), and keeps the
// rest.
func (b *deviceBase) settlePrevious(ctx context.Context, n int) error {
	rest := append([]pendingOp(nil), b.st.pending[n:]...)
	b.st.pending = b.st.pending[:n]
	err := b.settle(ctx)
	b.st.pending = rest
	return err
}

// copyDown copies the device's parameters, batch-norm statistics and
// optimizer state into the host model and opt (the host's copy of the
// device's optimizer state, whole or this rank's shard), if an update
// changed them since the last copy.
func (b *deviceBase) copyDown(opt optim.Optimizer) error {
	if !b.stale {
		return nil
	}
	if err := b.d.CopyToHost(); err != nil {
		return fmt.Errorf("train: copying the model from the device: %w", err)
	}
	if err := b.d.OptimStateToHost(opt); err != nil {
		return fmt.Errorf("train: copying the optimizer state from the device: %w", err)
	}
	b.stale = false
	return nil
}

// copyUp copies the host model and opt up to the device (after a
// resume).
func (b *deviceBase) copyUp(opt optim.Optimizer) error {
	if err := b.d.CopyFromHost(); err != nil {
		return fmt.Errorf("train: copying the resumed model to the device: %w", err)
	}
	if err := b.d.OptimStateFromHost(opt); err != nil {
		return fmt.Errorf("train: copying the resumed optimizer state to the device: %w", err)
	}
	b.stale = false
	return nil
}

var (
	_ train.Strategy       = (*deviceDDP)(nil)
	_ train.UpdateClipper  = (*deviceDDP)(nil)
	_ train.GradNormLogger = (*deviceDDP)(nil)
	_ train.LRSetter       = (*deviceDDP)(nil)
	_ train.Snapshotter    = (*deviceDDP)(nil)
	_ train.StateChecker   = (*deviceDDP)(nil)
	_ train.BatchEvaluator = (*deviceDDP)(nil)
)

type deviceDDP struct {
	deviceBase
	opt     optim.Optimizer // the host's copy of the device's state, for saves
	buckets []devBucket     // with overlap: the gradient buckets, last first
}

// devBucket is a range [lo, hi) of the flat gradient buffer, all-reduced
// as one.
type devBucket struct{ lo, hi int }

// devBuckets splits n floats into buckets from the end (backward's
// order): the first of firstMB MiB, the others of mb (at least one
// float each).
func devBuckets(n int, firstMB, mb float64) []devBucket {
	var out []devBucket
	for hi := n; hi > 0; {
		c := mb
		if len(out) == 0 {
			c = firstMB
		}
		lo := max(0, hi-max(1, int(c*(1<<20)/4)))
		out = append(out, devBucket{lo, hi})
		hi = lo
	}
	return out
}

func newDeviceDDP(ctx context.Context, s train.Setup, dev int) (train.Strategy, error) {
	cfg := s.Config
	if err := devmodel.Check(s.Model); err != nil {
		return nil, fmt.Errorf("%w: -device %s: %v", train.ErrConfig, cfg.Device, err)
	}
	// Every rank starts from rank 0's parameters.
	if err := comm.Run(ctx)(s.Comm.Broadcast(ctx, comm.FromSlice(s.Model.Flat.Value), 0)); err != nil {
		return nil, err
	}
	opt, err := optim.New(cfg.OptimConfig(), len(s.Model.Flat.Value))
	if err != nil {
		return nil, err
	}
	st := &deviceDDP{opt: opt}
	dcfg := devmodel.Config{Batch: cfg.Batch, Optim: cfg.OptimConfig(), ClipGrad: cfg.ClipGrad, Precision: gemm.Precision(cfg.Precision)}
	if dcfg.SyncBN, err = st.deviceSyncBN(ctx, s, dev); err != nil { // -syncbn: over NCCL on the device (syncbn_device.go)
		return nil, err
	}
	if err := st.place(s, dev, dcfg); err != nil {
		return nil, errors.Join(err, st.closeSyncBN())
	}
	// Over NCCL the gradients are averaged in buckets while backward
	// runs (unless -no-overlap): a bucket's all-reduce starts once
	// backward has queued its last gradient (devmodel's OnGradsReady);
	// NCCL's stream waits for an event recorded on the model's
	// (non-blocking) stream then, and the rest of backward goes on
	// meanwhile (device_order.go). A GPU reduces with resources of its
	// own, so unlike the CPU's, this overlap is on whatever the host's
	// cores.
	o := cfg.Options.(*DDPOptions)
	if off, set := o.NoOverlap.Get(); st.dc.direct && s.Comm.Size() > 1 && !(set && off) {
		st.buckets = devBuckets(st.d.N, o.FirstMB, o.MB)
	}
	return st, nil
}

// Step runs forward and backward on the device and averages the
// gradients over the ranks, in place: in buckets during backward
// (overlap), or all at once after it.
func (s *deviceDDP) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	loss, err := s.step(ctx, x, y)
	return loss, s.note(err)
}

func (s *deviceDDP) step(ctx context.Context, x []float32, y []int32) (float32, error) {
	if len(s.buckets) > 0 {
		return s.stepOverlapped(ctx, x, y)
	}
	if s.dc.direct && s.c.Size() > 1 {
		// one bucket after backward: ordered as overlapped's
		return s.overlapped(ctx, x, y, []devBucket{{0, s.d.N}}, "averaging", s.allReduce)
	}
	loss, err := s.d.ForwardBackward(x, y)
	if err != nil || s.c.Size() == 1 {
		return loss, err
	}
	if err := s.sync(); err != nil {
		return loss, err
	}
	if err := s.dc.allReduceAvg(ctx, s.d.Grads, s.d.N); err != nil {
		return loss, fmt.Errorf("train: averaging the gradients %s: %w", s.dc.backendNote(), err)
	}
	return loss, nil
}

// allReduce starts averaging bucket b of the gradients over NCCL.
func (s *deviceDDP) allReduce(ctx context.Context, b devBucket) (comm.Work, error) {
	return s.c.AllReduce(ctx, s.dc.buf(s.d.Grads+uintptr(4*b.lo), b.hi-b.lo), comm.Avg)
}

// stepOverlapped starts each bucket's all-reduce as soon as backward has
// queued its gradients, and waits for them all after backward.
func (s *deviceDDP) stepOverlapped(ctx context.Context, x []float32, y []int32) (float32, error) {
	return s.overlapped(ctx, x, y, s.buckets, "averaging", s.allReduce)
}

// Report: peak device memory; the buckets overlapped with backward, if
// any.
func (s *deviceDDP) Report(ctx context.Context, sum *train.Summary) error {
	if err := s.deviceBase.Report(ctx, sum); err != nil {
		return err
	}
	sum.Overlap = len(s.buckets) > 0
	sum.Buckets = len(s.buckets)
	return nil
}

// Update clips (devmodel's Config.ClipGrad), updates and zeroes the
// gradients on the device.
func (s *deviceDDP) Update(context.Context) error {
	s.stale = true
	if err := s.d.Update(); err != nil {
		return s.note(err)
	}
	return s.note(s.d.ZeroGrad())
}

func (s *deviceDDP) LastGradNorm() (float64, error) { return s.d.GradNorm() }

// GradNorms are every Update's norm (train.GradNormLogger), logged on
// the device by devmodel's Update and read at once: no step waits for
// its norm.
func (s *deviceDDP) GradNorms() ([]float64, error) { return s.d.GradNorms() }

func (s *deviceDDP) SetLR(lr float64) {
	s.d.SetLR(lr)
	s.opt.SetLR(lr)
}

// toHost copies the device's parameters, batch-norm statistics and
// optimizer state into the host model and opt, if an update changed them
// since the last copy.
func (s *deviceDDP) toHost() error { return s.copyDown(s.opt) }

// Eval evaluates the host model (the CPU path), copied from the device
// (Run evaluates with EvalBatches instead).
func (s *deviceDDP) Eval(ctx context.Context, eval func() error) error {
	return s.hostEval(ctx, s.toHost, eval)
}

func (s *deviceDDP) meta(meta map[string]string) map[string]string {
	return train.WithMeta(meta, "world_size", strconv.Itoa(s.c.Size()))
}

func (s *deviceDDP) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	if err := s.syncBN(ctx); err != nil {
		return err
	}
	err := s.toHost()
	if err := comm.Agree(ctx, s.c, err); err != nil {
		return err
	}
	return train.SaveFull(ctx, s.c, path, s.m, s.opt, pos, s.meta(meta))
}

func (s *deviceDDP) SnapshotSave(ctx context.Context, path string, pos train.Position, meta map[string]string) ([]func() error, error) {
	if err := s.syncBN(ctx); err != nil {
		return nil, err
	}
	if err := s.toHost(); err != nil {
		return nil, err
	}
	if s.c.Rank() != 0 {
		return []func() error{nil}, nil
	}
	return []func() error{train.SnapshotFull(path, s.m, s.opt, pos, s.meta(meta), &s.snaps)}, nil
}

func (s *deviceDDP) NonFinite() string {
	if err := s.toHost(); err != nil {
		return "the device's state (" + err.Error() + ")"
	}
	if w := train.ParamsNonFinite(s.m, s.m.Flat.Value, 0); w != "" {
		return w
	}
	return train.OptimizerNonFinite(s.opt)
}

// Load reads the checkpoint into the host model and optimizer, and
// copies both up.
func (s *deviceDDP) Load(_ context.Context, path string) (train.Position, error) {
	pos, _, err := train.LoadCheckpoint(path, s.m, s.opt)
	if err != nil {
		return pos, err
	}
	return pos, s.copyUp(s.opt)
}

// Memory: the model state on the device (the host's copies aside).
func (s *deviceDDP) Memory() (train.MemoryBytes, int64) {
	return train.MemoryBytes{Params: int64(s.d.N) * 4, Grads: int64(s.d.N) * 4, Optimizer: train.OptimizerBytes(s.opt)}, 0
}

// Close waits for the collectives still pending and frees the device
// state (closeDevice, quiesce: bounded, aborting the Comm where they do
// not end).
func (s *deviceDDP) Close() error { return s.closeDevice(s.c) }
