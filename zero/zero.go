// Package zero is ZeRO (Rajbhandari et al., SC20) for gdist models: data
// parallelism without the redundancy. The flat parameter buffer is split
// into one contiguous shard per rank (padded so that every shard has the
// same length S = ceil(P/N)); rank r owns [r*S, (r+1)*S).
//
//   - Stage 1 shards the optimizer state: every rank keeps full parameters
//     and gradients, gradients are reduce-scattered (averaged) at the end of
//     backward, each rank updates only its shard with shard-sized optimizer
//     state, and the parameters are all-gathered after the step.
//   - Stage 2 also shards the gradients: a rank holds only its shard's
//     gradients. During backward, gradients are copied into transient
//     bucket buffers (buckets never cross a shard boundary); when a bucket
//     is complete it is reduced (averaged) straight to the rank that owns
//     it, while backward goes on, and its buffer is dropped.
//   - Stage 3 also shards the parameters at rest, tensor by tensor (each
//     parameter split evenly over the ranks, padded to a multiple of N). The
//     engine becomes the model's flat.Store: every layer gathers its
//     parameters inside its forward op and again inside its backward op and
//     drops them when the op ends, and the next layer's gather (in the
//     pass's direction) is issued at once so that it overlaps the current
//     layer's compute. Gradients are reduce-scattered (averaged) into the
//     owners' shards in the background, tensor by tensor. Evaluation graphs
//     gather the same way. The model's Flat and Grad are nil.
//
// Per-rank persistent model state, in bytes, with P parameters, N ranks and
// K bytes of optimizer state per parameter (8 for Adam, 4 for SGD with
// momentum): DDP 4P + 4P + KP; stage 1 4P + 4P + KP/N; stage 2 4P + 4P/N +
// KP/N; stage 3 (4P + 4P + KP)/N (the paper's formulas; padding adds under
// N elements per tensor). Memory reports them as measured from the buffers
// actually held, and the peak of what a step holds on top (stage 2's
// buckets; stage 3's gathered layers and gradients in flight: about two
// layers' worth, whatever the depth).
//
// Gradient accumulation: with SetNoSync(true), stage 1 adds micro-batch
// gradients into its full gradient buffer and reduces them at the next
// synced step, as DDP does. Stage 2 has no full gradient buffer to
// accumulate in: every micro-batch's gradients are reduced at once and
// added into the owner's shard, which accumulates until Update. Stage 3
// likewise.
//
// Communication per step and rank, in elements: 2P for stage 1
// (reduce-scatter P + all-gather P, as DDP's all-reduce), a little more for
// stage 2 (each bucket is reduced to its owner: a reduce-scatter and a
// gather), 3P for stage 3 (gathers before forward and backward, and a
// reduce-scatter), each times the ring's (N-1)/N; a little less, as the
// first layer's backward needs no gather (its input, the data, needs no
// gradient).
//
// Shared memory: on a Comm that is a comm.Allocator with shared memory
// (the shm backend; auto with every rank on one host), stages 1 and 2 move
// the padded parameter buffer, and stage 1 (and stage 2 over a plain
// gorgonia model, whose buckets are views of it) the gradient buffer,
// into it, so the parameter all-gather, stage 1's gradient reduce-scatter
// and those buckets' reduces to their owners are zero-copy (each rank reads the others' buffers where they lie; see
// comm/shm); where the area has no room for them they stay in ordinary
// memory and SharedBuffersErr says why. Options.OrdinaryBuffers keeps them in ordinary memory; Close
// moves them back and frees the shared memory. Stage 2's buckets over an
// nn model (transient, made as the gradients come) come from a pool in
// shared memory (as many of each size as were ever in flight at once), so
// their reduces are zero-copy too; stage 3 takes its gathered parameters
// and the gradients it reduce-scatters from the same pool (one copy of
// each gradient into it).
//
// # Plain gorgonia models
//
// Wrap takes a plain gorgonia model's learnables, like ddp.Wrap, for
// stages 1 and 2: the flat buffers (package flat) are padded to N*S, and
// the engine owns the optimizer (the state it shards), so the loop is
// Backward (forward, backward, reduce), then Step (update this rank's
// shard, all-gather the parameters, clear the gradients). gorgonia's tape
// machine keeps a full gradient per learnable in its dual values (build
// it with gorgonia.BindDualValues), so for these models stage 2 saves what
// stage 1 saves (the optimizer state) and differs in reducing each bucket
// to its owner during backward (with taps, as in package ddp). Stage 3
// needs layers that fetch their parameters from a store (Sharded: the
// nn models). WrapValues is the same for a model that builds a new graph
// every step over tensors it keeps (see ddp.WrapValues): AddGrads hands
// each step's gradients over inside Backward's function.
//
// float64 learnables (all of them; Wrap and WrapValues) get float64
// buffers, collectives and an optim.Optimizer64 (the Config's optimizer
// in float64: Grads64, Optimizer64), and their checkpoints hold F64
// tensors (Shards.Params64 and OptState64; LoadParams64,
// LoadOptimizerState64).
//
// Checkpoints (checkpoint.go, package train): every rank writes its
// contiguous span of the flat parameters and optimizer state; stage 3
// gathers that span tensor by tensor first. Any world size and stage (or
// DDP) can load them.
package zero

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

