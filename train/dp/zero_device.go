package dp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/zero"
)

// ZeRO on GPUs (-device cuda -strategy zero1|zero2|zero3): every rank's
// model placed on its GPU as DDP's is (deviceBase), the flat buffers
// padded to N*S as package zero pads them (S = ceil(P/N): rank r owns
// [r*S, (r+1)*S)), and the optimizer state on the device for this
// rank's shard only (devmodel.Config.Shard). -clip-grad clips the shard
// by the global norm in Update, on the device (each rank's shard norm
// squared there and all-reduced over NCCL, ordered with the model's
// stream, the factor computed by a kernel: devmodel.ClipShardQueued, no
// wait for the device in the step; the norms logged on the device and
// read once for the summary: train.GradNormLogger), bit for bit what
// ClipGrads gives, which reads the shard's norm on the host
// (TestDeviceZeroClipOnDevice); the update changes this rank's shard of
// the parameters with its shard of the state.
//
// Stage 1 keeps the full parameter and gradient buffers on the device:
// backward writes the whole flat gradient and each shard of it is
// averaged into its owner's range in place, over NCCL in buckets
// (-first-bucket-mb, -bucket-mb, split at the shards' edges) reduced
// to their owners as soon as backward has queued their gradients,
// overlapping the rest of backward (the summary's overlap and buckets);
// through host memory with a host backend, one reduce-scatter after
// backward (devComm). After the update the parameters are all-gathered
// in place.
//
// Stage 2 keeps only this rank's shard of the gradients
// (devmodel.Config.ShardGrads): backward goes unit by unit (runs of
// layers of at least -bucket-mb of parameters, last first), each
// unit's gradients written into a block of its own (its exact size, cached), its
// pieces (split at the shards' edges) reduced to their owners
// (stepSharded: over NCCL while the next unit's backward runs, the
// summary's buckets counting the reductions per step; through host
// memory at once), this rank's piece added into its shard's gradients
// and the block given back. The parameters stay whole, all-gathered
// after the update as in stage 1.
//
// Stage 3 keeps only this rank's shard of the parameters too
// (ShardParams): each unit's parameters are gathered (each owner's
// piece broadcast) into a cached block before the unit's forward and
// again before its backward, and given back after, as FSDP does with a
// unit per layer; over NCCL the next unit's gather is started before
// this unit's ops are queued (a prefetch overlapping them, two units'
// blocks held) on a stream of its own (a Comm split from the training
// one, gc: NCCL communicators of their own, so a gather does not wait
// behind the gradients' reductions, as FSDP's all-gather and
// reduce-scatter streams), and the model's stream waits for an event
// recorded after it before its ops (no host wait: device_order.go).
// Evaluations gather
// the whole parameter buffer for their duration (devmodel.Unshard: the
// ranks may evaluate different numbers of batches, so per-unit
// collectives cannot run per batch) and free it after; saves gather the
// parameters on the host.
//
// So the peak device memory (the summary's peak_device_bytes) falls
// stage by stage: stage 2 drops (N-1)/N of the gradient buffer for one
// or two units' blocks, stage 3 (N-1)/N of the parameter buffer for a
// unit's block, except while evaluating (the whole buffer then). A
// model whose largest layer holds more than about (N-1)/(2N) of the
// parameters gains nothing from stage 2 (the mlp at 2 ranks: its first
// layer is 85% of it; stage 2 then holds more than stage 1): a unit's
// gradients are written whole. cmd/train's TestDeviceZeroMemory
// measures mlp-deep and a gpt.
//
// Checkpoints are the CPU's sharded files (train.SaveZero): a host ZeRO
// engine (stage 1 for zero1, stage 2 for zero2 and zero3: contiguous
// shards, the files' layout whatever the stage) holds the host's copy of
// this rank's shard of the optimizer state, and the host model the
// parameters, copied down before a save and up after a resume. The
// shard files of a device zero3 run therefore record stage 2 (package
// zero's "stage" metadata); train's "strategy" says zero3. Either loads
// into any strategy and world size, on either device.

