package devmodel

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// Config says where and how a model is placed.
type Config struct {
	Device int // the CUDA device
	// Batch is the samples per step that Place plans for (a step with
	// another count plans again, in the plan's region where it fits).
	Batch int
	// Optim is the optimizer (optim's names and defaults: sgd with
	// momentum, adam, adamw).
	Optim optim.Config
	// ClipGrad, when positive, clips the gradients to that global L2
	// norm before each update (train's -clip-grad). With a Shard, Update
	// does not clip: the norm is over every rank's shard (ClipShard). A
	// Stage never clips by itself: it keeps ClipQueued's norms' log.
	ClipGrad float64
	// Precision is the matrix products' precision, by PyTorch's names
	// (package gemm): "fp32" (the default, ""), "tf32" (allow_tf32) or
	// "bf16" (autocast to bfloat16: the products' inputs; parameters,
	// gradients, optimizer state and every other layer stay fp32).
	Precision gemm.Precision
	// SyncBN, when set, makes every batch norm a SyncBatchNorm across the
	// data-parallel ranks (see SyncBNFunc; HostSyncBN makes one from an
	// nn.SyncFunc such as syncbn's).
	SyncBN SyncBNFunc
	// Shard, when Hi > 0, is the range [Lo, Hi) of the flat buffers
	// whose optimizer state this model holds and updates (ZeRO: a rank's
	// shard): the state buffers hold Hi-Lo values and Update changes the
	// parameters of that range only. Zero: the whole model.
	Shard Range
	// ShardGrads (ZeRO-2; needs a Shard) keeps only the shard's
	// gradients between units: Grads holds Shard.Len() values (the
	// shard's first at GradShard), backward writes each unit's gradients
	// into a block of the unit's exact size (cached across steps) that
	// ReduceGrads reduces and that is released once this rank's part is
	// added into the shard (zero.go).
	ShardGrads bool
	// ShardParams (ZeRO-3; implies ShardGrads) keeps only the shard's
	// parameters: each unit's are gathered (GatherParams) into a cached
	// block before its forward and again before its backward, and freed
	// after; Unshard gathers them all (Eval needs them whole).
	ShardParams bool
	// UnitFloats is the fewest parameters of a unit of ShardGrads and
	// ShardParams (a unit closes at the first op edge past it): small,
	// a unit per layer; 0 or 1, a unit per op with parameters.
	UnitFloats int
}

// Range is a range [Lo, Hi) of the flat buffers.
type Range struct{ Lo, Hi int }

// Len is Hi - Lo.
func (r Range) Len() int { return r.Hi - r.Lo }

