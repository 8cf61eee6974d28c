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
//     engine becomes the model's models.ParamStore: every layer gathers its
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
// Checkpoints (checkpoint.go, package train): every rank writes its
// contiguous span of the flat parameters and optimizer state; stage 3
// gathers that span tensor by tensor first. Any world size and stage (or
// DDP) can load them.
package zero

import (
	"context"
	"fmt"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// Options configure a ZeRO engine.
type Options struct {
	Stage         int // 1 or 2
	Optim         optim.Config
	BucketMB      float64 // stage 2 bucket cap (default 25)
	FirstBucketMB float64 // stage 2 first bucket cap (default 1)
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
	m      *models.Model
	opts   Options
	p, s   int // parameters, shard length
	rank   int
	lo     int // this rank's shard: [lo, lo+s) of the padded buffer
	flatP  []float32
	opt    optim.Optimizer
	noSync bool

	// stage 1: full padded gradient buffer; stage 2: shard gradients.
	gradFull  []float32
	gradShard []float32

	// stage 3
	st3 *stage3

	// stage 2
	bkts    []bucket
	owner   [][]int // param -> buckets it touches
	ctx     context.Context
	mu      sync.Mutex
	live    int64 // bytes in live bucket buffers
	peak    int64
	pending []*inflight
	ferr    error
}

type bucket struct {
	lo, hi int // range of the padded flat buffer
	root   int // owner rank
	params []int
}

type inflight struct {
	b    int
	buf  []float32
	left int
	w    comm.Work
	done chan struct{} // closed once reduced, folded in and freed
	err  error
}

// New builds the engine. It pads m's buffers to N*S (so create graphs
// after New), broadcasts rank 0's parameters and batch-norm state, and
// makes the shard-sized optimizer. Blocking; every rank calls it.
func New(ctx context.Context, c comm.Comm, m *models.Model, opts Options) (*Engine, error) {
	if opts.Stage < 1 || opts.Stage > 3 {
		return nil, comm.InvalidArgf("zero: stage %d does not exist (1, 2 or 3)", opts.Stage)
	}
	if _, err := optim.New(opts.Optim, 0); err != nil {
		return nil, err
	}
	if opts.BucketMB == 0 {
		opts.BucketMB = 25
	}
	if opts.FirstBucketMB == 0 {
		opts.FirstBucketMB = 1
	}
	if !(opts.BucketMB > 0) || !(opts.FirstBucketMB > 0) {
		return nil, comm.InvalidArgf("zero: bucket sizes must be positive")
	}
	n := c.Size()
	p := m.NumParams()
	s := (p + n - 1) / n
	e := &Engine{c: c, m: m, opts: opts, p: p, s: s, rank: c.Rank(), lo: c.Rank() * s}
	if m.Store != nil {
		return nil, comm.InvalidArgf("zero: the model already has a parameter store")
	}
	if len(m.Flat) != p {
		return nil, comm.InvalidArgf("zero: the model's parameters are already sharded")
	}
	run := comm.Run(ctx)
	if opts.Stage != 3 {
		e.flatP = make([]float32, n*s)
		copy(e.flatP, m.Flat)
		m.Flat = e.flatP[:p]
		if err := run(c.Broadcast(ctx, comm.FromSlice(e.flatP), 0)); err != nil {
			return nil, fmt.Errorf("zero: broadcasting parameters: %w", err)
		}
	} else if err := run(c.Broadcast(ctx, comm.FromSlice(m.Flat), 0)); err != nil {
		return nil, fmt.Errorf("zero: broadcasting parameters: %w", err)
	}
	for _, b := range m.BNs {
		for _, v := range [][]float32{b.RunningMean, b.RunningVar} {
			if err := run(c.Broadcast(ctx, comm.FromSlice(v), 0)); err != nil {
				return nil, fmt.Errorf("zero: broadcasting batch-norm state: %w", err)
			}
		}
	}
	switch opts.Stage {
	case 3:
		if err := e.initStage3(ctx); err != nil {
			return nil, err
		}
	case 1:
		// The reduce-scatter runs in place: this rank's averaged shard
		// lands in its own slice of the full buffer.
		e.gradFull = make([]float32, n*s)
		m.Grad = e.gradFull[:p]
		e.gradShard = e.gradFull[e.lo : e.lo+s]
	case 2:
		// The model keeps no full gradient buffer.
		m.Grad = nil
		e.gradShard = make([]float32, s)
		e.layout()
	}
	var err error
	if e.opt, err = optim.New(opts.Optim, e.s); err != nil {
		return nil, err
	}
	return e, nil
}

// opctx is the context for collectives issued from inside the graph (which
// has none): the Comm's own timeout and peer-loss detection bound them.
func (e *Engine) opctx() context.Context {
	if e.ctx != nil {
		return e.ctx
	}
	return context.Background()
}

// Shard returns this rank's range [lo, hi) of the (padded) flat buffer
// (stages 1 and 2; stage 3 shards each tensor instead).
func (e *Engine) Shard() (lo, hi int) { return e.lo, e.lo + e.s }

// Optimizer returns the shard optimizer.
func (e *Engine) Optimizer() optim.Optimizer { return e.opt }

// Memory reports the bytes held (see the package doc).
func (e *Engine) Memory() Memory {
	st, _ := e.opt.State()
	var ob int64
	for _, v := range st {
		ob += int64(len(v)) * 4
	}
	g := int64(len(e.gradShard)) * 4
	if e.gradFull != nil {
		g = int64(len(e.gradFull)) * 4 // stage 1: the shard is a view of it
	}
	e.mu.Lock()
	peak := e.peak
	e.mu.Unlock()
	return Memory{Params: int64(len(e.flatP)) * 4, Grads: g, Optimizer: ob, PeakTransient: peak}
}

// SetNoSync: see the package doc on gradient accumulation.
func (e *Engine) SetNoSync(on bool) { e.noSync = on }

// Attach makes gr deliver its gradients to this engine.
func (e *Engine) Attach(gr *models.Graph) {
	if e.opts.Stage == 3 {
		return // the graph talks to the store
	}
	if e.opts.Stage == 2 {
		gr.OnGrad = e.onGrad
	} else {
		gr.OnGrad = nil // the default adds into m.Grad (the padded full buffer)
	}
}

// Step runs forward and backward on one batch and reduces the gradients
// (unless no-sync applies). Call Update after the steps of one batch.
func (e *Engine) Step(ctx context.Context, gr *models.Graph, x []float32, y []int32) (float32, error) {
	e.Attach(gr)
	e.ctx = ctx
	loss, err := gr.Step(x, y)
	if err != nil {
		if e.st3 != nil {
			e.st3.finish()
		} else {
			e.drain()
		}
		return 0, err
	}
	switch {
	case e.opts.Stage == 3:
		return loss, e.st3.finish()
	case e.opts.Stage == 2:
		return loss, e.finish2(ctx)
	case e.noSync:
		return loss, nil
	default:
		w, err := e.c.ReduceScatter(ctx, comm.FromSlice(e.gradShard), comm.FromSlice(e.gradFull), comm.Avg)
		if err == nil {
			err = w.Wait(ctx)
		}
		if err != nil {
			return 0, fmt.Errorf("zero: reduce-scatter of gradients: %w", err)
		}
		return loss, nil
	}
}

// Update steps the optimizer on this rank's shard, all-gathers the
// parameters and clears the gradients.
func (e *Engine) Update(ctx context.Context) error {
	if e.st3 != nil {
		// Parameters stay sharded: nothing to gather.
		e.opt.Step(e.flatP, e.gradShard)
		clear(e.gradShard)
		return nil
	}
	e.opt.Step(e.flatP[e.lo:e.lo+e.s], e.gradShard)
	clear(e.gradShard)
	clear(e.gradFull) // stage 1: drop the other ranks' unreduced parts
	shard := comm.FromSlice(e.flatP).Slice(e.lo, e.lo+e.s)
	if err := comm.Run(ctx)(e.c.AllGather(ctx, comm.FromSlice(e.flatP), shard)); err != nil {
		return fmt.Errorf("zero: all-gather of parameters: %w", err)
	}
	return nil
}