var (
	_ train.Strategy       = (*deviceZero)(nil)
	_ train.GradClipper    = (*deviceZero)(nil)
	_ train.LRSetter       = (*deviceZero)(nil)
	_ train.Snapshotter    = (*deviceZero)(nil)
	_ train.StateChecker   = (*deviceZero)(nil)
	_ train.BatchEvaluator = (*deviceZero)(nil)
)

type deviceZero struct {
	deviceBase
	name     string
	stage    int
	e        *zero.Engine // the host's copy of the shard, for saves
	opt      optim.Config
	lo, s    int         // this rank's shard [lo, lo+s)
	gathered bool        // the full parameter buffer holds every shard's latest
	buckets  []devBucket // over NCCL: the gradient buckets, last first
	pieces   int         // stages 2, 3: the reductions per step
	// gc, stage 3 over NCCL: the parameters' gathers' Comm (split from
	// the training Comm: NCCL communicators of their own, so the gathers
	// run on a stream of their own, not behind the gradients' reductions)
	gc comm.Comm
	// clip is -clip-grad: Update clips the shard first, on the device
	// (clipQueued)
	clip float64
}

func newDeviceZero(ctx context.Context, s train.Setup, stage, dev int) (train.Strategy, error) {
	cfg := s.Config
	if err := devmodel.Check(s.Model); err != nil {
		return nil, fmt.Errorf("%w: -device %s: %v", train.ErrConfig, cfg.Device, err)
	}
	// The host engine pads the model's buffers to N*S and gives every
	// rank rank 0's parameters. It sees the flat parameters only: the
	// batch-norm statistics (alike on every rank from the seed) are
	// broadcast on the device where they are used (syncBN), and a
	// broadcast of the host's batch count (an int64 field of a struct
	// holding pointers) through the nccl backend's staging copy panics
	// in cgo's pointer check.
	e, err := zero.New(ctx, s.Comm, flatOnly{s.Model.Flat}, zero.Options{Stage: min(stage, 2), Optim: cfg.OptimConfig(), OrdinaryBuffers: true})
	if err != nil {
		return nil, err
	}
	lo, hi := e.Shard()
	st := &deviceZero{name: cfg.Strategy, stage: stage, e: e, opt: cfg.OptimConfig(), lo: lo, s: hi - lo, gathered: true}
	st.clip = cfg.ClipGrad
	dcfg := devmodel.Config{Batch: cfg.Batch, Optim: cfg.OptimConfig(), Shard: devmodel.Range{Lo: lo, Hi: hi}, Precision: gemm.Precision(cfg.Precision),
		ClipGrad: cfg.ClipGrad} // with a Shard, the norms' log; Update does not clip
	o := cfg.Options.(*ZeroOptions)
	if stage >= 2 {
		// the gradients (and, stage 3, the parameters) in units of
		// -bucket-mb at least, each closed at a layer's edge
		dcfg.ShardGrads, dcfg.ShardParams = true, stage == 3
		dcfg.UnitFloats = max(1, int(o.MB*(1<<20)/4))
	}
	if dcfg.SyncBN, err = st.deviceSyncBN(ctx, s, dev); err != nil { // -syncbn, as DDP's (syncbn_device.go)
		e.Close()
		return nil, err
	}
	if err := st.place(s, dev, dcfg); err != nil {
		e.Close()
		return nil, errors.Join(err, st.closeSyncBN())
	}
	if st.d.N != s.Comm.Size()*st.s {
		st.Close()
		return nil, fmt.Errorf("train: rank %d: the placed model has %d values, not %d shards of %d", s.Comm.Rank(), st.d.N, s.Comm.Size(), st.s)
	}
	if stage >= 2 {
		for _, u := range st.d.Units() {
			st.pieces += len(st.split(u.Lo, u.Hi))
		}
	}
	if st.dc.direct && s.Comm.Size() > 1 && stage == 3 {
		if st.gc, err = s.Comm.Split(ctx, 0, s.Comm.Rank()); err != nil {
			st.Close()
			return nil, fmt.Errorf("train: rank %d: the parameters' gathers' communicator: %w", s.Comm.Rank(), err)
		}
	}
	if st.dc.direct && s.Comm.Size() > 1 && stage == 1 {
		// Over NCCL each bucket (-first-bucket-mb, -bucket-mb; none
		// crossing a shard's edge) is reduced to its shard's owner
		// while backward goes on, as DDP's all-reduces are.
		for _, b := range devBuckets(st.d.N, o.FirstMB, o.MB) {
			for hi := b.hi; hi > b.lo; {
				lo := max(b.lo, (hi-1)/st.s*st.s)
				st.buckets = append(st.buckets, devBucket{lo, hi})
				hi = lo
			}
		}
	}
	return st, nil
}