// Model is an nn.Model placed on a device: parameters (Params),
// gradients (Grads) and the optimizer's state in device memory, one flat
// buffer each, every tensor at its nn.ParamInfo offset (the host model's
// Flat.Value and Flat.Grad layout, padding included), batch norm's
// running statistics beside them, and the layers' activations and
// scratch in the training plan's region (memory.go). A Model is not safe
// for concurrent use.
type Model struct {
	Host *nn.Model
	// Params and Grads are device addresses of N float32s.
	Params, Grads uintptr
	N             int
	// SampleOffset is the index of this rank's first sample in the global
	// batch, for Dropout's masks (nn's Graph.SampleOffset).
	SampleOffset int
	// OnGradsReady, when set, is called during ForwardBackward's backward
	// pass, last layers first, each time the gradients of a longer tail
	// [from, N) of Grads are complete: every kernel that writes them has
	// been queued on the model's stream (Stream, a non-blocking stream:
	// see streams.go); they may not be computed yet, so work on another
	// stream must wait for an event recorded on Stream then (a
	// cuda.Order's After). DDP starts a bucket's all-reduce there,
	// overlapping the rest of backward. An error stops the pass and is
	// returned.
	OnGradsReady func(from int) error
	// ReduceGrads, with Config.ShardGrads, is called during backward
	// each time a unit's gradients [lo, hi) are queued (not computed:
	// see OnGradsReady) on the model's stream into the block at g (hi-lo
	// float32s, [lo, hi) of the flat layout), after is an event recorded
	// on the stream then. It starts averaging them over the ranks into
	// each value's owner, after that event, and returns a function that
	// makes work queued on the stream after it see this rank's shard's
	// part of g hold the average (waiting on the device for an event
	// recorded after the reduction, or on the host; nil: nothing to wait
	// for); ForwardBackward calls it after queueing the next unit's
	// backward, then adds that part into the shard's gradients and gives
	// the block back. Nil: one rank (g is the average).
	ReduceGrads func(lo, hi int, g uintptr, after *cuda.Event) (wait func() error, err error)
	// GatherParams, with Config.ShardParams, starts filling the block at
	// dst with the parameters [lo, hi) of the flat layout, every rank's
	// shard of them (this rank's is at ParamShard), after after, an event
	// recorded on the model's stream once the work that last used the
	// block and that writes the shard was queued there (the gather must
	// wait for it on the device), and returns a function that makes work
	// queued on the stream after it see the parameters (waiting on the
	// device for an event recorded after the gather, or on the host; nil:
	// they are there for work queued after GatherParams returns).
	// ForwardBackward starts the next unit's gather before queueing this
	// unit's ops and calls wait before queueing the next unit's. Nil: one
	// rank.
	GatherParams func(lo, hi int, dst uintptr, after *cuda.Event) (wait func() error, err error)

	dev  int
	cfg  Config
	opt  optim.Config // defaults filled
	lr   float64
	step int64
	run  int64 // forward passes, Dropout's run count

	k    *kernels.Kernels
	s    *cuda.Stream // non-blocking (streams.go)
	io   hostIO       // pinned memory and events of the stream's copies
	h    *gemm.Engine
	pool *cuda.Pool

	state  [2]uintptr // momentum; or Adam's m and v
	clipWS uintptr
	// Config.Shard was given (ZeRO, even a rank's whole-model shard at
	// one rank): Update does not clip, the caller does (ClipShard)
	shardGiven bool
	// the norms of Update's clippings, each copied on the stream from
	// clipWS into the device log after clipWS (normCap float64s; normN
	// there), read with no step waiting for them: by GradNorms, or when
	// the log is full, into normHost
	normN    int
	normHost []float64
	bns      []*bnDev
	owned    []uintptr // cudaMalloc'd at placement, freed by Close

	plan              *plan
	fixed, live, peak int64 // bytes: placement's, the pool's in use, peak of both

	// forward-only plans by batch size, in one arena of evalCap bytes at
	// evalMem (evalplan.go)
	evalPlans map[int]*plan
	evalMem   uintptr
	evalCap   int

	// ZeRO-2, 3 (zero.go): Params and Grads between units (the shard's
	// buffer less Shard.Lo values, with ShardParams / ShardGrads); the
	// whole parameter buffer while Unshard'd; the units of plan unitsOf
	paramBase, gradBase uintptr
	full                uintptr
	parked              []float32 // the shard's values when its buffer could not be had back (zero.go's unpark)
	unitsOf             *plan
	unitList            []Unit
	umem                unitMem     // the units' blocks
	unitEv              *cuda.Event // zero.go's mark
}

// open loads the kernels on d.dev and makes the model's stream, GEMM
// handle and memory pool (Place, PlaceStage).
func (d *Model) open() (err error) {
	if d.k, err = kernels.Load(d.dev); err != nil {
		return err
	}
	if d.s, err = cuda.NewStream(d.dev, true); err != nil {
		return err
	}
	if err := d.openIO(); err != nil {
		return err
	}
	if d.h, err = gemm.New(d.dev, d.s, gemm.Config{Precision: d.cfg.Precision}); err != nil {
		return err
	}
	d.pool = cuda.NewDevicePool(d.dev, math.MaxInt64)
	return nil
}

// allocState allocates and zeroes the optimizer's state buffers of n
// floats each: none for plain SGD, a momentum buffer for SGD with
// momentum, Adam's two moments.
func (d *Model) allocState(n int) (err error) {
	states := 2
	if d.opt.Name == "sgd" {
		states = 0
		if d.opt.Momentum != 0 {
			states = 1
		}
	}
	for i := 0; i < states; i++ {
		if d.state[i], err = d.malloc(4 * n); err != nil {
			return err
		}
		if err := d.memset(d.state[i], 4*n); err != nil {
			return err
		}
	}
	return nil
}

// bnDev is a batch-norm layer's running statistics on the device.
type bnDev struct {
	host      *nn.BNLayer
	mean, vr  uintptr
	batches   int64
	placedFor int // the host's NumBatches when placed or copied
}