// Options configure a ZeRO engine.
type Options struct {
	Stage int // 1, 2 or 3
	// Optim is the shard's optimizer: PyTorch's sgd, adam, adamw, or
	// gorgonia's solvers (optim.FromSolver keeps a program's own).
	Optim         optim.Config
	BucketMB      float64 // stage 2 bucket cap (0: ddp.DefaultBucketMB)
	FirstBucketMB float64 // stage 2 first bucket cap (0: ddp.DefaultFirstBucketMB)
	// OrdinaryBuffers keeps the flat buffers where the model put them. By
	// default stages 1 and 2 move the parameter buffer (and stage 1 the
	// gradient buffer) into the Comm's shared memory (comm.Allocator),
	// which on the shm backend (and auto, on one host) makes the
	// parameter all-gather and stage 1's gradient reduce-scatter
	// zero-copy.
	OrdinaryBuffers bool
}

// Model is what the engine needs of a model: its learnables in flat
// buffers (package flat).
type Model interface {
	FlatParams() *flat.Params
}

// Stateful is a Model with non-learnable state that rank 0 broadcasts.
type Stateful interface {
	StateBuffers() []comm.Buffer
}

// Sharded is a Model whose layers can take their parameters from a store
// (flat.Store) inside their own ops: what stage 3 needs.
type Sharded interface {
	Model
	// LayerParams lists the span indices of each layer with parameters,
	// in forward order (for prefetching).
	LayerParams() [][]int
	// SetStore makes the model's graphs fetch parameters from s. Graphs
	// built before do not.
	SetStore(s flat.Store)
}

// Memory is what a rank holds, in bytes.
type Memory struct {
	Params    int64 // persistent
	Grads     int64 // persistent
	Optimizer int64 // persistent
	// PeakTransient is the most held at once in buffers that live only
	// during a step (stage 2's gradient buckets).
	PeakTransient int64
}

// Engine runs one stage of ZeRO for one rank.
type Engine struct {
	c      comm.Comm
	fp     *flat.Params
	state  []comm.Buffer
	opts   Options
	p, s   int // parameters, shard length
	rank   int
	lo     int // this rank's shard: [lo, lo+s) of the padded buffer
	flatP  []float32
	opt    optim.Optimizer
	noSync bool
	frees  []func() // frees the shared buffers (Close)
	// shareErr is why a buffer is not in shared memory (SharedBuffersErr).
	shareErr error

	// stage 1: full padded gradient buffer; stage 2: shard gradients.
	gradFull  []float32
	gradShard []float32

	// stage 3
	st3 *stage3

	// f64 holds the buffers and optimizer of float64 learnables (nil:
	// float32; see dtype.go).
	f64 *f64

	// stage 2
	bkts    []bucket
	owner   [][]int // param -> buckets it touches
	inPlace bool    // buckets are views of a full gradient buffer (plain gorgonia)
	left    []int   // in-place buckets: tapped gradients still to come
	mu      sync.Mutex
	live    int64 // bytes in live bucket buffers
	peak    int64
	pending []*inflight
	pool    bucketPool // stage 2's bucket buffers in shared memory

	// runCtx is the context of the Backward call under way (nil outside
	// one): collectives started from inside the graph run under it.
	runCtx   context.Context
	verified bool
}