// flatOnly is a model's flat parameters, and nothing else, for zero.New.
type flatOnly struct{ fp *flat.Params }

func (f flatOnly) FlatParams() *flat.Params { return f.fp }

// gather all-gathers the parameters' shards into the full buffer, if an
// update changed them since. Collective. Over NCCL it is ordered with
// the model's stream by events (after the update, before the next
// forward), with no host wait.
func (s *deviceZero) gather(ctx context.Context) error {
	if s.gathered || s.stage == 3 {
		return nil
	}
	if s.dc.direct && s.c.Size() > 1 {
		octx, done, err := s.st.orderedNew(ctx)
		if err != nil {
			return err
		}
		r := s.c.Rank()
		all := s.dc.buf(s.d.Params, s.c.Size()*s.s)
		w, err := s.c.AllGather(octx, all, all.Slice(r*s.s, (r+1)*s.s))
		if err != nil {
			return fmt.Errorf("train: gathering the parameters on the device: %w", err)
		}
		s.st.track(w, "gathering the parameters", 0, s.c.Size()*s.s)
		if err := s.st.join(done); err != nil {
			return err
		}
	} else {
		if err := s.sync(); err != nil {
			return err
		}
		if err := s.dc.allGather(ctx, s.d.Params, s.s); err != nil {
			return fmt.Errorf("train: gathering the parameters %s: %w", s.dc.backendNote(), err)
		}
	}
	s.gathered, s.stale = true, true
	return nil
}

// Step runs forward and backward on the device and reduce-scatters the
// gradients: this rank's shard of the average lands in its shard of the
// gradient buffer (stages 2 and 3: stepSharded).
func (s *deviceZero) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	loss, err := s.step(ctx, x, y)
	return loss, s.note(err)
}

func (s *deviceZero) step(ctx context.Context, x []float32, y []int32) (float32, error) {
	if err := s.gather(ctx); err != nil {
		return 0, err
	}
	if s.stage >= 2 {
		return s.stepSharded(ctx, x, y)
	}
	if len(s.buckets) > 0 {
		return s.stepOverlapped(ctx, x, y)
	}
	if s.dc.direct && s.c.Size() > 1 {
		// one reduce-scatter after backward, ordered as overlapped's
		return s.overlapped(ctx, x, y, []devBucket{{0, s.d.N}}, "reduce-scattering", func(ctx context.Context, _ devBucket) (comm.Work, error) {
			r := s.c.Rank()
			all := s.dc.buf(s.d.Grads, s.c.Size()*s.s)
			return s.c.ReduceScatter(ctx, all.Slice(r*s.s, (r+1)*s.s), all, comm.Avg)
		})
	}
	loss, err := s.d.ForwardBackward(x, y)
	if err != nil || s.c.Size() == 1 {
		return loss, err
	}
	if err := s.sync(); err != nil {
		return loss, err
	}
	if err := s.dc.reduceScatterAvg(ctx, s.d.Grads, s.s); err != nil {
		return loss, fmt.Errorf("train: reduce-scattering the gradients %s: %w", s.dc.backendNote(), err)
	}
	return loss, nil
}

