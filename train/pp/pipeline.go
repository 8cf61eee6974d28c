package pp

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/pipeline"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/internal/rankdev"
)

// Pipeline parallelism (package pipeline), combinable with data
// parallelism. Checkpoints are DDP's files: the stages' parameters and
// optimizer state are gathered into the whole model and a full-size
// optimizer first, so they resume with any strategy and split.

func init() {
	train.Register("pipeline", train.Factory{
		Doc:     "pipeline parallel: -stages, -microbatches, -schedule, -balance",
		Options: func() train.Options { return NewOptions() },
		Check:   check,
		New:     newPipeline,
		Device:  true,
	})
}

// Options are -strategy pipeline's options. The zero value is the
// defaults.
type Options struct {
	// Stages is the number of pipeline stages (0: every rank is a stage;
	// fewer: the rest is data parallel, Stages ranks per replica).
	Stages int
	// Microbatches is the number of micro-batches per batch (0: Stages).
	Microbatches int
	// Schedule is gpipe or 1f1b ("": 1f1b), Balance how the stages are
	// chosen: params (equal parameter counts; "" too) or time (measured).
	Schedule string
	Balance  string
}

// NewOptions returns the pipeline's defaults, spelt out (Factory.Options).
func NewOptions() *Options { return &Options{Schedule: "1f1b", Balance: pipeline.ByParams} }

// AddFlags defines -stages, -microbatches, -schedule and -balance.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Stages, "stages", o.Stages, "pipeline stages (default -nproc; with fewer, the rest is data parallel)")
	fs.IntVar(&o.Microbatches, "microbatches", o.Microbatches, "pipeline micro-batches per batch (default: the number of stages)")
	fs.StringVar(&o.Schedule, "schedule", o.Schedule, "pipeline schedule: gpipe or 1f1b")
	fs.StringVar(&o.Balance, "balance", o.Balance, "how pipeline stages are chosen: params (equal parameter counts) or time (every rank times the layers and candidate stages on a micro-batch; equal compute)")
}

// check validates the options (filling in the defaults) and returns the
// number of replicas: cfg.World / Stages.
func check(c *train.Config) (int, error) {
	o := c.Options.(*Options)
	if c.Model == "cnn-bn" || c.SyncBN {
		return 0, fmt.Errorf("-strategy pipeline does not support batch norm (micro-batch statistics differ from the batch's); use mlp or cnn")
	}
	if o.Schedule == "" {
		o.Schedule = "1f1b"
	}
	if o.Schedule != "gpipe" && o.Schedule != "1f1b" {
		return 0, fmt.Errorf("-schedule %q: want gpipe or 1f1b", o.Schedule)
	}
	if o.Balance == "" {
		o.Balance = pipeline.ByParams
	}
	if o.Balance != pipeline.ByParams && o.Balance != pipeline.ByTime {
		return 0, fmt.Errorf("-balance %q: want params or time", o.Balance)
	}
	if o.Stages < 0 || o.Microbatches < 0 {
		return 0, fmt.Errorf("-stages and -microbatches must not be negative")
	}
	if k := o.Stages; c.World > 0 && k > 0 && (k > c.World || c.World%k != 0) {
		return 0, fmt.Errorf("-stages %d does not divide the %d ranks", k, c.World)
	}
	if o.Microbatches > c.Batch {
		return 0, fmt.Errorf("-microbatches %d is more than the batch of %d", o.Microbatches, c.Batch)
	}
	if n, _ := c.CUDADevice(); n >= 0 && o.Balance == pipeline.ByTime {
		return 0, fmt.Errorf("-balance time times the layers on the CPU, not on -device %s: use -balance params", c.Device)
	}
	if o.Stages == 0 {
		return min(c.World, 1), nil
	}
	return c.World / o.Stages, nil
}

var _ train.Strategy = (*pipelineStrategy)(nil)

// pipelineStrategy runs K pipeline stages times D data-parallel replicas
// on K*D ranks. World rank r is stage r%K of replica r/K: each replica's K
// ranks form a pipeline Comm, and each stage's D replicas a data-parallel
// Comm that averages the stage's gradients (one all-reduce of the stage's
// contiguous gradient range) at the end of Step.
type pipelineStrategy struct {
	snaps  train.SnapshotBuffers // save snapshots' buffers, reused
	c      comm.Comm
	p      runner             // cpu or dev
	cpu    *pipeline.Pipeline // on the CPU
	dev    *devicePipe        // on a GPU (device.go)
	stale  bool               // dev: the host's copy of the stage and opt are behind the device
	m      *models.Model
	opt    optim.Optimizer
	cfg    train.Config
	o      *Options
	pc, dp comm.Comm
	k, d   int
}

