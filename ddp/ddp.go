package ddp

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
)

// The bucket caps in MiB that Options' zero values stand for: PyTorch's
// (bucket_cap_mb, and the first bucket's, dist._DEFAULT_FIRST_BUCKET_BYTES).
// ZeRO's buckets take them too.
const (
	DefaultBucketMB      = 25
	DefaultFirstBucketMB = 1
)

// Options tunes DDP. The zero value gives PyTorch's defaults.
type Options struct {
	BucketMB      float64 // cap of every bucket but the first (0: DefaultBucketMB)
	FirstBucketMB float64 // cap of the first bucket (0: DefaultFirstBucketMB)
	NoOverlap     bool    // start all-reduces only after backward
	Hook          CommHook
	Debug         bool // check identical parameters after every Finish
	// OrdinaryGrads keeps the gradient buffer where the model put it. By
	// default New and Wrap move it into memory from comm.Alloc, which on
	// the shm backend (and auto, on one host) makes every bucket's
	// all-reduce zero-copy.
	OrdinaryGrads bool
}

// Model is what DDP needs of a model: its learnables in flat buffers
// (package flat). *nn.Model has it; Wrap makes one from plain gorgonia
// learnables.
type Model interface {
	FlatParams() *flat.Params
}

// Stateful is a Model with non-learnable state (batch-norm running
// statistics) that rank 0 broadcasts with the parameters and that Debug
// checks.
type Stateful interface {
	StateBuffers() []comm.Buffer
}

// Bucket is a contiguous range [Lo, Hi) of the gradient buffer holding the
// gradients of Params (span indices).
type Bucket struct {
	Lo, Hi int
	Params []int
}

// Event records when a bucket's all-reduce started and finished, for
// measuring overlap.
type Event struct {
	Bucket        int
	Start, Finish time.Time
}

// ErrLateGradient is returned by Finish when a gradient was produced
// after its bucket's all-reduce had started: two backward passes without
// Finish between them, or gradient accumulation without SetNoSync.
var ErrLateGradient = errors.New("ddp: gradient produced after its bucket was reduced")

// DDP averages a model's gradients over the ranks of a Comm.
type DDP struct {
	c     comm.Comm
	p     *flat.Params
	state []comm.Buffer
	opts  Options
	hook  CommHook
	bkts  []Bucket
	owner []int // span -> bucket

	noSync   bool
	freeGrad func() // frees the shared gradient buffer (nil: ordinary memory)
	shareErr error  // why the gradients are not in shared memory (SharedGradsErr)
	// runCtx is the context of the Backward call under way (nil outside
	// one): buckets launched from gradient hooks run under it.
	runCtx   context.Context
	pending  []int
	works    []comm.Work
	started  []time.Time
	order    []int // buckets in launch order this step
	late     error
	verified bool

	mu     sync.Mutex
	events []Event
}

// New wraps m. It broadcasts rank 0's parameters (and state, for a
// Stateful model) to every rank (blocking; every rank must call it) and
// lays out the buckets.
func New(ctx context.Context, c comm.Comm, m Model, opts Options) (*DDP, error) {
	if c == nil || m == nil {
		return nil, comm.InvalidArgf("ddp: nil comm or model")
	}
	p := m.FlatParams()
	if p == nil {
		return nil, comm.InvalidArgf("ddp: the model has no flat parameters")
	}
	var state []comm.Buffer
	if s, ok := m.(Stateful); ok {
		state = s.StateBuffers()
	}
	return newDDP(ctx, c, p, state, opts)
}

// Wrap makes a plain gorgonia model data parallel: it lays the learnables
// out in one flat parameter and one flat gradient buffer (flat.Bind: each
// node's *tensor.Dense value is re-backed in place onto its view, so
// tensors the model kept read and write the flat buffer; a value that
// cannot be is an error naming it), broadcasts rank 0's values and
// returns the DDP that averages their gradients. The graph,
// loss, tape machine and solver stay the user's; build the machine with
// gorgonia.BindDualValues(learnables...) so gradients land in the flat
// buffer. Use Tap on each learnable in the forward code for overlap.
func Wrap(ctx context.Context, c comm.Comm, learnables []*G.Node, opts Options) (*DDP, error) {
	if c == nil {
		return nil, comm.InvalidArgf("ddp: nil comm")
	}
	p, err := flat.Bind(learnables, 0)
	if err != nil {
		return nil, fmt.Errorf("ddp: rank %d: %w", c.Rank(), err)
	}
	return newDDP(ctx, c, p, nil, opts)
}