// stepOverlapped reduces (averages) each bucket to the rank that owns its
// shard as soon as backward has queued its gradients (devmodel's
// OnGradsReady), and waits for them all after backward: this rank's
// shard of the gradient buffer then holds the average, as after the
// reduce-scatter.
func (s *deviceZero) stepOverlapped(ctx context.Context, x []float32, y []int32) (float32, error) {
	return s.overlapped(ctx, x, y, s.buckets, "reducing", func(ctx context.Context, b devBucket) (comm.Work, error) {
		return s.c.Reduce(ctx, s.dc.buf(s.d.Grads+uintptr(4*b.lo), b.hi-b.lo), comm.Avg, b.lo/s.s)
	})
}

// split splits [lo, hi) of the flat buffers at the shards' edges.
func (s *deviceZero) split(lo, hi int) []devBucket {
	var out []devBucket
	for a := lo; a < hi; {
		b := min(hi, (a/s.s+1)*s.s)
		out = append(out, devBucket{a, b})
		a = b
	}
	return out
}

// stepSharded is a step of stages 2 and 3 (devmodel's ShardGrads,
// ShardParams): backward's gradients unit by unit, each unit's pieces
// reduced to their owners (over NCCL while the next unit's backward
// runs; through host memory at once), only this rank's shard of them
// kept; stage 3 gathers each unit's parameters before its forward and
// before its backward (a broadcast of each owner's piece).
func (s *deviceZero) stepSharded(ctx context.Context, x []float32, y []int32) (float32, error) {
	if s.c.Size() > 1 {
		s.d.ReduceGrads = func(lo, hi int, g uintptr, after *cuda.Event) (func() error, error) {
			return s.reduceUnit(ctx, lo, hi, g, after)
		}
		if s.stage == 3 {
			s.d.GatherParams = func(lo, hi int, dst uintptr, _ *cuda.Event) (func() error, error) {
				return s.gatherUnit(ctx, lo, hi, dst)
			}
		}
	}
	prev := len(s.st.pending) // the last step's: done on the device once this step's loss is down
	loss, err := s.d.ForwardBackward(x, y)
	s.d.ReduceGrads, s.d.GatherParams = nil, nil
	if err != nil {
		return loss, err
	}
	return loss, s.settlePrevious(ctx, prev)
}

// reduceUnit averages the gradients [lo, hi) at g (a unit's block) into
// each piece's owner: over NCCL after after (recorded on the model's
// stream once the unit's gradients were queued), returning how to make
// the model's stream wait for the result (an event recorded after the
// unit's last piece: its own, so that the next unit's reduction stays
// overlapped with backward).
func (s *deviceZero) reduceUnit(ctx context.Context, lo, hi int, g uintptr, after *cuda.Event) (func() error, error) {
	if s.dc.direct {
		done, err := s.st.event()
		if err != nil {
			return nil, err
		}
		octx := cuda.WithOrder(ctx, cuda.Order{After: after, Done: done})
		for _, b := range s.split(lo, hi) {
			w, err := s.c.Reduce(octx, s.dc.buf(g+uintptr(4*(b.lo-lo)), b.hi-b.lo), comm.Avg, b.lo/s.s)
			if err != nil {
				return nil, fmt.Errorf("train: reducing gradients [%d, %d) on the device: %w", b.lo, b.hi, err)
			}
			s.st.track(w, "reducing gradients", b.lo, b.hi)
		}
		return func() error { return s.st.join(done) }, nil
	}
	if err := s.sync(); err != nil {
		return nil, err
	}
	h, err := s.dc.stage(g, hi-lo)
	if err != nil {
		return nil, err
	}
	for _, b := range s.split(lo, hi) {
		if err := comm.Run(ctx)(s.c.Reduce(ctx, comm.FromSlice(h[b.lo-lo:b.hi-lo]), comm.Avg, b.lo/s.s)); err != nil {
			return nil, fmt.Errorf("train: reducing gradients [%d, %d) through host memory: %w", b.lo, b.hi, err)
		}
	}
	if a, b := max(lo, s.lo), min(hi, s.lo+s.s); a < b {
		return nil, s.dc.unstage(g+uintptr(4*(a-lo)), h[a-lo:b-lo])
	}
	return nil, nil
}