type bucket struct {
	lo, hi int // range of the padded flat buffer
	root   int // owner rank
	params []int
}

type inflight struct {
	b     int
	buf   []float32
	buf64 []float64 // in place of buf for float64 learnables
	pool  bool      // buf came from the bucket pool (and goes back to it)
	left  int
	w     comm.Work
	done  chan struct{} // closed once reduced, folded in and freed
	err   error
}

// New builds the engine for m. It pads m's buffers to N*S (so create
// graphs after New), broadcasts rank 0's parameters and state, and makes
// the shard-sized optimizer. Blocking; every rank calls it. Stage 3 needs
// a Sharded model.
func New(ctx context.Context, c comm.Comm, m Model, opts Options) (*Engine, error) {
	if c == nil || m == nil {
		return nil, comm.InvalidArgf("zero: nil comm or model")
	}
	fp := m.FlatParams()
	if fp == nil {
		return nil, comm.InvalidArgf("zero: rank %d: the model has no flat parameters", c.Rank())
	}
	var state []comm.Buffer
	if s, ok := m.(Stateful); ok {
		state = s.StateBuffers()
	}
	var sh Sharded
	if opts.Stage == 3 {
		var ok bool
		if sh, ok = m.(Sharded); !ok || fp.Bound() {
			return nil, comm.InvalidArgf("zero: rank %d: stage 3 needs a model whose layers fetch their parameters from a store (zero.Sharded: a model built from package nn); use stage 1 or 2 for a plain gorgonia model", c.Rank())
		}
	}
	return newEngine(ctx, c, fp, state, sh, opts)
}

// Wrap is New for a plain gorgonia model's learnables (stages 1 and 2):
// see ddp.Wrap and the package doc. Use Tap on each learnable in the
// forward code for stage 2 to reduce buckets during backward.
func Wrap(ctx context.Context, c comm.Comm, learnables []*G.Node, opts Options) (*Engine, error) {
	if c == nil {
		return nil, comm.InvalidArgf("zero: nil comm")
	}
	if opts.Stage == 3 {
		return nil, comm.InvalidArgf("zero: rank %d: stage 3 needs a model whose layers fetch their parameters from a store (zero.Sharded); use stage 1 or 2 for a plain gorgonia model", c.Rank())
	}
	fp, err := flat.Bind(learnables, 0)
	if err != nil {
		return nil, fmt.Errorf("zero: rank %d: %w", c.Rank(), err)
	}
	return newEngine(ctx, c, fp, nil, nil, opts)
}

// Tap is flat.Tap (see ddp.Tap).
func Tap(w *G.Node) (*G.Node, error) { return flat.Tap(w) }