// WrapValues is Wrap for a model that builds a new graph every step
// (a LispMachine, a recurrent model unrolled to each sequence): it takes
// the parameter tensors the model keeps across graphs (flat.BindValues:
// each *tensor.Dense is re-backed in place onto the flat buffer, so the
// model goes on using it) and broadcasts rank 0's values. Each step,
// build the graph over those tensors (gorgonia.WithValue(t)), then
//
//	err := d.Backward(ctx, func() error {
//		if err := vm.RunAll(); err != nil { // forward and backward
//			return err
//		}
//		return d.AddGrads(nodes) // this graph's nodes over the parameters, in WrapValues' order
//	})
//	solver.Step(d.ValueGrads()) // the averaged gradients; the solver clears them
func WrapValues(ctx context.Context, c comm.Comm, values []flat.Value, opts Options) (*DDP, error) {
	if c == nil {
		return nil, comm.InvalidArgf("ddp: nil comm")
	}
	p, err := flat.BindValues(values, 0)
	if err != nil {
		return nil, fmt.Errorf("ddp: rank %d: %w", c.Rank(), err)
	}
	return newDDP(ctx, c, p, nil, opts)
}

// AddGrads adds one step's gradients (a model wrapped with WrapValues):
// nodes[i] is this step's graph node over parameter i (nil if unused).
// Call it inside Backward's function, after the machine ran: buckets
// start their all-reduce as their gradients arrive. An error names the
// node that does not hold its parameter's tensor or lacks a gradient.
func (d *DDP) AddGrads(nodes []*G.Node) error {
	if err := d.p.AddGrads(nodes, d.tapped); err != nil {
		return fmt.Errorf("ddp: rank %d: %w", d.c.Rank(), err)
	}
	return nil
}

// ValueGrads is the parameters with their (averaged, after Backward)
// gradients, for a gorgonia solver: solver.Step(d.ValueGrads()).
func (d *DDP) ValueGrads() []G.ValueGrad { return d.p.ValueGrads() }

// Tap is flat.Tap: use the node it returns in place of the learnable w in
// the forward code, so that w's bucket is reduced while backward goes on.
func Tap(w *G.Node) (*G.Node, error) { return flat.Tap(w) }

func newDDP(ctx context.Context, c comm.Comm, p *flat.Params, state []comm.Buffer, opts Options) (*DDP, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("ddp: rank %d: %w", c.Rank(), err)
	}
	if err := p.CheckSame(ctx, c); err != nil { // every rank's model has the same shapes
		return nil, fmt.Errorf("ddp: %w", err)
	}
	if !p.HasGrad() {
		return nil, comm.InvalidArgf("ddp: rank %d: the model has no gradient buffer", c.Rank())
	}
	if opts.BucketMB == 0 {
		opts.BucketMB = DefaultBucketMB
	}
	if opts.FirstBucketMB == 0 {
		opts.FirstBucketMB = DefaultFirstBucketMB
	}
	if !(opts.BucketMB > 0) || !(opts.FirstBucketMB > 0) || math.IsInf(opts.BucketMB, 0) || math.IsInf(opts.FirstBucketMB, 0) {
		return nil, comm.InvalidArgf("ddp: bucket sizes must be positive (got %v MB and first %v MB)", opts.BucketMB, opts.FirstBucketMB)
	}
	d := &DDP{c: c, p: p, state: state, opts: opts, hook: opts.Hook}
	if d.hook == nil {
		d.hook = Average{}
	}
	if _, ok := d.hook.(BufferHook); !ok && p.DType() != comm.Float32 {
		return nil, comm.InvalidArgf("ddp: rank %d: the learnables are %v and the gradient hook %q takes float32 gradients only: use no hook (ddp.Average) or one that implements ddp.BufferHook", c.Rank(), p.DType(), d.hook.Name())
	}
	if a, ok := c.(comm.Allocator); ok && !opts.OrdinaryGrads && p.GradBuf().Len() > 0 {
		// A Comm without shared memory, or whose shared memory is too
		// small for the gradients (shm's area), leaves them where they
		// are: every collective works on ordinary memory.
		if b, free, err := a.Alloc(p.DType(), p.GradBuf().Len()); err == nil {
			if err := p.MoveBuffers(comm.Buffer{}, b); err != nil {
				free()
				return nil, fmt.Errorf("ddp: rank %d: %w", c.Rank(), err)
			}
			d.freeGrad = free
		} else if !errors.Is(err, comm.ErrUnsupported) {
			d.shareErr = err
		}
	}
	d.layout()
	p.OnGrad(d.tapped)
	if err := d.Broadcast(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *DDP) layout() {
	ps := d.p.Spans
	d.owner = make([]int, len(ps))
	capBytes := d.opts.FirstBucketMB * (1 << 20)
	esize := d.p.DType().Size()
	var cur *Bucket
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if cur != nil && float64((cur.Hi-p.Offset)*esize) > capBytes {
			d.bkts = append(d.bkts, *cur)
			cur = nil
			capBytes = d.opts.BucketMB * (1 << 20)
		}
		if cur == nil {
			cur = &Bucket{Hi: p.Offset + p.Size}
		}
		cur.Lo = p.Offset
		cur.Params = append(cur.Params, i)
		d.owner[i] = len(d.bkts)
	}
	if cur != nil {
		d.bkts = append(d.bkts, *cur)
	}
	d.pending = make([]int, len(d.bkts))
	d.works = make([]comm.Work, len(d.bkts))
	d.started = make([]time.Time, len(d.bkts))
	d.reset()
}