// gatherUnit starts filling dst with the parameters [lo, hi): this
// rank's piece copied from its shard (on the model's stream), every
// piece broadcast from its owner (over NCCL after an event recorded on
// the model's stream after that copy, which also orders the broadcasts
// after the block's last readers and the shard's update; returning how
// to make the model's stream wait for them: an event recorded after the
// unit's last piece; through host memory: at once).
func (s *deviceZero) gatherUnit(ctx context.Context, lo, hi int, dst uintptr) (func() error, error) {
	if a, b := max(lo, s.lo), min(hi, s.lo+s.s); a < b {
		if err := s.d.Stream().CopyAsync(dst+uintptr(4*(a-lo)), s.d.ParamShard()+uintptr(4*(a-s.lo)), 4*(b-a), cuda.DeviceToDevice); err != nil {
			return nil, err
		}
	}
	if s.dc.direct {
		octx, done, err := s.st.orderedNew(ctx)
		if err != nil {
			return nil, err
		}
		for _, b := range s.split(lo, hi) {
			w, err := s.gc.Broadcast(octx, s.dc.buf(dst+uintptr(4*(b.lo-lo)), b.hi-b.lo), b.lo/s.s)
			if err != nil {
				return nil, fmt.Errorf("train: gathering parameters [%d, %d) on the device: %w", b.lo, b.hi, err)
			}
			s.st.track(w, "gathering parameters", b.lo, b.hi)
		}
		return func() error { return s.st.join(done) }, nil
	}
	if err := s.sync(); err != nil {
		return nil, err
	}
	h, err := s.dc.stage(dst, hi-lo)
	if err != nil {
		return nil, err
	}
	for _, b := range s.split(lo, hi) {
		if err := comm.Run(ctx)(s.c.Broadcast(ctx, comm.FromSlice(h[b.lo-lo:b.hi-lo]), b.lo/s.s)); err != nil {
			return nil, fmt.Errorf("train: gathering parameters [%d, %d) through host memory: %w", b.lo, b.hi, err)
		}
	}
	return nil, s.dc.unstage(dst, h)
}

// unshard gathers the whole parameter buffer on the device (stage 3,
// for evaluations: the ranks may evaluate different numbers of batches,
// so the per-unit gathers, collectives, cannot run per batch).
func (s *deviceZero) unshard(ctx context.Context) error {
	return s.d.Unshard(func(full uintptr) error {
		if err := s.dc.allGather(ctx, full, s.s); err != nil {
			return fmt.Errorf("train: gathering the parameters %s: %w", s.dc.backendNote(), err)
		}
		return nil
	})
}

// ClipGrads clips this rank's shard of the gradient by the whole
// gradient's norm (the shards' squared norms all-reduced).
func (s *deviceZero) ClipGrads(ctx context.Context, max float64) (float64, error) {
	norm, err := s.clipGrads(ctx, max)
	return norm, s.note(err)
}

func (s *deviceZero) clipGrads(ctx context.Context, max float64) (float64, error) {
	return s.d.ClipShard(max, func(local float64) (float64, error) {
		v := []float64{local * local}
		if s.c.Size() > 1 {
			if err := comm.Run(ctx)(s.c.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
				return 0, fmt.Errorf("train: summing the gradient norm over the ranks: %w", err)
			}
		}
		return math.Sqrt(v[0]), nil
	})
}

// clipQueued clips this rank's shard of the gradients by the whole
// gradient's norm with no wait for the device over NCCL
// (devmodel.ClipShardQueued: the shard's norm squared on the device, the
// squares all-reduced there, ordered with the model's stream as the
// gradients' collectives are, the factor computed there): the same bits
// as ClipGrads, which reads the shard's norm on the host and sums the
// squares there. Through a host backend the square comes down, is summed
// and goes back up. The norm goes to the log GradNorms reads.
// Collective.
func (s *deviceZero) clipQueued(ctx context.Context) error {
	return s.d.ClipShardQueued(s.clip, func(sq uintptr) error {
		if s.c.Size() == 1 {
			return nil
		}
		if !s.dc.direct {
			return s.sumOnHost(ctx, sq)
		}
		octx, done, err := s.st.orderedNew(ctx)
		if err != nil {
			return err
		}
		w, err := s.c.AllReduce(octx, comm.DeviceBuffer(sq, s.dc.dev, comm.Float64, 1), comm.Sum)
		if err != nil {
			return fmt.Errorf("train: summing the gradient norm over the ranks on the device: %w", err)
		}
		s.st.track(w, "summing the gradient norm's square of", s.lo, s.lo+s.s)
		return s.st.join(done)
	})
}