// Place puts m on cfg.Device: it plans every layer for cfg.Batch samples
// (refusing, by the layer's name and type, any layer or combination that
// has no device kernels, before anything runs), copies the parameters and
// batch norm's running statistics up and zeroes the gradients and the
// optimizer's state. Close frees it all.
func Place(m *nn.Model, cfg Config) (_ *Model, err error) {
	if m.Store != nil {
		return nil, fmt.Errorf("devmodel: %s: a model with a parameter store (ZeRO-3) cannot be placed", m.Name)
	}
	if cfg.Batch < 1 {
		return nil, fmt.Errorf("devmodel: %s: batch %d < 1", m.Name, cfg.Batch)
	}
	if err := deviceOptim(m.Name, cfg.Optim); err != nil {
		return nil, err
	}
	if cfg.ClipGrad < 0 || math.IsNaN(cfg.ClipGrad) {
		return nil, fmt.Errorf("devmodel: %s: clip-grad %v", m.Name, cfg.ClipGrad)
	}
	if err := Check(m); err != nil {
		return nil, err
	}
	if sh := cfg.Shard; sh != (Range{}) && (sh.Lo < 0 || sh.Hi <= sh.Lo || sh.Hi > len(m.Flat.Value)) {
		return nil, fmt.Errorf("devmodel: %s: shard [%d, %d) is not a range of the %d flat values", m.Name, sh.Lo, sh.Hi, len(m.Flat.Value))
	}
	if (cfg.ShardGrads || cfg.ShardParams) && cfg.Shard == (Range{}) {
		return nil, fmt.Errorf("devmodel: %s: ShardGrads and ShardParams need a Shard", m.Name)
	}
	shardGiven := cfg.Shard != (Range{})
	if !shardGiven {
		cfg.Shard = Range{0, len(m.Flat.Value)}
	}
	d := &Model{Host: m, N: len(m.Flat.Value), dev: cfg.Device, cfg: cfg, opt: withDefaults(cfg.Optim), lr: cfg.Optim.LR, shardGiven: shardGiven}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := d.open(); err != nil {
		return nil, err
	}
	n := max(d.N, 1)
	// the shard's buffers stand at their place in a flat buffer that is
	// not there (d.Params + 4 Lo is the shard's first value)
	pn, gn, back := n, n, uintptr(0)
	if cfg.ShardParams {
		pn, back = max(cfg.Shard.Len(), 1), uintptr(4*cfg.Shard.Lo)
	}
	if d.gradsSharded() {
		gn = max(cfg.Shard.Len(), 1)
	}
	if d.Params, err = d.malloc(4 * pn); err != nil {
		return nil, err
	}
	d.Params -= back
	if d.Grads, err = d.malloc(4 * gn); err != nil {
		return nil, err
	}
	if d.gradsSharded() {
		d.Grads -= uintptr(4 * cfg.Shard.Lo)
	}
	d.paramBase, d.gradBase = d.Params, d.Grads
	d.cacheWeights(d.Params, d.N) // bf16 autocast's weight cache (autocast.go)
	ns := max(cfg.Shard.Len(), 1)
	if err := d.allocState(ns); err != nil {
		return nil, err
	}
	if cfg.ClipGrad > 0 || ns < n {
		ws := kernels.ClipWorkspace
		if d.cfg.ClipGrad > 0 {
			ws += 8 * normCap // the norms' log (Update's, or ClipShardQueued's)
		}
		if d.clipWS, err = d.malloc(ws); err != nil {
			return nil, err
		}
	}
	for _, b := range m.BNs {
		bd := &bnDev{host: b}
		if bd.mean, err = d.malloc(4 * b.C); err != nil {
			return nil, err
		}
		if bd.vr, err = d.malloc(4 * b.C); err != nil {
			return nil, err
		}
		d.bns = append(d.bns, bd)
	}
	if err := d.CopyFromHost(); err != nil {
		return nil, err
	}
	if err := d.ZeroGrad(); err != nil {
		return nil, err
	}
	if d.plan, err = d.compile(cfg.Batch); err != nil {
		return nil, err
	}
	return d, nil
}

func withDefaults(c optim.Config) optim.Config {
	if c.Name != "sgd" {
		if c.Beta1 == 0 {
			c.Beta1 = 0.9
		}
		if c.Beta2 == 0 {
			c.Beta2 = 0.999
		}
		if c.Eps == 0 {
			c.Eps = 1e-8
		}
	}
	return c
}