func newEngine(ctx context.Context, c comm.Comm, fp *flat.Params, state []comm.Buffer, sh Sharded, opts Options) (*Engine, error) {
	if opts.Stage < 1 || opts.Stage > 3 {
		return nil, comm.InvalidArgf("zero: stage %d does not exist (1, 2 or 3)", opts.Stage)
	}
	if _, err := optim.New(opts.Optim, 0); err != nil {
		return nil, err
	}
	if opts.BucketMB == 0 {
		opts.BucketMB = ddp.DefaultBucketMB
	}
	if opts.FirstBucketMB == 0 {
		opts.FirstBucketMB = ddp.DefaultFirstBucketMB
	}
	if !(opts.BucketMB > 0) || !(opts.FirstBucketMB > 0) {
		return nil, comm.InvalidArgf("zero: bucket sizes must be positive")
	}
	if err := fp.Check(); err != nil {
		return nil, fmt.Errorf("zero: rank %d: %w", c.Rank(), err)
	}
	if err := fp.CheckSame(ctx, c); err != nil { // every rank's model has the same shapes
		return nil, fmt.Errorf("zero: %w", err)
	}
	n := c.Size()
	p := fp.Len()
	s := (p + n - 1) / n
	e := &Engine{c: c, fp: fp, state: state, opts: opts, p: p, s: s, rank: c.Rank(), lo: c.Rank() * s}
	run := comm.Run(ctx)
	if opts.Stage != 3 {
		if !fp.HasGrad() && opts.Stage == 1 {
			return nil, comm.InvalidArgf("zero: rank %d: stage 1 needs the model's gradient buffer", c.Rank())
		}
		if err := fp.Grow(n * s); err != nil {
			return nil, fmt.Errorf("zero: rank %d: %w", c.Rank(), err)
		}
		// Stage 1 reduce-scatters the full gradient buffer, stage 2 over
		// plain gorgonia reduces buckets straight from it: both
		// zero-copy where it lies in shared memory too.
		if err := e.share(opts.Stage == 1 || opts.Stage == 2 && fp.Bound()); err != nil {
			return nil, err
		}
		if fp.DType() == comm.Float64 {
			e.f64 = &f64{flatP: fp.Value64[:n*s]}
		} else {
			e.flatP = fp.Value[:n*s]
		}
	}
	if err := run(c.Broadcast(ctx, fp.ValueBuf().Slice(0, p), 0)); err != nil {
		return nil, fmt.Errorf("zero: broadcasting parameters: %w", err)
	}
	for _, b := range state {
		if err := run(c.Broadcast(ctx, b, 0)); err != nil {
			return nil, fmt.Errorf("zero: broadcasting model state: %w", err)
		}
	}
	switch opts.Stage {
	case 3:
		if err := e.initStage3(sh); err != nil {
			return nil, err
		}
		// Gathered parameters and gradients to reduce-scatter come and
		// go: from shared memory where the Comm has some.
		if a, ok := c.(comm.Allocator); ok && !opts.OrdinaryBuffers {
			e.pool.a, e.pool.free = a, map[int][][]float32{}
		}
	case 1:
		// The reduce-scatter runs in place: this rank's averaged shard
		// lands in its own slice of the full buffer.
		if e.f64 != nil {
			e.f64.gradFull = fp.Grad64[:n*s]
			e.f64.gradShard = e.f64.gradFull[e.lo : e.lo+s]
			break
		}
		e.gradFull = fp.Grad[:n*s]
		e.gradShard = e.gradFull[e.lo : e.lo+s]
	case 2:
		if fp.Bound() {
			// gorgonia keeps full gradients in its dual values: reduce
			// each bucket straight from them.
			e.inPlace = true
		} else {
			// The model keeps no full gradient buffer: buckets come and
			// go, from shared memory where the Comm has some.
			fp.Grad = nil
			if a, ok := c.(comm.Allocator); ok && !opts.OrdinaryBuffers {
				e.pool.a, e.pool.free = a, map[int][][]float32{}
			}
		}
		if e.f64 != nil {
			e.f64.gradShard = make([]float64, s)
		} else {
			e.gradShard = make([]float32, s)
		}
		e.layout()
	}
	fp.OnGrad(e.tapped)
	var err error
	if e.f64 != nil {
		if e.f64.opt, err = optim.New64(opts.Optim, e.s); err != nil {
			return nil, err
		}
		return e, nil
	}
	if e.opt, err = optim.New(opts.Optim, e.s); err != nil {
		return nil, err
	}
	return e, nil
}

// share moves the parameter buffer (and with grads the gradient buffer)
// into the Comm's shared memory, where it has some and room for them
// (else they stay where they are).
func (e *Engine) share(grads bool) error {
	a, ok := e.c.(comm.Allocator)
	if !ok || e.opts.OrdinaryBuffers {
		return nil
	}
	get := func(n int) comm.Buffer {
		b, free, err := a.Alloc(e.fp.DType(), n)
		if err != nil {
			if !errors.Is(err, comm.ErrUnsupported) {
				e.shareErr = err
			}
			return comm.Buffer{}
		}
		e.frees = append(e.frees, free)
		return b
	}
	v := get(e.fp.ValueBuf().Len())
	var g comm.Buffer
	if v.Len() > 0 && grads && e.fp.HasGrad() {
		g = get(e.fp.GradBuf().Len())
	}
	if err := e.fp.MoveBuffers(v, g); err != nil {
		e.Close()
		return fmt.Errorf("zero: rank %d: %w", e.rank, err)
	}
	return nil
}

// SharedBuffers reports whether the parameter buffer (stages 1-2) or the
// pool of transient buffers (stage 2 over an nn model, stage 3, once a
// step took from it) lies in the Comm's shared memory
// (Options.OrdinaryBuffers).
func (e *Engine) SharedBuffers() bool { return len(e.frees) > 0 || e.pool.used() }