// sumOnHost sums the float64 at sq over the ranks through host memory
// (a host backend): the model's stream waits for nothing else.
func (s *deviceZero) sumOnHost(ctx context.Context, sq uintptr) error {
	if err := s.sync(); err != nil {
		return err
	}
	h, err := s.dc.stage(sq, 2) // a float64's bytes
	if err != nil {
		return err
	}
	v := []float64{*(*float64)(unsafe.Pointer(&h[0]))}
	if err := comm.Run(ctx)(s.c.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
		return fmt.Errorf("train: summing the gradient norm over the ranks: %w", err)
	}
	return s.dc.unstage(sq, unsafe.Slice((*float32)(unsafe.Pointer(&v[0])), 2))
}

// LastGradNorm is the global norm of the gradient the last Update
// clipped, before clipping (train.UpdateClipper): 8 bytes down, a wait
// for the device.
func (s *deviceZero) LastGradNorm() (float64, error) { return s.d.GradNorm() }

// GradNorms are every Update's norm (train.GradNormLogger), logged on
// the device.
func (s *deviceZero) GradNorms() ([]float64, error) { return s.d.GradNorms() }

// Update updates this rank's shard on the device, zeroes the gradients
// and (stages 1 and 2) all-gathers the parameters; stage 3 gathers them
// unit by unit in the next step.
func (s *deviceZero) Update(ctx context.Context) error { return s.note(s.update(ctx)) }

func (s *deviceZero) update(ctx context.Context) error {
	s.stale, s.gathered = true, s.c.Size() == 1
	if s.clip > 0 {
		if err := s.clipQueued(ctx); err != nil {
			return err
		}
	}
	if err := s.d.Update(); err != nil {
		return err
	}
	if err := s.d.ZeroGrad(); err != nil {
		return err
	}
	if s.stage < 3 {
		return s.gather(ctx)
	}
	return nil
}

func (s *deviceZero) SetLR(lr float64) {
	s.d.SetLR(lr)
	s.e.Optimizer().SetLR(lr)
}

// toHost copies the device's parameters, batch-norm statistics and shard
// of the optimizer state into the host model and engine, if they changed
// since the last copy.
func (s *deviceZero) toHost() error { return s.copyDown(s.e.Optimizer()) }

// ready gathers the parameters, gives every rank rank 0's batch-norm
// statistics and copies the state down: before an evaluation on the
// host or a save. Collective.
func (s *deviceZero) ready(ctx context.Context) error {
	if err := s.gather(ctx); err != nil {
		return err
	}
	if err := s.syncBN(ctx); err != nil {
		return err
	}
	if err := comm.Agree(ctx, s.c, s.toHost()); err != nil || s.stage < 3 || s.c.Size() == 1 {
		return err
	}
	// stage 3: the device holds this rank's shard; the host's copy
	// takes the others' from them
	all, r := comm.FromSlice(s.m.Flat.Value), s.c.Rank()
	if err := comm.Run(ctx)(s.c.AllGather(ctx, all, all.Slice(r*s.s, (r+1)*s.s))); err != nil {
		return fmt.Errorf("train: gathering the parameters on the host: %w", err)
	}
	return nil
}

