// Package ddp is distributed data parallelism for gdist models, like
// PyTorch's DistributedDataParallel: every rank holds the whole model,
// trains on its own slice of each global batch, and averages gradients with
// all-reduce before the optimizer step.
//
// Gradients are all-reduced in buckets: contiguous ranges of the model's
// flat gradient buffer (views, never copies), in reverse parameter order,
// the first (last layers) capped at Options.FirstBucketMB and the rest at
// Options.BucketMB. A bucket's all-reduce starts the moment the last of its
// gradients is produced during backward (models.Graph.OnGrad), so
// communication overlaps the rest of backward; Options.NoOverlap defers all
// of them to the end, for comparison. Finish waits for every bucket.
//
// NoSync skips communication for gradient accumulation: gradients add up
// locally until the next step that syncs. CommHook replaces the plain
// average (FP16Compress and BF16Compress halve the bytes sent). With
// Options.Debug, Finish also checks that every rank holds bit-identical
// parameters. A DDP is used by one goroutine (the training loop).
package ddp

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/models"
)

// Options tunes DDP. The zero value gives PyTorch's defaults.
type Options struct {
	BucketMB      float64 // cap of every bucket but the first (default 25)
	FirstBucketMB float64 // cap of the first bucket (default 1)
	NoOverlap     bool    // start all-reduces only after backward
	Hook          CommHook
	Debug         bool // check identical parameters after every Finish
}

// Bucket is a contiguous range [Lo, Hi) of the gradient buffer holding the
// gradients of Params (model parameter indices).
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

// DDP wraps a model and a Comm.
type DDP struct {
	c     comm.Comm
	m     *models.Model
	opts  Options
	hook  CommHook
	bkts  []Bucket
	owner []int // param -> bucket

	noSync  bool
	ctx     context.Context
	pending []int
	works   []comm.Work
	started []time.Time
	order   []int // buckets in launch order this step

	mu     sync.Mutex
	err    error
	events []Event
}

// New wraps m. It broadcasts rank 0's parameters and batch-norm running
// statistics to every rank (blocking; every rank must call it) and lays out
// the buckets.
func New(ctx context.Context, c comm.Comm, m *models.Model, opts Options) (*DDP, error) {
	if c == nil || m == nil {
		return nil, comm.InvalidArgf("ddp: nil comm or model")
	}
	if opts.BucketMB == 0 {
		opts.BucketMB = 25
	}
	if opts.FirstBucketMB == 0 {
		opts.FirstBucketMB = 1
	}
	if !(opts.BucketMB > 0) || !(opts.FirstBucketMB > 0) || math.IsInf(opts.BucketMB, 0) || math.IsInf(opts.FirstBucketMB, 0) {
		return nil, comm.InvalidArgf("ddp: bucket sizes must be positive (got %v MB and first %v MB)", opts.BucketMB, opts.FirstBucketMB)
	}
	d := &DDP{c: c, m: m, opts: opts, hook: opts.Hook}
	if d.hook == nil {
		d.hook = Average{}
	}
	d.layout()
	if err := d.Broadcast(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *DDP) layout() {
	ps := d.m.Params
	d.owner = make([]int, len(ps))
	capBytes := d.opts.FirstBucketMB * (1 << 20)
	var cur *Bucket
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if cur != nil && float64((cur.Hi-p.Offset)*4) > capBytes {
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

// Buckets returns the bucket layout.
func (d *DDP) Buckets() []Bucket { return d.bkts }

// Comm returns the wrapped Comm.
func (d *DDP) Comm() comm.Comm { return d.c }

// Model returns the wrapped model.
func (d *DDP) Model() *models.Model { return d.m }

// Broadcast copies rank 0's parameters and batch-norm state to every rank.
func (d *DDP) Broadcast(ctx context.Context) error {
	run := comm.Run(ctx)
	if err := run(d.c.Broadcast(ctx, comm.FromSlice(d.m.Flat), 0)); err != nil {
		return fmt.Errorf("ddp: broadcasting parameters: %w", err)
	}
	for _, b := range d.m.BNs {
		if err := run(d.c.Broadcast(ctx, comm.FromSlice(b.RunningMean), 0)); err != nil {
			return fmt.Errorf("ddp: broadcasting batch-norm state: %w", err)
		}
		if err := run(d.c.Broadcast(ctx, comm.FromSlice(b.RunningVar), 0)); err != nil {
			return fmt.Errorf("ddp: broadcasting batch-norm state: %w", err)
		}
		n := []int64{b.NumBatches}
		if err := run(d.c.Broadcast(ctx, comm.FromSlice(n), 0)); err != nil {
			return fmt.Errorf("ddp: broadcasting batch-norm state: %w", err)
		}
		b.NumBatches = n[0]
	}
	return nil
}

// SetNoSync turns gradient synchronisation off (accumulate locally) or on.
// Like PyTorch's no_sync(): the steps that skip sync add their gradients
// into the buffer, and the next synced step all-reduces the sum.
func (d *DDP) SetNoSync(on bool) { d.noSync = on }

// Attach makes gr deliver its gradients to this DDP.
func (d *DDP) Attach(gr *models.Graph) { gr.OnGrad = d.onGrad }

// Step runs forward and backward of gr on one batch (gradients added into
// the model's gradient buffer, buckets launched as they fill) and then
// Finish. The caller runs the optimizer and zeroes the gradients after.
func (d *DDP) Step(ctx context.Context, gr *models.Graph, x []float32, y []int32) (float32, error) {
	d.Attach(gr)
	d.ctx = ctx
	loss, err := gr.Step(x, y)
	if err != nil {
		d.abandon()
		return 0, err
	}
	return loss, d.Finish(ctx)
}

func (d *DDP) onGrad(i int, g []float32) {
	p := d.m.Params[i]
	models.AddTo(d.m.Grad[p.Offset:p.Offset+p.Size], g)
	if d.noSync || d.opts.NoOverlap {
		return
	}
	b := d.owner[i]
	d.pending[b]--
	if d.pending[b] == 0 {
		d.launch(b)
	}
}

func (d *DDP) launch(b int) {
	if d.works[b] != nil {
		return
	}
	ctx := d.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	bk := d.bkts[b]
	d.started[b] = time.Now()
	w, err := d.hook.Start(ctx, d.c, d.m.Grad[bk.Lo:bk.Hi])
	if err != nil {
		w = comm.Completed(err)
	}
	d.works[b] = w
	d.order = append(d.order, b)
}

func (d *DDP) abandon() {
	// Wait for launched buckets so no all-reduce still touches the buffer.
	for _, w := range d.works {
		if w != nil {
			w.Wait(context.Background())
		}
	}
	d.reset()
}

// Finish launches any bucket not launched yet (all of them with NoOverlap)
// and waits for every bucket. After it returns nil, the gradient buffer
// holds the average over ranks. With NoSync it does nothing.
func (d *DDP) Finish(ctx context.Context) error {
	if d.noSync {
		return nil
	}
	d.ctx = ctx
	for b := range d.bkts {
		d.launch(b)
	}
	var first error
	for _, b := range d.order {
		err := d.works[b].Wait(ctx)
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
	d.reset()
	if first != nil {
		return first
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
// batch-norm statistics (a hash of them, all-gathered). Blocking; every rank
// must call it.
func (d *DDP) CheckParams(ctx context.Context) error {
	h := fnv.New64a()
	h.Write(f32bytes(d.m.Flat))
	for _, name := range d.m.BufferNames() {
		h.Write(f32bytes(d.m.Buffers()[name]))
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

func f32bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}