// malloc allocates placement memory (parameters, gradients, state).
func (d *Model) malloc(n int) (uintptr, error) {
	p, err := cuda.Malloc(d.dev, n)
	if err != nil {
		return 0, err
	}
	d.owned = append(d.owned, p)
	d.fixed += int64(n)
	d.peak = max(d.peak, d.fixed+d.live)
	return p, nil
}

// Close frees the model's device memory (after its work is done).
func (d *Model) Close() error {
	if d.s != nil {
		d.s.Synchronize()
	}
	d.profileClose() // GDIST_DEVICE_PROFILE (profile.go)
	if d.plan != nil {
		d.release(d.plan)
		d.plan = nil
	}
	if d.pool != nil {
		d.pool.Close()
		d.pool.Flush()
	}
	d.closeIO()
	d.closeUnits() // ZeRO-3's events (zero.go)
	if d.k != nil {
		d.k.Close() // the kernels' scratch
	}
	for _, p := range d.owned {
		cuda.Free(d.dev, p)
	}
	d.owned = nil
	if d.h != nil {
		d.h.Close()
		d.h = nil
	}
	if d.s != nil {
		d.s.Destroy()
		d.s = nil
	}
	return nil
}

// Device is the model's device.
func (d *Model) Device() int { return d.dev }

// Stream is the stream the model's work is queued on, a non-blocking
// one: other streams' work is ordered with it by events only (see the
// package documentation).
func (d *Model) Stream() *cuda.Stream { return d.s }

// PeakBytes is the most device memory the model has held at once: the
// placement's buffers and the training plan's region (and the
// evaluation arena), plus the pool's blocks in use (ZeRO's units, whole
// power-of-two blocks), plus the matrix products' scratch (gpu/gemm:
// under bf16 autocast it grows in the first step and stays). Memory
// says where it goes.
func (d *Model) PeakBytes() int64 {
	if d.h == nil {
		return d.peak
	}
	return d.peak + int64(d.h.ScratchBytes())
}

// StateBuffers are the optimizer state's device buffers (N float32s
// each, in the flat layout; with a Config.Shard the shard's length, its
// first value the shard's first), by optim's names ("momentum_buffer";
// "exp_avg", "exp_avg_sq").
func (d *Model) StateBuffers() map[string]uintptr {
	switch {
	case d.opt.Name == "sgd" && d.state[0] != 0:
		return map[string]uintptr{"momentum_buffer": d.state[0]}
	case d.opt.Name != "sgd":
		return map[string]uintptr{"exp_avg": d.state[0], "exp_avg_sq": d.state[1]}
	}
	return map[string]uintptr{}
}

// SetLR sets the learning rate of the next updates (a schedule's value
// for the step, optim.Schedule.At).
func (d *Model) SetLR(lr float64) { d.lr = lr }

// Steps is the number of optimizer updates so far (optim's step count).
func (d *Model) Steps() int64 { return d.step }

// ZeroGrad zeroes the gradients (the shard's, with Config.ShardGrads).
func (d *Model) ZeroGrad() error {
	if d.gradsSharded() {
		return d.memset(d.GradShard(), 4*max(d.cfg.Shard.Len(), 1))
	}
	return d.memset(d.Grads, 4*max(d.N, 1))
}

// Step is one training step on a batch: ForwardBackward, Update and
// ZeroGrad. It returns the batch's mean loss.
func (d *Model) Step(x []float32, y []int32) (float32, error) {
	loss, err := d.ForwardBackward(x, y)
	if err != nil {
		return loss, err
	}
	if err := d.Update(); err != nil {
		return loss, err
	}
	return loss, d.ZeroGrad()
}

// ForwardBackward runs the forward pass, the mean cross-entropy against
// the labels and the backward pass on a batch (x: samples of the host
// model's InputShape; y: LabelsPerSample labels each) and adds the
// gradients to Grads (as nn's graphs add to Flat.Grad: micro-batches
// accumulate). Only the batch goes up and the loss comes down.
func (d *Model) ForwardBackward(x []float32, y []int32) (float32, error) {
	m := d.Host
	p, err := d.load(x, y)
	if err != nil {
		return 0, err
	}
	d.run++
	d.profileStep(p)
	if d.gradsSharded() {
		return d.forwardBackwardSharded(p)
	}
	for _, o := range p.ops {
		if o.fwd != nil {
			if err := o.fwd(); err != nil {
				return 0, fmt.Errorf("devmodel: %s: layer %s forward: %w", m.Name, o.name, err)
			}
		}
	}
	out := p.out
	if err := d.k.CrossEntropy(d.s, p.loss, p.rowLoss, out.val, p.labels, p.rows, p.classes); err != nil {
		return 0, err
	}
	if err := d.k.CrossEntropyBackward(d.s, out.grad, out.val, p.labels, p.rows, p.classes, 1/float32(p.rows)); err != nil {
		return 0, err
	}
	return d.backward(p)
}