func newPipeline(ctx context.Context, s train.Setup) (train.Strategy, error) {
	c, m, cfg := s.Comm, s.Model, s.Config
	o := cfg.Options.(*Options)
	k := o.Stages
	if k == 0 {
		k = c.Size()
	}
	if k > c.Size() || c.Size()%k != 0 {
		return nil, fmt.Errorf("%w: -stages %d does not divide the %d ranks", train.ErrConfig, k, c.Size())
	}
	d := c.Size() / k
	r := c.Rank()
	// Every rank starts from rank 0's parameters.
	if err := comm.Run(ctx)(c.Broadcast(ctx, comm.FromSlice(m.Flat.Value), 0)); err != nil {
		return nil, err
	}
	pc, err := c.Split(ctx, r/k, r%k)
	if err != nil {
		return nil, err
	}
	dp, err := c.Split(ctx, r%k, r/k)
	if err != nil {
		pc.Close()
		return nil, err
	}
	fail := func(err error) (train.Strategy, error) {
		pc.Close()
		dp.Close()
		return nil, err
	}
	// Every replica must split the model alike: choose over the world.
	micro := o.Microbatches
	if micro == 0 {
		micro = k
	}
	micro = min(max(micro, 1), cfg.Batch)
	bounds, err := pipeline.Split(ctx, c, m, k, o.Balance, (cfg.Batch+micro-1)/micro)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", train.ErrConfig, err))
	}
	ps := &pipelineStrategy{c: c, m: m, cfg: cfg, o: o, pc: pc, dp: dp, k: k, d: d}
	if n, _ := cfg.CUDADevice(); n >= 0 {
		// Every rank checks every stage, so that all refuse alike.
		for st := 0; st < k; st++ {
			if err := devmodel.CheckStage(m, bounds[st], bounds[st+1]); err != nil {
				return fail(fmt.Errorf("%w: -device %s: stage %d: %v", train.ErrConfig, cfg.Device, st, err))
			}
		}
		// Activations go as device buffers: a host backend's Comms
		// stage them through host memory.
		pc, dp = deviceComm(pc), deviceComm(dp) // fail closes these
		ps.pc, ps.dp = pc, dp
		dev, direct := rankdev.Device(c, n)
		// ClipGrad: the stage logs the norms of Update's clipping
		// (devicePipe.clip)
		ps.dev, err = newDevicePipe(ctx, ps.pc, m, bounds, micro, o.Schedule, cfg.Batch, dev, devmodel.Config{Optim: cfg.OptimConfig(), Precision: gemm.Precision(cfg.Precision), ClipGrad: cfg.ClipGrad})
		if err != nil {
			err = fmt.Errorf("train: -device %s: %w", cfg.Device, err)
		} else {
			ps.dev.direct = direct
		}
		// A stage that could not be placed (device memory) fails every
		// rank, before any waits for it.
		if err = comm.Agree(ctx, c, err); err == nil {
			err = ps.dev.connect(ctx)
		}
		if err != nil {
			if ps.dev != nil {
				ps.dev.Close()
			}
			return fail(err)
		}
		ps.p = ps.dev
	} else {
		p, err := pipeline.New(ctx, pc, m, pipeline.Config{Boundaries: bounds, Micro: o.Microbatches, Schedule: o.Schedule}, cfg.Batch)
		if err != nil {
			return fail(fmt.Errorf("%w: %v", train.ErrConfig, err))
		}
		ps.p, ps.cpu = p, p
	}
	_, n := ps.p.Range()
	if ps.opt, err = optim.New(cfg.OptimConfig(), n); err != nil {
		ps.p.Close()
		return fail(err)
	}
	if ps.dev != nil {
		return &devicePipelineStrategy{ps}, nil
	}
	return ps, nil
}

// devicePipelineStrategy is the pipeline on the device, which also
// evaluates there (train.BatchEvaluator): the stage ranks of a replica
// evaluate the same batches (train.EvalSharder: the test set is split
// over the replicas), as they train on them. With -clip-grad its Update
// clips on the device first (devicePipe.clip: no wait for the device in
// the step) and it is a train.GradNormLogger: the norms are logged there
// and read once, for the summary.
type devicePipelineStrategy struct{ *pipelineStrategy }