func (d *DDP) reset() {
	for i, b := range d.bkts {
		d.pending[i] = len(b.Params)
		d.works[i] = nil
	}
	d.order = d.order[:0]
}

// Close moves the gradient buffer back into ordinary memory (if New put
// it in the Comm's shared memory) and frees the shared memory. The DDP
// still works after it, with ordinary buffers. It does not close the
// Comm.
func (d *DDP) Close() error {
	if d.freeGrad == nil {
		return nil
	}
	g := d.p.GradBuf()
	fresh, _ := comm.FromBytes(g.DType(), make([]byte, g.Bytes()))
	if err := d.p.MoveBuffers(comm.Buffer{}, fresh); err != nil {
		return err
	}
	d.freeGrad()
	d.freeGrad = nil
	return nil
}

// SharedGrads reports whether the gradient buffer lies in memory from
// comm.Alloc on an Allocator Comm (Options.OrdinaryGrads).
func (d *DDP) SharedGrads() bool { return d.freeGrad != nil }

// SharedGradsErr is why the gradient buffer is not in shared memory on a
// Comm that has some (its area is too small: the error names the setting
// that enlarges it); nil when it is there, or the Comm has none, or
// Options.OrdinaryGrads kept it out.
func (d *DDP) SharedGradsErr() error { return d.shareErr }

// Buckets returns the bucket layout.
func (d *DDP) Buckets() []Bucket { return d.bkts }

// Comm returns the wrapped Comm.
func (d *DDP) Comm() comm.Comm { return d.c }

// Params returns the flat parameters and gradients.
func (d *DDP) Params() *flat.Params { return d.p }

// ZeroGrad clears the gradient buffer. Gradients accumulate over backward
// passes until cleared: gorgonia's solvers clear them at the end of their
// Step; with package optim (or any other update), call ZeroGrad after it.
func (d *DDP) ZeroGrad() { d.p.ZeroGrad() }

// Broadcast copies rank 0's parameters and state to every rank.
func (d *DDP) Broadcast(ctx context.Context) error {
	run := comm.Run(ctx)
	if err := run(d.c.Broadcast(ctx, d.p.ValueBuf(), 0)); err != nil {
		return fmt.Errorf("ddp: broadcasting parameters: %w", err)
	}
	for _, b := range d.state {
		if err := run(d.c.Broadcast(ctx, b, 0)); err != nil {
			return fmt.Errorf("ddp: broadcasting model state: %w", err)
		}
	}
	return nil
}

// SetNoSync turns gradient synchronisation off (accumulate locally) or on.
// Like PyTorch's no_sync(): the steps that skip sync add their gradients
// into the buffer, and the next synced step all-reduces the sum.
func (d *DDP) SetNoSync(on bool) { d.noSync = on }

// AddGrad adds g into learnable i's gradient and marks it complete: the
// entry for layers that deliver gradients by value during backward (the
// nn models' Graph.OnGrad).
func (d *DDP) AddGrad(i int, g []float32) {
	if i < 0 || i >= len(d.p.Spans) {
		d.setLate(fmt.Errorf("ddp: gradient for learnable %d of %d", i, len(d.p.Spans)))
		return
	}
	if d.p.DType() != comm.Float32 {
		d.setLate(fmt.Errorf("ddp: AddGrad: learnable %q is %v, not float32: use AddGrads", d.p.Spans[i].Name, d.p.DType()))
		return
	}
	d.tapped(i, false)
	flat.AddTo(d.p.GradOf(i), g)
	d.tapped(i, true)
}

// tapped is told about learnable i's gradient: about to be added
// (ready false) or complete (ready true).
func (d *DDP) tapped(i int, ready bool) {
	if d.noSync {
		return
	}
	b := d.owner[i]
	if !ready {
		if w := d.works[b]; w != nil {
			// Never add into a buffer under reduction.
			<-w.Done()
			d.setLate(fmt.Errorf("%w: %s (call Finish after every backward pass, or SetNoSync(true) on accumulation steps)", ErrLateGradient, d.p.Spans[i].Name))
		}
		return
	}
	d.pending[b]--
	if d.pending[b] == 0 && !d.opts.NoOverlap && d.runCtx != nil {
		d.launch(d.runCtx, b)
	}
}