// backward runs p's backward ops (OnGradsReady as it goes) and reads the
// loss.
func (d *Model) backward(p *plan) (float32, error) {
	m := d.Host
	ready := d.N
	for i := len(p.ops) - 1; i >= 0; i-- {
		if o := p.ops[i]; o.bwd != nil {
			if err := o.bwd(); err != nil {
				return 0, fmt.Errorf("devmodel: %s: layer %s backward: %w", m.Name, o.name, err)
			}
		}
		if d.OnGradsReady == nil {
			continue
		}
		// The parameters placed before op i are written by op i-1 and
		// earlier ops only: the rest are complete.
		from := 0
		if i > 0 && p.ops[i-1].params < len(m.Params) {
			from = m.Params[p.ops[i-1].params].Offset
		} else if i > 0 {
			from = d.N
		}
		if from < ready {
			ready = from
			if err := d.OnGradsReady(from); err != nil {
				return 0, err
			}
		}
	}
	return d.readLoss(p)
}

func (d *Model) readLoss(p *plan) (float32, error) {
	var loss [1]float32
	if err := d.download(bytesOf(loss[:]), p.loss); err != nil {
		return 0, err
	}
	return loss[0], nil
}

// forwardBackwardSharded is ForwardBackward with Config.ShardGrads or
// ShardParams: unit by unit (zero.go).
func (d *Model) forwardBackwardSharded(p *plan) (float32, error) {
	if err := d.forwardSharded(p, func(o op) func() error { return o.fwd }, "forward"); err != nil {
		return 0, err
	}
	out := p.out
	if err := d.k.CrossEntropy(d.s, p.loss, p.rowLoss, out.val, p.labels, p.rows, p.classes); err != nil {
		return 0, err
	}
	if err := d.k.CrossEntropyBackward(d.s, out.grad, out.val, p.labels, p.rows, p.classes, 1/float32(p.rows)); err != nil {
		return 0, err
	}
	if err := d.backwardSharded(p); err != nil {
		return 0, err
	}
	return d.readLoss(p)
}

// load checks a batch, plans for its size when the plan is another's
// (from the pool's cached blocks) and copies it up.
func (d *Model) load(x []float32, y []int32) (*plan, error) {
	batch, err := d.checkBatch(x, y)
	if err != nil {
		return nil, err
	}
	if d.plan.batch != batch {
		d.s.Synchronize()
		d.release(d.plan)
		p, err := d.compile(batch)
		if err != nil {
			// the old plan's memory may be gone (its region freed for a
			// larger one that could not be had): it never runs again, nor
			// do forward-only plans borrow it; the next batch is planned
			// afresh in the region kept (TestPlanAfterFailedGrowth)
			d.plan = &plan{region: d.plan.region, regionBytes: d.plan.regionBytes}
			return nil, err
		}
		d.plan = p
	}
	return d.plan, d.putBatch(d.plan, x, y)
}

// checkBatch checks a batch's inputs and labels and returns its samples.
func (d *Model) checkBatch(x []float32, y []int32) (int, error) {
	m := d.Host
	if len(x) == 0 || len(x)%m.InputSize() != 0 {
		return 0, fmt.Errorf("devmodel: %s: %d inputs, not a whole number of samples of %d", m.Name, len(x), m.InputSize())
	}
	batch := len(x) / m.InputSize()
	if len(y) != batch*m.LabelsPerSample() {
		return 0, fmt.Errorf("devmodel: %s: %d labels for %d samples of %d", m.Name, len(y), batch, m.LabelsPerSample())
	}
	for i, l := range y {
		if l < 0 || int(l) >= m.Classes() {
			return 0, fmt.Errorf("devmodel: %s: label %d (index %d) out of range [0, %d)", m.Name, l, i, m.Classes())
		}
	}
	return batch, nil
}