// EvalBatches evaluates on the device with the gathered parameters.
func (s *deviceZero) EvalBatches(ctx context.Context, eval func(batch train.EvalBatch) error) error {
	if err := s.gather(ctx); err != nil {
		return err
	}
	if s.stage == 3 {
		if err := s.unshard(ctx); err != nil {
			return err
		}
		err := s.deviceBase.EvalBatches(ctx, eval)
		return errors.Join(err, s.d.Reshard())
	}
	return s.deviceBase.EvalBatches(ctx, eval)
}

// Eval evaluates the host model, copied from the device (Run evaluates
// with EvalBatches instead).
func (s *deviceZero) Eval(ctx context.Context, eval func() error) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return eval()
}

func (s *deviceZero) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return train.SaveZero(ctx, s.c, path, s.m, s.e, pos, train.WithMeta(meta, "strategy", s.name))
}

func (s *deviceZero) SnapshotSave(ctx context.Context, path string, pos train.Position, meta map[string]string) ([]func() error, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	return train.SnapshotZero(ctx, s.c, path, s.m, s.e, pos, train.WithMeta(meta, "strategy", s.name), &s.snaps)
}

// NonFinite: this rank's shard of the parameters (the rest of the host's
// copy may be behind, with stage 3) and of the optimizer state.
func (s *deviceZero) NonFinite() string {
	if err := s.toHost(); err != nil {
		return "the device's state (" + err.Error() + ")"
	}
	p := s.m.NumParams()
	lo, hi := min(s.lo, p), min(s.lo+s.s, p)
	if w := train.ParamsNonFinite(s.m, s.m.Flat.Value[lo:hi], lo); w != "" {
		return w
	}
	return train.OptimizerNonFinite(s.e.Optimizer())
}

// Load reads the checkpoint into the host model and a full-size
// optimizer, of which the engine takes its shard, and copies both up.
func (s *deviceZero) Load(_ context.Context, path string) (train.Position, error) {
	full, err := optim.New(s.opt, s.m.NumParams())
	if err != nil {
		return train.Position{}, err
	}
	pos, _, err := train.LoadCheckpoint(path, s.m, full)
	if err != nil {
		return pos, err
	}
	st, t := full.State()
	if err := s.e.LoadOptimizerState(st, t); err != nil {
		return pos, fmt.Errorf("%w: %w", train.ErrCheckpoint, err)
	}
	if err := s.copyUp(s.e.Optimizer()); err != nil {
		return pos, err
	}
	s.gathered = true
	return pos, nil
}

// Memory: the model state on the device between steps (the host's
// copies aside): the parameter and gradient buffers (whole, or this
// rank's shard of them: stage 2 the gradients', stage 3 both), this
// rank's shard of the optimizer state.
func (s *deviceZero) Memory() (train.MemoryBytes, int64) {
	p, g := int64(s.d.N)*4, int64(s.d.N)*4
	if s.stage >= 2 {
		g = int64(s.s) * 4
	}
	if s.stage == 3 {
		p = int64(s.s) * 4
	}
	return train.MemoryBytes{Params: p, Grads: g, Optimizer: train.OptimizerBytes(s.e.Optimizer())}, 0
}

// Report: peak device memory; the buckets reduced during backward, if
// any.
func (s *deviceZero) Report(ctx context.Context, sum *train.Summary) error {
	if err := s.deviceBase.Report(ctx, sum); err != nil {
		return err
	}
	sum.Overlap = len(s.buckets) > 0
	sum.Buckets = len(s.buckets)
	if s.stage >= 2 && s.dc.direct && s.c.Size() > 1 {
		sum.Overlap, sum.Buckets = true, s.pieces
	}
	return nil
}

// Close waits for the collectives still pending (on the training Comm
// and stage 3's gathers' Comm) and frees the device state (closeDevice,
// quiesce: bounded, aborting both Comms where they do not end), then
// closes the gathers' Comm and the host engine.
func (s *deviceZero) Close() error {
	comms := []comm.Comm{s.c}
	if s.gc != nil {
		comms = append(comms, s.gc)
	}
	err := s.closeDevice(comms...)
	var gerr error
	if s.gc != nil {
		gerr = s.gc.Close()
	}
	return errors.Join(err, gerr, s.e.Close())
}