var _ train.GradNormLogger = (*devicePipelineStrategy)(nil)

// GradNorms are every Update's global norm before clipping
// (train.GradNormLogger), logged on the device: one wait for it.
func (s *devicePipelineStrategy) GradNorms() ([]float64, error) { return s.dev.gradNorms() }

// LastGradNorm is the last Update's global norm before clipping
// (train.UpdateClipper; 0 without -clip-grad): a wait for the device.
func (s *devicePipelineStrategy) LastGradNorm() (float64, error) {
	ns, err := s.dev.gradNorms()
	if err != nil || len(ns) == 0 {
		return 0, err
	}
	return ns[len(ns)-1], nil
}

// EvalComm is the replicas' Comm of the stage (train.EvalSharder).
func (s *devicePipelineStrategy) EvalComm() comm.Comm { return s.dp }

// EvalBatches runs each evaluation batch through the stages on the
// device (devicePipe.eval): the last stage's loss and correct count are
// every stage's (train.BatchEvaluator).
func (s *devicePipelineStrategy) EvalBatches(ctx context.Context, eval func(batch train.EvalBatch) error) error {
	return eval(func(x []float32, y []int32) (float64, int, error) {
		return s.dev.eval(ctx, x, y)
	})
}

// DataRank: the K ranks of one pipeline share each batch.
func (s *pipelineStrategy) DataRank() (rank, world int) { return s.c.Rank() / s.k, s.d }

// Step runs the pipeline on this replica's batch and then averages each
// stage's gradients over the replicas (one all-reduce of the stage's
// contiguous gradient range), so that, as Strategy.Step says, they are
// synchronised when it returns (gradient clipping reads them there).
func (s *pipelineStrategy) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	loss, err := s.p.Step(ctx, x, y)
	if err != nil {
		return float32(loss), err
	}
	if s.d > 1 {
		actx := ctx
		if s.dev != nil { // the stage's (non-blocking) stream wrote them: the all-reduce waits for it
			if actx, err = s.dev.ordered(ctx, evGrads); err != nil {
				return 0, err
			}
		}
		if err := comm.Run(ctx)(s.dp.AllReduce(actx, s.grads(), comm.Avg)); err != nil {
			return 0, fmt.Errorf("train: averaging stage gradients over replicas: %w", err)
		}
	}
	return float32(loss), nil
}

// Eval gives every rank the whole model first.
func (s *pipelineStrategy) Eval(ctx context.Context, eval func() error) error {
	if err := s.gatherParams(ctx); err != nil {
		return err
	}
	return eval()
}

// grads is the stage's gradient range: host memory, or device memory
// on a GPU.
func (s *pipelineStrategy) grads() comm.Buffer {
	if s.dev != nil {
		st := s.dev.st
		return comm.DeviceBuffer(st.Grads, s.dev.dev, comm.Float32, st.N)
	}
	return comm.FromSlice(s.cpu.Grads())
}

func (s *pipelineStrategy) Update(ctx context.Context) error {
	if s.dev != nil {
		s.stale = true
		if s.cfg.ClipGrad > 0 { // an UpdateClipper on the device
			if err := s.dev.clip(ctx, s.cfg.ClipGrad); err != nil {
				return err
			}
		}
		if err := s.dev.st.Update(); err != nil {
			return err
		}
		return s.dev.st.ZeroGrad()
	}
	s.cpu.Update(s.opt)
	return nil
}

// ClipGrads: the norm is over the stages of this rank's pipeline (each
// holds its range, averaged over the replicas in Step), so that no
// replica's copy is counted twice. On a GPU each stage's norm comes down
// (8 bytes) and the sum of their squares is all-reduced on the host: the
// reference for the device's own clipping, which -clip-grad uses there
// (devicePipelineStrategy is an UpdateClipper: Run does not call
// ClipGrads, and Update clips on the device, bit for bit this).
func (s *pipelineStrategy) ClipGrads(ctx context.Context, max float64) (float64, error) {
	if s.dev == nil {
		return train.ClipGradNorm(ctx, s.pc, s.cpu.Grads(), max)
	}
	st := s.dev.st
	local, err := st.GradNorm()
	if err != nil {
		return 0, err
	}
	ss := []float64{local * local}
	if err := comm.Run(ctx)(s.pc.AllReduce(ctx, comm.FromSlice(ss), comm.Sum)); err != nil {
		return 0, fmt.Errorf("train: summing the gradient norm over the stages: %w", err)
	}
	norm := math.Sqrt(ss[0])
	return norm, st.ClipGrads(norm, max)
}