func (d *DDP) setLate(err error) {
	if d.late == nil {
		d.late = err
	}
}

func (d *DDP) launch(ctx context.Context, b int) {
	if d.works[b] != nil {
		return
	}
	bk := d.bkts[b]
	d.started[b] = time.Now()
	var w comm.Work
	var err error
	if bh, ok := d.hook.(BufferHook); ok {
		w, err = bh.StartBuffer(ctx, d.c, d.p.GradBuf().Slice(bk.Lo, bk.Hi))
	} else {
		w, err = d.hook.Start(ctx, d.c, d.p.Grad[bk.Lo:bk.Hi])
	}
	if err != nil {
		w = comm.Completed(err)
	}
	d.works[b] = w
	d.order = append(d.order, b)
}

// Backward runs one forward and backward pass (run: the tape machine's
// RunAll, or an nn graph's Step) and then Finish. Buckets whose
// gradients are complete start reducing while run goes on (with taps on a
// plain gorgonia graph; always with nn models), under ctx.
// After it returns nil the gradient buffer holds the average over ranks.
// If run fails, Backward waits for the reductions it started and returns
// run's error.
func (d *DDP) Backward(ctx context.Context, run func() error) error {
	d.runCtx = ctx
	err := run()
	d.runCtx = nil
	if err != nil {
		d.abandon()
		return err
	}
	return d.Finish(ctx)
}

func (d *DDP) abandon() {
	// Wait for launched buckets so no all-reduce still touches the buffer
	// (each is bounded by the context it was launched under).
	for _, w := range d.works {
		if w != nil {
			<-w.Done()
		}
	}
	d.p.Flush()
	d.reset()
	d.late = nil
}

// Finish launches any bucket not launched yet (all of them without taps
// or with NoOverlap) and waits for every bucket. After it returns nil,
// the gradient buffer holds the average over ranks. With NoSync it does
// nothing. Call it after every backward pass (Backward does).
func (d *DDP) Finish(ctx context.Context) error {
	d.p.Flush()
	if d.noSync {
		return nil
	}
	if !d.verified {
		if err := d.p.Verify(); err != nil {
			d.abandon()
			return fmt.Errorf("ddp: rank %d: %w", d.c.Rank(), err)
		}
		d.verified = true
	}
	for b := range d.bkts {
		d.launch(ctx, b)
	}
	var first error
	for _, b := range d.order {
		err := d.works[b].Wait(ctx)
		if ctx.Err() == nil {
			// Wait returned the all-reduce's outcome: the Work is
			// finished with (the Comm may reuse it, see comm.Work), so
			// abandon must not wait for it again.
			d.works[b] = nil
		}
		if err != nil && first == nil {
			first = fmt.Errorf("ddp: all-reduce of bucket %d (%d gradients): %w", b, d.bkts[b].Hi-d.bkts[b].Lo, err)
		}
		d.mu.Lock()
		d.events = append(d.events, Event{Bucket: b, Start: d.started[b], Finish: time.Now()})
		if len(d.events) > 4096 {
			d.events = d.events[len(d.events)-1024:]
		}
		d.mu.Unlock()
	}
	if first != nil {
		d.abandon()
		return first
	}
	d.reset()
	if late := d.late; late != nil {
		d.late = nil
		return late
	}
	if d.opts.Debug {
		return d.CheckParams(ctx)
	}
	return nil
}

// Events returns the bucket all-reduce timings recorded so far and clears
// them.
func (d *DDP) Events() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	ev := d.events
	d.events = nil
	return ev
}

// ErrDiverged is returned by CheckParams when ranks hold different
// parameters.
var ErrDiverged = errors.New("ddp: ranks hold different parameters")

// CheckParams verifies that every rank holds bit-identical parameters and
// state (a hash of them, all-gathered). Blocking; every rank must call it.
func (d *DDP) CheckParams(ctx context.Context) error {
	h := fnv.New64a()
	h.Write(d.p.ValueBuf().Slice(0, d.p.Len()).Host())
	for _, b := range d.state {
		h.Write(b.Host())
	}
	mine := []int64{int64(h.Sum64())}
	all := make([]int64, d.c.Size())
	if err := comm.Run(ctx)(d.c.AllGather(ctx, comm.FromSlice(all), comm.FromSlice(mine))); err != nil {
		return fmt.Errorf("ddp: checking parameters: %w", err)
	}
	var bad []int
	for r, v := range all {
		if v != all[0] {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: ranks %v differ from rank 0", ErrDiverged, bad)
	}
	return nil
}