// putBatch copies a batch up into p's input and labels.
func (d *Model) putBatch(p *plan, x []float32, y []int32) error {
	return d.upload([]uintptr{p.in.val, p.labels}, bytesOf(x), bytesOf(y))
}

// Eval: evalplan.go.

// Update clips the gradients (Config.ClipGrad; not with a Config.Shard,
// whose caller clips with ClipShard) and applies one optimizer step with
// the current learning rate, as package optim does, to the parameters of
// the shard (the whole model without one).
func (d *Model) Update() error {
	if err := d.parkedErr(); err != nil {
		return err
	}
	defer d.profileUpdate()()
	d.ParamsChanged()
	sh := d.cfg.Shard
	if sh.Len() == 0 {
		d.step++
		return nil
	}
	if d.clipsInUpdate() {
		if err := d.k.ClipGradNorm(d.s, d.Grads, d.N, d.cfg.ClipGrad, d.clipWS); err != nil {
			return err
		}
		if err := d.logNorm(); err != nil {
			return err
		}
	}
	o := d.opt
	d.step++
	off := uintptr(4 * sh.Lo)
	if o.Name == "sgd" {
		return d.k.SGD(d.s, d.Params+off, d.Grads+off, d.state[0], sh.Len(), kernels.SGDConfig{LR: float32(d.lr), Momentum: float32(o.Momentum), WeightDecay: float32(o.WeightDecay)})
	}
	return d.k.Adam(d.s, d.Params+off, d.Grads+off, d.state[0], d.state[1], sh.Len(),
		kernels.AdamConfig{LR: d.lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Decoupled: o.Name == "adamw"}, d.step)
}

// clipsInUpdate reports whether Update clips (Config.ClipGrad, no
// Shard given).
func (d *Model) clipsInUpdate() bool { return d.cfg.ClipGrad > 0 && !d.shardGiven }

// normCap is the norms the device's log holds: a full log is read (one
// wait for the device every normCap clipping updates). A variable for
// the tests.
var normCap = 512

// logNorm copies the norm Update's clipping left at clipWS into the
// log, on the stream (no wait), reading the log first if it is full.
func (d *Model) logNorm() error {
	if d.normN == normCap {
		if err := d.readNorms(); err != nil {
			return err
		}
	}
	log := d.clipWS + kernels.ClipWorkspace
	if err := d.s.CopyAsync(log+uintptr(8*d.normN), d.clipWS, 8, cuda.DeviceToDevice); err != nil {
		return err
	}
	d.normN++
	return nil
}

// readNorms brings the log's norms down into normHost (waiting for the
// stream) and empties it.
func (d *Model) readNorms() error {
	if d.normN == 0 {
		return nil
	}
	v := make([]float64, d.normN)
	if err := d.download(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v)), d.clipWS+kernels.ClipWorkspace); err != nil {
		return err
	}
	d.normHost = append(d.normHost, v...)
	d.normN = 0
	return nil
}

// GradNorms are the global gradient norms (before clipping) of every
// clipping Update so far (Config.ClipGrad, no shard), or of every
// ClipShardQueued (with a shard), in order: those GradNorm read after
// each, bit for bit. Update leaves each in a log in
// device memory, so that no step waits for it; GradNorms waits for the
// model's stream once and brings the log down (so does an Update that
// finds the log of 512 full).
func (d *Model) GradNorms() ([]float64, error) {
	if d.cfg.ClipGrad <= 0 || d.clipWS == 0 {
		return nil, nil
	}
	if err := d.readNorms(); err != nil {
		return nil, err
	}
	return append([]float64(nil), d.normHost...), nil
}

// sharded reports whether the model updates a shard of the flat buffers
// (Config.Shard), not all of them.
func (d *Model) sharded() bool { return d.cfg.Shard.Len() < d.N }

// Shard is the range of the flat buffers that Update changes and the
// optimizer state covers (Config.Shard; the whole model without one).
func (d *Model) Shard() Range { return d.cfg.Shard }

