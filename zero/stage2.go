package zero

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/models"
)

// layout cuts the padded flat buffer into buckets in reverse parameter
// order, capped like DDP's, and never crossing a shard boundary, so each
// bucket has exactly one owner.
func (e *Engine) layout() {
	ps := e.m.Params
	hi := e.c.Size() * e.s
	capBytes := e.opts.FirstBucketMB * (1 << 20)
	// Cut points: every shard boundary, and cap-sized steps within.
	for hi > 0 {
		shardLo := (hi - 1) / e.s * e.s
		lo := max(shardLo, hi-int(capBytes/4))
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
}

// onGrad copies a parameter's gradient into the buckets it touches and
// launches every bucket it completes.
func (e *Engine) onGrad(i int, g []float32) {
	p := e.m.Params[i]
	for _, bi := range e.owner[i] {
		b := e.bkts[bi]
		f := e.pending[bi]
		if f == nil {
			f = &inflight{b: bi, buf: make([]float32, b.hi-b.lo), left: len(b.params)}
			e.pending[bi] = f
			e.track(int64(len(f.buf)) * 4)
		}
		lo, hi := max(p.Offset, b.lo), min(p.Offset+p.Size, b.hi)
		models.AddTo(f.buf[lo-b.lo:hi-b.lo], g[lo-p.Offset:hi-p.Offset])
		f.left--
		if f.left == 0 {
			e.launch(f)
		}
	}
}

func (e *Engine) track(delta int64) {
	e.mu.Lock()
	e.live += delta
	e.peak = max(e.peak, e.live)
	e.mu.Unlock()
}

func (e *Engine) launch(f *inflight) {
	if f.w != nil {
		return
	}
	ctx := e.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	b := e.bkts[f.b]
	w, err := e.c.Reduce(ctx, comm.FromSlice(f.buf), comm.Avg, b.root)
	if err != nil {
		w = comm.Completed(err)
	}
	f.w = w
	f.done = make(chan struct{})
	// As soon as the bucket is reduced, the owner folds it into its shard
	// and everyone drops the buffer: transient memory stays at the buckets
	// actually in flight. Buckets cover disjoint ranges, so these
	// goroutines never touch the same shard elements.
	go func() {
		defer close(f.done)
		if f.err = w.Wait(context.Background()); f.err == nil && b.root == e.rank {
			dst := e.gradShard[b.lo-e.lo : b.hi-e.lo]
			for j, v := range f.buf {
				dst[j] += v
			}
		}
		e.track(-int64(len(f.buf)) * 4)
		f.buf = nil
	}()
}

// finish2 launches buckets no gradient reached (parameters unused in this
// step), waits for every bucket, adds the owned ones into the shard
// gradients and frees the buffers.
func (e *Engine) finish2(ctx context.Context) error {
	var first error
	for bi := range e.bkts {
		f := e.pending[bi]
		if f == nil {
			b := e.bkts[bi]
			f = &inflight{b: bi, buf: make([]float32, b.hi-b.lo)}
			e.pending[bi] = f
			e.track(int64(len(f.buf)) * 4)
		}
		e.launch(f)
	}
	for bi, f := range e.pending {
		select {
		case <-f.done:
		case <-ctx.Done():
			<-f.done // the Comm fails the op when ctx's deadline passes; never leave it writing
		}
		if f.err != nil && first == nil {
			first = fmt.Errorf("zero: reduce of gradient bucket %d: %w", bi, f.err)
		}
		e.pending[bi] = nil
	}
	return first
}

// drain waits for launched buckets after a failed backward.
func (e *Engine) drain() {
	for bi, f := range e.pending {
		if f != nil {
			if f.done != nil {
				<-f.done
			} else {
				e.track(-int64(len(f.buf)) * 4)
			}
			e.pending[bi] = nil
		}
	}
}