func (s *pipelineStrategy) SetLR(lr float64) {
	s.opt.SetLR(lr)
	if s.dev != nil {
		s.dev.st.SetLR(lr)
	}
}

// toHost copies a GPU stage's parameters into the host model's range and
// its optimizer state into opt, when an update changed them since.
func (s *pipelineStrategy) toHost() error {
	if s.dev == nil || !s.stale {
		return nil
	}
	if err := s.dev.st.CopyToHost(); err != nil {
		return fmt.Errorf("train: copying stage %d from the device: %w", s.dev.stage, err)
	}
	if err := s.dev.st.OptimStateToHost(s.opt); err != nil {
		return fmt.Errorf("train: copying stage %d's optimizer state from the device: %w", s.dev.stage, err)
	}
	s.stale = false
	return nil
}

// gatherParams gives every rank the whole model (each stage's range from
// its rank in the pipeline), for evaluation and checkpoints.
func (s *pipelineStrategy) gatherParams(ctx context.Context) error {
	if s.dev != nil {
		if err := comm.Agree(ctx, s.c, s.toHost()); err != nil {
			return err
		}
	}
	bounds := s.p.Boundaries()
	for st := 0; st < s.k; st++ {
		off, n := s.m.StageRange(bounds[st], bounds[st+1])
		if n == 0 {
			continue
		}
		if err := comm.Run(ctx)(s.pc.Broadcast(ctx, comm.FromSlice(s.m.Flat.Value[off:off+n]), st)); err != nil {
			return fmt.Errorf("train: gathering stage %d's parameters: %w", st, err)
		}
	}
	return nil
}

// fullState gathers the whole model's parameters onto every rank and
// returns a full-size optimizer holding every stage's state at its
// stage's offsets, for a DDP-format checkpoint.
func (s *pipelineStrategy) fullState(ctx context.Context) (optim.Optimizer, error) {
	if err := s.gatherParams(ctx); err != nil {
		return nil, err
	}
	mine, step := s.opt.State()
	full, err := optim.New(s.cfg.OptimConfig(), s.m.NumParams())
	if err != nil {
		return nil, err
	}
	fst, _ := full.State()
	off, _ := s.p.Range()
	names := make([]string, 0, len(fst))
	for k := range fst {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		copy(fst[k][off:], mine[k])
	}
	bounds := s.p.Boundaries()
	for st := 0; st < s.k; st++ {
		o, n := s.m.StageRange(bounds[st], bounds[st+1])
		for _, k := range names {
			if n == 0 {
				continue
			}
			if err := comm.Run(ctx)(s.pc.Broadcast(ctx, comm.FromSlice(fst[k][o:o+n]), st)); err != nil {
				return nil, fmt.Errorf("train: gathering stage %d's optimizer state: %w", st, err)
			}
		}
	}
	full.SetStep(step)
	return full, nil
}

// Save gathers the stages into the whole model and a full-size optimizer
// and saves them as DDP does.
func (s *pipelineStrategy) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	full, err := s.fullState(ctx)
	if err != nil {
		return err
	}
	return train.SaveFull(ctx, s.c, path, s.m, full, pos, train.WithMeta(meta, "world_size", strconv.Itoa(s.c.Size())))
}

// SnapshotSave gathers the stages (a collective) and lets rank 0 write
// them in the background.
func (s *pipelineStrategy) SnapshotSave(ctx context.Context, path string, pos train.Position, meta map[string]string) ([]func() error, error) {
	full, err := s.fullState(ctx)
	if err != nil {
		return nil, err
	}
	if s.c.Rank() != 0 {
		return []func() error{nil}, nil
	}
	return []func() error{train.SnapshotFull(path, s.m, full, pos, train.WithMeta(meta, "world_size", strconv.Itoa(s.c.Size())), &s.snaps)}, nil
}