// SharedBuffersErr is why a buffer is not in shared memory on a Comm that
// has some (its area is too small: the error names the setting that
// enlarges it); nil when they are there, or the Comm has none, or
// Options.OrdinaryBuffers kept them out.
func (e *Engine) SharedBuffersErr() error { return e.shareErr }

// Close moves the flat buffers back into ordinary memory (if New put them
// in the Comm's shared memory) and frees the shared memory. The engine
// still works after it. It does not close the Comm.
func (e *Engine) Close() error {
	e.pool.close()
	if len(e.frees) == 0 {
		return nil
	}
	fresh := func(b comm.Buffer) comm.Buffer {
		if b.Len() == 0 {
			return comm.Buffer{}
		}
		f, _ := comm.FromBytes(b.DType(), make([]byte, b.Bytes()))
		return f
	}
	if err := e.fp.MoveBuffers(fresh(e.fp.ValueBuf()), fresh(e.fp.GradBuf())); err != nil {
		return err
	}
	if e.flatP != nil {
		e.flatP = e.fp.Value[:len(e.flatP)]
	}
	if e.gradFull != nil {
		e.gradFull = e.fp.Grad[:len(e.gradFull)]
		e.gradShard = e.gradFull[e.lo : e.lo+e.s]
	}
	e.f64.rebind(e)
	for _, f := range e.frees {
		f()
	}
	e.frees = nil
	return nil
}

// Shard returns this rank's range [lo, hi) of the (padded) flat buffer
// (stages 1 and 2; stage 3 shards each tensor instead).
func (e *Engine) Shard() (lo, hi int) { return e.lo, e.lo + e.s }

// Optimizer returns the shard optimizer.
func (e *Engine) Optimizer() optim.Optimizer { return e.opt }

// Grads returns this rank's shard of the averaged gradients (a view),
// valid from the end of Backward (or Finish) until Step clears it: stages
// 1 and 2 its contiguous range of the flat gradient, stage 3 its part of
// every tensor. The ranks' shards hold every element of the gradient
// once (padding is zero), so the whole gradient's squared L2 norm is the
// sum over ranks of their shards' sums of squares; scaling the shard in
// place before Step scales this rank's update (gradient clipping).
func (e *Engine) Grads() []float32 { return e.gradShard }

// Params returns the flat parameters (stage 3: the spans only; no rank
// holds the values).
func (e *Engine) Params() *flat.Params { return e.fp }

// Memory reports the bytes held (see the package doc).
func (e *Engine) Memory() Memory {
	if e.f64 != nil {
		return e.f64.memory(e)
	}
	st, _ := e.opt.State()
	var ob int64
	for _, v := range st {
		ob += int64(len(v)) * 4
	}
	g := int64(len(e.gradShard)) * 4
	if e.gradFull != nil || e.inPlace {
		g = int64(len(e.fp.Grad)) * 4 // the shard is a view of it, or gorgonia holds it
	}
	if e.inPlace {
		g += int64(len(e.gradShard)) * 4
	}
	e.mu.Lock()
	peak := e.peak
	e.mu.Unlock()
	return Memory{Params: int64(len(e.flatP)) * 4, Grads: g, Optimizer: ob, PeakTransient: peak}
}

// SetNoSync: see the package doc on gradient accumulation.
func (e *Engine) SetNoSync(on bool) { e.noSync = on }

// AddGrad takes learnable i's gradient from a backward pass: the entry for
// layers that deliver gradients by value (nn models'
// Graph.OnGrad; stage 3 models hand theirs to the store instead).
// It panics (a programming error, never a silent drop of a gradient) on
// an index out of range or a float64 Engine: those take AddGrads.
func (e *Engine) AddGrad(i int, g []float32) {
	switch {
	case e.f64 != nil:
		panic(fmt.Sprintf("zero: AddGrad(%d) takes float32 gradients, and this Engine trains float64 learnables: use AddGrads", i))
	case i < 0 || i >= len(e.fp.Spans):
		panic(fmt.Sprintf("zero: AddGrad(%d): no such learnable (the Engine has %d)", i, len(e.fp.Spans)))
	}
	switch {
	case e.opts.Stage == 2 && !e.inPlace:
		e.onGrad(i, g)
	case e.fp.Grad != nil:
		flat.AddTo(e.fp.GradOf(i), g)
		e.tapped(i, true)
	}
}

