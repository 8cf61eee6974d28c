package zero

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
)

// layout cuts the padded flat buffer into buckets in reverse parameter
// order, capped like DDP's, and never crossing a shard boundary, so each
// bucket has exactly one owner.
func (e *Engine) layout() {
	ps := e.fp.Spans
	hi := e.c.Size() * e.s
	capBytes := e.opts.FirstBucketMB * (1 << 20)
	esize := float64(e.fp.DType().Size())
	// Cut points: every shard boundary, and cap-sized steps within.
	for hi > 0 {
		shardLo := (hi - 1) / e.s * e.s
		lo := max(shardLo, hi-int(capBytes/esize))
		lo = max(lo, 0)
		e.bkts = append(e.bkts, bucket{lo: lo, hi: hi, root: lo / e.s})
		capBytes = e.opts.BucketMB * (1 << 20)
		hi = lo
	}
	e.owner = make([][]int, len(ps))
	for bi := range e.bkts {
		b := &e.bkts[bi]
		for i, p := range ps {
			if p.Offset < b.hi && p.Offset+p.Size > b.lo {
				b.params = append(b.params, i)
				e.owner[i] = append(e.owner[i], bi)
			}
		}
	}
	e.pending = make([]*inflight, len(e.bkts))
	e.left = make([]int, len(e.bkts))
	e.resetLeft()
}

func (e *Engine) resetLeft() {
	for bi, b := range e.bkts {
		e.left[bi] = len(b.params)
	}
}

// onGrad copies a parameter's gradient into the buckets it touches and
// launches every bucket it completes (models without a full gradient
// buffer).
func (e *Engine) onGrad(i int, g []float32) {
	p := e.fp.Spans[i]
	for _, bi := range e.owner[i] {
		b := e.bkts[bi]
		f := e.pending[bi]
		if f == nil {
			f = &inflight{b: bi, left: len(b.params)}
			f.buf, f.pool = e.bucketBuf(b.hi - b.lo)
			e.pending[bi] = f
			e.track(int64(len(f.buf)) * 4)
		}
		if f.w != nil {
			// Never add into a buffer under reduction: the pass ran twice
			// without Finish; the bucket's sum misses this gradient.
			continue
		}
		lo, hi := max(p.Offset, b.lo), min(p.Offset+p.Size, b.hi)
		flat.AddTo(f.buf[lo-b.lo:hi-b.lo], g[lo-p.Offset:hi-p.Offset])
		f.left--
		if f.left == 0 && e.runCtx != nil {
			e.launch(e.runCtx, f)
		}
	}
}

// launchBucket reduces bucket bi straight from the full gradient buffer
// (in place; plain gorgonia models).
func (e *Engine) launchBucket(ctx context.Context, bi int) {
	if e.pending[bi] != nil {
		return
	}
	b := e.bkts[bi]
	f := &inflight{b: bi}
	if e.f64 != nil {
		f.buf64 = e.fp.Grad64[b.lo:b.hi]
	} else {
		f.buf = e.fp.Grad[b.lo:b.hi]
	}
	e.pending[bi] = f
	e.launch(ctx, f)
}

func (e *Engine) track(delta int64) {
	e.mu.Lock()
	e.live += delta
	e.peak = max(e.peak, e.live)
	e.mu.Unlock()
}

func (e *Engine) launch(ctx context.Context, f *inflight) {
	if f.w != nil {
		return
	}
	b := e.bkts[f.b]
	buf := comm.FromSlice(f.buf)
	if f.buf64 != nil {
		buf = comm.FromSlice(f.buf64)
	}
	w, err := e.c.Reduce(ctx, buf, comm.Avg, b.root)
	if err != nil {
		w = comm.Completed(err)
	}
	f.w = w
	f.done = make(chan struct{})
	transient := !e.inPlace
	// As soon as the bucket is reduced, the owner folds it into its shard
	// and everyone drops the buffer: transient memory stays at the buckets
	// actually in flight. Buckets cover disjoint ranges, so these
	// goroutines never touch the same shard elements. The wait is bounded
	// by ctx: the Comm fails the op when it ends.
	go func() {
		defer close(f.done)
		<-w.Done()
		if f.err = w.Err(); f.err == nil && b.root == e.rank {
			if f.buf64 != nil {
				dst := e.f64.gradShard[b.lo-e.lo : b.hi-e.lo]
				for j, v := range f.buf64 {
					dst[j] += v
				}
			} else {
				dst := e.gradShard[b.lo-e.lo : b.hi-e.lo]
				for j, v := range f.buf {
					dst[j] += v
				}
			}
		}
		if transient {
			e.track(-int64(len(f.buf)) * 4)
		}
		if f.pool {
			e.pool.put(f.buf)
		}
		f.buf, f.buf64 = nil, nil
	}()
}