// ClipShard clips the gradients of the shard (Config.Shard) by the
// global L2 norm of the whole gradient, whose shards the ranks hold:
// global takes this shard's norm and returns the whole gradient's,
// sqrt(sum over the ranks of their norms squared) (a collective the
// caller runs: an all-reduce of the squares, 8 bytes down and 8 up).
// When max / (norm + 1e-6) is below 1 (and the norm finite) the shard's
// gradients are scaled by it, as ClipGradNorm (and train's -clip-grad)
// scales the whole gradient. It returns the global norm. With
// Config.ClipGrad and no shard, Update clips instead.
func (d *Model) ClipShard(max float64, global func(local float64) (float64, error)) (float64, error) {
	sh := d.cfg.Shard
	if d.clipWS == 0 {
		return 0, fmt.Errorf("devmodel: %s: ClipShard on a model placed without a Shard or ClipGrad", d.Host.Name)
	}
	g := d.Grads + uintptr(4*sh.Lo)
	// The shard's norm, nothing scaled (an infinite bound never clips).
	if err := d.k.ClipGradNorm(d.s, g, sh.Len(), math.Inf(1), d.clipWS); err != nil {
		return 0, err
	}
	local, err := d.GradNorm()
	if err != nil {
		return 0, err
	}
	norm, err := global(local)
	if err != nil {
		return 0, err
	}
	coef := max / (norm + 1e-6)
	if !(coef < 1) || math.IsInf(norm, 0) || math.IsNaN(norm) {
		return norm, nil
	}
	// The kernel scales by bound / (its norm + 1e-6), its norm being the
	// local one just read (the same sum, in the same order): a bound of
	// coef * (local + 1e-6) makes that factor coef. A shard whose norm
	// is 0 has nothing to scale.
	if local == 0 {
		return norm, nil
	}
	if err := d.k.ClipGradNorm(d.s, g, sh.Len(), coef*(local+1e-6), d.clipWS); err != nil {
		return 0, err
	}
	return norm, nil
}

// ClipShardQueued clips the shard's gradients as ClipShard does, bit
// for bit, with nothing read on the host: the shard's norm is squared
// on the device into the float64 at sq, sum (the caller's: an
// all-reduce of that float64 over the ranks, in place, ordered with the
// model's stream, which must wait for its result) sums it over the
// ranks, and kernels compute the global norm and the factor and scale
// the shard (kernels.ClipGlobal). The norm goes into the log that
// GradNorms reads, as Update's own clipping's does (the model placed
// with Config.ClipGrad); GradNorm reads it too.
func (d *Model) ClipShardQueued(max float64, sum func(sq uintptr) error) error {
	sh := d.cfg.Shard
	if d.clipWS == 0 || d.cfg.ClipGrad <= 0 {
		return fmt.Errorf("devmodel: %s: ClipShardQueued on a model placed without Config.ClipGrad", d.Host.Name)
	}
	g := d.Grads + uintptr(4*sh.Lo)
	// The shard's norm, nothing scaled (an infinite bound never clips).
	if err := d.k.ClipGradNorm(d.s, g, sh.Len(), math.Inf(1), d.clipWS); err != nil {
		return err
	}
	// The partial sums are read: their first float64 holds the square.
	sq := d.clipWS + 16
	if err := d.k.ClipSquare(d.s, sq, d.clipWS); err != nil {
		return err
	}
	if err := sum(sq); err != nil {
		return err
	}
	if err := d.k.ClipGlobal(d.s, g, sh.Len(), max, d.clipWS, sq); err != nil {
		return err
	}
	return d.logNorm()
}

// GradNorm reads the global gradient norm of the last Update (before
// clipping; 0 without Config.ClipGrad), or after ClipShard this shard's
// norm: 8 bytes down.
func (d *Model) GradNorm() (float64, error) {
	if d.clipWS == 0 {
		return 0, nil
	}
	var v [1]float64
	err := d.download(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8), d.clipWS)
	return v[0], err
}

// CopyToHost copies the parameters into the host model's Flat.Value and
// batch norm's running statistics and batch counts into its BNs: the host
// model then saves the same checkpoint as after training on the CPU.
func (d *Model) CopyToHost() error {
	if err := d.s.Synchronize(); err != nil {
		return err
	}
	if d.paramsSharded() {
		sh := d.cfg.Shard
		if err := d.paramShardDown(d.Host.Flat.Value[sh.Lo:sh.Hi]); err != nil {
			return err
		}
	} else if err := cuda.CopyDtoH(d.dev, bytesOf(d.Host.Flat.Value), d.Params); err != nil {
		return err
	}
	for _, b := range d.bns {
		if err := cuda.CopyDtoH(d.dev, bytesOf(b.host.RunningMean), b.mean); err != nil {
			return err
		}
		if err := cuda.CopyDtoH(d.dev, bytesOf(b.host.RunningVar), b.vr); err != nil {
			return err
		}
		b.host.NumBatches = int64(b.placedFor) + b.batches
	}
	return nil
}