// tapped is told about learnable i's gradient in the full buffer (taps).
func (e *Engine) tapped(i int, ready bool) {
	if !e.inPlace || e.noSync {
		return
	}
	if !ready {
		// Never add into a bucket under reduction (a second backward
		// pass before Finish): wait for it.
		for _, bi := range e.owner[i] {
			if f := e.pending[bi]; f != nil && f.done != nil {
				<-f.done
			}
		}
		return
	}
	for _, bi := range e.owner[i] {
		e.left[bi]--
		if e.left[bi] == 0 && e.runCtx != nil {
			e.launchBucket(e.runCtx, bi)
		}
	}
}

// Backward runs one forward and backward pass (run: the tape machine's
// RunAll, or an nn graph's Step) and then Finish; collectives that
// start during run (stage 2 buckets, stage 3 gathers) run under ctx.
func (e *Engine) Backward(ctx context.Context, run func() error) error {
	e.runCtx = ctx
	err := run()
	e.runCtx = nil
	if err != nil {
		e.fp.Flush()
		if e.st3 != nil {
			e.st3.finish()
		} else {
			e.drain()
		}
		return err
	}
	return e.Finish(ctx)
}

// Eval runs a forward-only pass (run: an evaluation graph's Logits)
// under ctx: stage 3 gathers each layer's parameters inside its ops, with
// ctx. Other stages just call run.
func (e *Engine) Eval(ctx context.Context, run func() error) error {
	e.runCtx = ctx
	defer func() { e.runCtx = nil }()
	err := run()
	if e.st3 != nil {
		if ferr := e.st3.finish(); err == nil {
			err = ferr
		}
	}
	return err
}

// Finish reduces the gradients of the backward pass that ended (unless
// no-sync applies): after it, this rank's shard holds the average over
// ranks. Backward calls it.
func (e *Engine) Finish(ctx context.Context) error {
	e.fp.Flush()
	if !e.verified {
		if err := e.fp.Verify(); err != nil {
			e.drain()
			return fmt.Errorf("zero: rank %d: %w", e.rank, err)
		}
		e.verified = true
	}
	switch {
	case e.opts.Stage == 3:
		return e.st3.finish()
	case e.opts.Stage == 2:
		return e.finish2(ctx)
	case e.noSync:
		return nil
	default:
		shard, full := comm.FromSlice(e.gradShard), comm.FromSlice(e.gradFull)
		if e.f64 != nil {
			shard, full = comm.FromSlice(e.f64.gradShard), comm.FromSlice(e.f64.gradFull)
		}
		w, err := e.c.ReduceScatter(ctx, shard, full, comm.Avg)
		if err == nil {
			err = w.Wait(ctx)
		}
		if err != nil {
			return fmt.Errorf("zero: reduce-scatter of gradients: %w", err)
		}
		return nil
	}
}

// Step steps the optimizer on this rank's shard, all-gathers the
// parameters (stages 1 and 2) and clears the gradients. Blocking; every
// rank calls it.
func (e *Engine) Step(ctx context.Context) error {
	if e.st3 != nil {
		// Parameters stay sharded: nothing to gather.
		e.opt.Step(e.flatP, e.gradShard)
		clear(e.gradShard)
		return nil
	}
	all := comm.FromSlice(e.flatP)
	if f := e.f64; f != nil {
		f.opt.Step64(f.flatP[e.lo:e.lo+e.s], f.gradShard)
		clear(f.gradShard)
		all = comm.FromSlice(f.flatP)
	} else {
		e.opt.Step(e.flatP[e.lo:e.lo+e.s], e.gradShard)
		clear(e.gradShard)
	}
	e.fp.ZeroGrad() // the other ranks' unreduced parts (stage 1; stage 2 in place)
	shard := all.Slice(e.lo, e.lo+e.s)
	if err := comm.Run(ctx)(e.c.AllGather(ctx, all, shard)); err != nil {
		return fmt.Errorf("zero: all-gather of parameters: %w", err)
	}
	return nil
}