// Load reads the whole model (every rank holds it) and a full-size
// optimizer, of which the stage keeps its range.
func (s *pipelineStrategy) Load(_ context.Context, path string) (train.Position, error) {
	full, err := optim.New(s.cfg.OptimConfig(), s.m.NumParams())
	if err != nil {
		return train.Position{}, err
	}
	pos, _, err := train.LoadCheckpoint(path, s.m, full)
	if err != nil {
		return train.Position{}, err
	}
	fst, step := full.State()
	mine, _ := s.opt.State()
	off, n := s.p.Range()
	for k, v := range mine {
		copy(v, fst[k][off:off+n])
	}
	s.opt.SetStep(step)
	if s.dev != nil {
		if err := s.dev.st.CopyFromHost(); err != nil {
			return pos, fmt.Errorf("train: copying the resumed stage to the device: %w", err)
		}
		if err := s.dev.st.OptimStateFromHost(s.opt); err != nil {
			return pos, fmt.Errorf("train: copying the resumed optimizer state to the device: %w", err)
		}
		s.stale = false
	}
	return pos, nil
}

// NonFinite: this stage's parameters and optimizer state (the save
// gathers every stage's).
func (s *pipelineStrategy) NonFinite() string {
	if err := s.toHost(); err != nil {
		return "the device's state (" + err.Error() + ")"
	}
	off, n := s.p.Range()
	if w := train.ParamsNonFinite(s.m, s.m.Flat.Value[off:off+n], off); w != "" {
		return w
	}
	return train.OptimizerNonFinite(s.opt)
}

func (s *pipelineStrategy) Memory() (train.MemoryBytes, int64) {
	if s.dev != nil {
		// The stage's range on the device (the host's copies aside);
		// transient: the activations held for backward passes.
		n := int64(s.dev.st.N) * 4
		return train.MemoryBytes{Params: n, Grads: n, Optimizer: train.OptimizerBytes(s.opt)}, s.p.Stats().PeakHeldBytes
	}
	// Every rank allocates the whole model's buffers; only its stage's
	// range is trained.
	return train.MemoryBytes{Params: int64(len(s.m.Flat.Value)) * 4, Grads: int64(len(s.m.Flat.Grad)) * 4, Optimizer: train.OptimizerBytes(s.opt)}, s.p.Stats().PeakHeldBytes
}

func (s *pipelineStrategy) Report(ctx context.Context, sum *train.Summary) error {
	ps, err := s.summary(ctx, s.c)
	if err != nil {
		return err
	}
	sum.Pipeline = ps
	if s.dev != nil {
		// The most any stage held: its buffers and activations.
		peak := []float64{float64(s.dev.peakBytes())}
		if err := comm.Run(ctx)(s.c.AllReduce(ctx, comm.FromSlice(peak), comm.Max)); err != nil {
			return err
		}
		sum.PeakDeviceBytes = int64(peak[0])
	}
	return nil
}

func (s *pipelineStrategy) Close() error {
	err := s.p.Close()
	s.dp.Close()
	s.pc.Close()
	return err
}

// StageStats is one pipeline stage's measurements in the summary.
type StageStats struct {
	Rank          int     `json:"rank"`
	Stage         int     `json:"stage"`
	Replica       int     `json:"replica"`
	BusyMs        float64 `json:"busy_ms"`
	IdleMs        float64 `json:"idle_ms"`
	Bubble        float64 `json:"bubble"` // idle / (busy + idle)
	PeakHeld      int     `json:"peak_held_microbatches"`
	PeakHeldBytes int64   `json:"peak_activation_bytes"`
	// The stage's schedule and its ops' compute times per step, for
	// the replay (not in the JSON).
	Ops     []pipeline.Op     `json:"-"`
	OpTimes [][]time.Duration `json:"-"`
}

// Summary is the pipeline part of the run's summary
// (train.Summary.Pipeline).
type Summary struct {
	Stages       int     `json:"stages"`
	Replicas     int     `json:"replicas"`
	Microbatches int     `json:"microbatches"`
	Schedule     string  `json:"schedule"`
	Balance      string  `json:"balance"` // how Boundaries were chosen: params or time
	Boundaries   []int   `json:"boundaries"`
	Bubble       float64 `json:"bubble"`        // mean over stages
	BubbleTheory float64 `json:"bubble_theory"` // (K-1)/(M+K-1)
	// The bubble the schedule would have with instant communication
	// (pipeline.Replay): with every op's measured compute time in each
	// step (ReplayBubble: stage imbalance and compute jitter), and with
	// each op's mean time over the steps (ReplayMeanBubble: imbalance
	// only). Bubble - ReplayBubble is what communication, waking up and
	// bookkeeping add.
	ReplayBubble     float64      `json:"bubble_replay"`
	ReplayMeanBubble float64      `json:"bubble_replay_mean"`
	PerStage         []StageStats `json:"per_stage"`
}