// finish2 launches buckets not launched yet (parameters unused in this
// step, untapped ones, or all of them outside Backward), waits for every
// bucket, adds the owned ones into the shard gradients and frees the
// buffers.
func (e *Engine) finish2(ctx context.Context) error {
	var first error
	if e.noSync && e.inPlace {
		// The full buffer accumulates; the next synced step reduces it.
		return nil
	}
	for bi := range e.bkts {
		if e.inPlace {
			e.launchBucket(ctx, bi)
			continue
		}
		f := e.pending[bi]
		if f == nil {
			b := e.bkts[bi]
			f = &inflight{b: bi}
			f.buf, f.pool = e.bucketBuf(b.hi - b.lo)
			e.pending[bi] = f
			e.track(int64(len(f.buf)) * 4)
		}
		e.launch(ctx, f)
	}
	for bi, f := range e.pending {
		<-f.done
		if f.err != nil && first == nil {
			first = fmt.Errorf("zero: reduce of gradient bucket %d: %w", bi, f.err)
		}
		e.pending[bi] = nil
	}
	e.resetLeft()
	return first
}

// drain waits for launched buckets after a failed backward.
func (e *Engine) drain() {
	for bi, f := range e.pending {
		if f != nil {
			if f.done != nil {
				<-f.done
			} else if !e.inPlace {
				e.track(-int64(len(f.buf)) * 4)
				if f.pool {
					e.pool.put(f.buf)
				}
			}
			e.pending[bi] = nil
		}
	}
	if e.left != nil {
		e.resetLeft()
	}
}

// bucketPool keeps stage 2's bucket buffers (over an nn model: made as
// the gradients come, dropped once reduced) in the Comm's shared memory,
// so that every bucket's reduce to its owner is zero-copy (comm.Alloc):
// a buffer goes back to the pool when its reduce is done, so the pool
// holds as many of each size as were ever in flight at once.
type bucketPool struct {
	mu    sync.Mutex
	a     comm.Allocator // nil: no shared memory (or closed)
	free  map[int][][]float32
	frees []func()
}

// bucketBuf returns a zeroed buffer of n values for a bucket and whether
// it came from the pool (shared memory), else it is ordinary memory.
func (e *Engine) bucketBuf(n int) ([]float32, bool) {
	p := &e.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.a == nil {
		return make([]float32, n), false
	}
	if l := p.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[n] = l[:len(l)-1]
		clear(b)
		return b, true
	}
	b, free, err := p.a.Alloc(comm.Float32, n)
	if err != nil {
		// No room (or no shared memory after all): ordinary buckets from
		// now on, and SharedBuffersErr says why.
		if !errors.Is(err, comm.ErrUnsupported) {
			e.shareErr = err
		}
		p.a = nil
		return make([]float32, n), false
	}
	p.frees = append(p.frees, free)
	s, _ := comm.AsSlice[float32](b)
	return s, true
}

// used reports whether the pool holds shared memory.
func (p *bucketPool) used() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.frees) > 0
}

// active reports whether buffers come from shared memory.
func (p *bucketPool) active() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.a != nil
}

func (p *bucketPool) put(b []float32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free != nil {
		p.free[len(b)] = append(p.free[len(b)], b)
	}
}

// close frees the pool's shared memory; later buckets are ordinary.
func (p *bucketPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frees {
		f()
	}
	p.a, p.free, p.frees = nil, nil, nil
}