// CopyFromHost copies the host model's parameters and batch norm's
// running statistics up (after loading a checkpoint into it).
func (d *Model) CopyFromHost() error {
	d.ParamsChanged()
	if d.s != nil {
		if err := d.s.Synchronize(); err != nil {
			return err
		}
	}
	if d.paramsSharded() {
		sh := d.cfg.Shard
		if err := d.paramShardUp(d.Host.Flat.Value[sh.Lo:sh.Hi]); err != nil {
			return err
		}
	} else if err := cuda.CopyHtoD(d.dev, d.Params, bytesOf(d.Host.Flat.Value)); err != nil {
		return err
	}
	for _, b := range d.bns {
		if err := cuda.CopyHtoD(d.dev, b.mean, bytesOf(b.host.RunningMean)); err != nil {
			return err
		}
		if err := cuda.CopyHtoD(d.dev, b.vr, bytesOf(b.host.RunningVar)); err != nil {
			return err
		}
		b.placedFor, b.batches = int(b.host.NumBatches), 0
	}
	return d.afterLegacy()
}

// GradsToHost copies the gradients into dst (N float32s; the host
// model's Flat.Grad, say).
func (d *Model) GradsToHost(dst []float32) error {
	if len(dst) != d.N {
		return fmt.Errorf("devmodel: %d gradients into %d", d.N, len(dst))
	}
	if d.gradsSharded() {
		return fmt.Errorf("devmodel: %s: GradsToHost: the gradients are sharded (Config.ShardGrads): only GradShard's %d values are kept", d.Host.Name, d.cfg.Shard.Len())
	}
	if err := d.s.Synchronize(); err != nil {
		return err
	}
	return cuda.CopyDtoH(d.dev, bytesOf(dst), d.Grads)
}

// A Buffer is a device buffer of N float32s.
type Buffer struct {
	Ptr uintptr
	N   int
}

// BNBuffers are batch norm's running statistics on the device, each
// layer's mean then variance (C float32s each), in the host model's BNs
// order: a data-parallel strategy gives every rank rank 0's (as train
// does on the host before evaluating and saving). Synchronize the
// model's stream (Stream) before another stream reads or writes them.
func (d *Model) BNBuffers() []Buffer {
	var out []Buffer
	for _, b := range d.bns {
		out = append(out, Buffer{b.mean, b.host.C}, Buffer{b.vr, b.host.C})
	}
	return out
}

// OptimStateToHost copies the optimizer's state and step count into o, a
// host optimizer of the same configuration (optim.New(cfg.Optim, N), or
// of the shard's length with a Config.Shard: a ZeRO engine's), so that
// its checkpoint is the CPU's.
func (d *Model) OptimStateToHost(o optim.Optimizer) error {
	if err := d.s.Synchronize(); err != nil {
		return err
	}
	st, _ := o.State()
	n := d.cfg.Shard.Len()
	for name, p := range d.StateBuffers() {
		v, ok := st[name]
		if !ok || len(v) < n {
			return fmt.Errorf("devmodel: the host optimizer (%s) has no %s of %d values", o.Name(), name, n)
		}
		if err := cuda.CopyDtoH(d.dev, bytesOf(v[:n]), p); err != nil {
			return err
		}
	}
	o.SetStep(d.step)
	return nil
}

// OptimStateFromHost copies o's state and step count up (resuming from a
// checkpoint loaded into o).
func (d *Model) OptimStateFromHost(o optim.Optimizer) error {
	if err := d.s.Synchronize(); err != nil {
		return err
	}
	st, t := o.State()
	n := d.cfg.Shard.Len()
	for name, p := range d.StateBuffers() {
		v, ok := st[name]
		if !ok || len(v) < n {
			return fmt.Errorf("devmodel: the host optimizer (%s) has no %s of %d values", o.Name(), name, n)
		}
		if err := cuda.CopyHtoD(d.dev, p, bytesOf(v[:n])); err != nil {
			return err
		}
	}
	d.step = t
	return d.afterLegacy()
}

func bytesOf[T float32 | int32](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(z)))
}

// blockBytes is what the pool holds for a request of n bytes.
func blockBytes(n int) int64 { return 1 << max(8, bits.Len(uint(n-1))) }