// Text is the summary's line in the text output.
func (p *Summary) Text() string {
	return fmt.Sprintf("pipeline: %d stage(s) x %d replica(s), layers %v, %d micro-batches (%s): bubble %.3f, theory (K-1)/(M+K-1) %.3f, with instant messages %.3f (%.3f at mean op times)",
		p.Stages, p.Replicas, p.Boundaries, p.Microbatches, p.Schedule, p.Bubble, p.BubbleTheory, p.ReplayBubble, p.ReplayMeanBubble)
}

func (s *pipelineStrategy) summary(ctx context.Context, c comm.Comm) (*Summary, error) {
	st := s.p.Stats()
	mine := StageStats{Rank: c.Rank(), Stage: s.p.Stage(), Replica: c.Rank() / s.k,
		BusyMs: st.Busy.Seconds() * 1e3, IdleMs: st.Idle.Seconds() * 1e3, PeakHeld: st.PeakHeld, PeakHeldBytes: st.PeakHeldBytes,
		Ops: s.p.Ops(), OpTimes: st.OpTimes}
	if t := st.Busy + st.Idle; t > 0 {
		mine.Bubble = st.Idle.Seconds() / t.Seconds()
	}
	all, err := comm.AllGatherObject(ctx, c, mine)
	if err != nil {
		return nil, err
	}
	m := len(s.p.MicroBatches())
	ps := &Summary{Stages: s.k, Replicas: s.d, Microbatches: m, Schedule: s.o.Schedule, Balance: s.o.Balance, Boundaries: s.p.Boundaries(),
		BubbleTheory: float64(s.k-1) / float64(m+s.k-1), PerStage: all}
	for _, x := range all {
		ps.Bubble += x.Bubble / float64(len(all))
	}
	ps.ReplayBubble, ps.ReplayMeanBubble = replayBubbles(all, s.k)
	for i := range ps.PerStage {
		ps.PerStage[i].Ops, ps.PerStage[i].OpTimes = nil, nil
	}
	return ps, nil
}

// replayBubbles replays every recorded step of each replica's k stages
// (pipeline.Replay) and returns the mean over stages of idle / span, with
// the measured op times and with each op's mean time.
func replayBubbles(all []StageStats, k int) (actual, mean float64) {
	byReplica := map[int][]StageStats{}
	for _, x := range all {
		byReplica[x.Replica] = append(byReplica[x.Replica], x)
	}
	n := 0
	for _, st := range byReplica {
		if len(st) != k {
			return 0, 0
		}
		slices.SortFunc(st, func(a, b StageStats) int { return a.Stage - b.Stage })
		steps := len(st[0].OpTimes)
		ops := make([][]pipeline.Op, k)
		for s, x := range st {
			ops[s] = x.Ops
			steps = min(steps, len(x.OpTimes))
		}
		if steps == 0 {
			return 0, 0
		}
		avg := make([][]time.Duration, k)
		for s, x := range st {
			avg[s] = make([]time.Duration, len(x.Ops))
			for j := 0; j < steps; j++ {
				for o, d := range x.OpTimes[j] {
					avg[s][o] += d / time.Duration(steps)
				}
			}
		}
		var span, spanMean time.Duration
		busy, busyMean := make([]time.Duration, k), make([]time.Duration, k)
		for j := 0; j < steps; j++ {
			d := make([][]time.Duration, k)
			for s, x := range st {
				d[s] = x.OpTimes[j]
			}
			sp, b, err := pipeline.Replay(ops, d)
			if err != nil {
				return 0, 0
			}
			span += sp
			for s := range b {
				busy[s] += b[s]
			}
		}
		sp, b, err := pipeline.Replay(ops, avg)
		if err != nil {
			return 0, 0
		}
		spanMean, busyMean = sp*time.Duration(steps), b
		for s := 0; s < k; s++ {
			actual += float64(span-busy[s]) / float64(span)
			mean += float64(spanMean-busyMean[s]*time.Duration(steps)) / float64(spanMean)
			n++
		}
	}
	return actual / float64(n), mean / float64(n)
}
