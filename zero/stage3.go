package zero

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/internal/hugepage"
)

// stage3 shards every parameter tensor evenly over the ranks (padded to a
// multiple of N): rank r holds elements [r*s_i, (r+1)*s_i) of parameter i.
// It is the model's ParamStore: a layer's parameters are all-gathered when
// its forward op starts and again when its backward op starts, and dropped
// when the op ends; the next layer's gather (in the pass's direction) is
// issued as soon as a layer fetches, so it runs while the layer computes.
// Each gradient is reduce-scattered (averaged) straight into the owner's
// shard, in the background.
type stage3 struct {
	e      *Engine
	n      int
	off    []int // param -> offset of its shard in shardP
	sz     []int // param -> shard length s_i
	layer  []int // param -> index in layers
	layers [][]int

	mu      sync.Mutex
	slots   map[int]*slot // gathered or being gathered, by param
	pending []*rsOp
}

type slot struct {
	buf  []float32
	w    comm.Work
	pool bool // buf came from the engine's pool of shared buffers
}

type rsOp struct {
	done chan struct{}
	err  error
}

func (e *Engine) initStage3(sh Sharded) error {
	fp := e.fp
	n := e.c.Size()
	st := &stage3{e: e, n: n, slots: map[int]*slot{}, layers: sh.LayerParams()}
	st.off = make([]int, len(fp.Spans))
	st.sz = make([]int, len(fp.Spans))
	st.layer = make([]int, len(fp.Spans))
	total := 0
	for i, p := range fp.Spans {
		st.off[i] = total
		st.sz[i] = (p.Size + n - 1) / n
		total += st.sz[i]
	}
	for li, l := range st.layers {
		for _, i := range l {
			if i < 0 || i >= len(fp.Spans) {
				return comm.InvalidArgf("zero: rank %d: layer %d lists parameter %d of %d", e.rank, li, i, len(fp.Spans))
			}
			st.layer[i] = li
		}
	}
	e.s = total
	e.flatP = make([]float32, total)
	for i, p := range fp.Spans {
		lo := e.rank * st.sz[i]
		hi := min(lo+st.sz[i], p.Size)
		if lo < hi {
			copy(e.flatP[st.off[i]:], fp.Value[p.Offset+lo:p.Offset+hi])
		}
	}
	e.gradShard = make([]float32, total)
	// The model holds no parameters or gradients from here on.
	fp.Value, fp.Grad = nil, nil
	sh.SetStore(st)
	e.st3 = st
	return nil
}

func (st *stage3) gather(i int) *slot {
	if s := st.slots[i]; s != nil {
		return s
	}
	e := st.e
	s := &slot{}
	s.buf, s.pool = e.bucketBuf(st.n * st.sz[i])
	e.track(int64(len(s.buf)) * 4)
	shard := comm.FromSlice(e.flatP[st.off[i] : st.off[i]+st.sz[i]])
	ctx := e.runCtx
	if ctx == nil {
		s.w = comm.Completed(errNoCtx)
		st.slots[i] = s
		return s
	}
	w, err := e.c.AllGather(ctx, comm.FromSlice(s.buf), shard)
	if err != nil {
		w = comm.Completed(err)
	}
	s.w = w
	st.slots[i] = s
	return s
}

// Fetch gathers (or takes the prefetched) parameters and prefetches the
// next layer in the pass's direction.
func (st *stage3) Fetch(idx []int, backward bool) ([][]float32, error) {
	st.mu.Lock()
	slots := make([]*slot, len(idx))
	for k, i := range idx {
		slots[k] = st.gather(i)
	}
	if len(idx) > 0 {
		next := st.layer[idx[0]] + 1
		if backward {
			// The first layer's backward fetches nothing (its input, the
			// data, needs no gradient), so never prefetch it.
			next = st.layer[idx[0]] - 1
		}
		if next >= 0 && next < len(st.layers) && !(backward && next == 0) {
			for _, i := range st.layers[next] {
				st.gather(i)
			}
		}
	}
	st.mu.Unlock()
	vals := make([][]float32, len(idx))
	for k, s := range slots {
		<-s.w.Done() // bounded by the context it was started under
		if err := s.w.Err(); err != nil {
			return nil, fmt.Errorf("zero: gathering %s: %w", st.e.fp.Spans[idx[k]].Name, err)
		}
		vals[k] = s.buf[:st.e.fp.Spans[idx[k]].Size]
	}
	return vals, nil
}

// Release drops gathered parameters.
func (st *stage3) Release(idx []int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, i := range idx {
		if s := st.slots[i]; s != nil {
			delete(st.slots, i)
			st.e.track(-int64(len(s.buf)) * 4)
			if s.pool && done(s.w) {
				// (A gather still running keeps its buffer out of the pool
				// until Close.)
				st.e.pool.put(s.buf)
			}
		}
	}
}

// AddGrad reduce-scatters a full gradient into the owners' shards.
func (st *stage3) AddGrad(i int, g []float32) error {
	e := st.e
	s := st.sz[i]
	buf := g // the store owns g (see flat.Store)
	pooled := false
	if len(g) != st.n*s || e.pool.active() {
		// Padded, or into shared memory: the reduce-scatter is then
		// zero-copy, one copy of g instead of the ring's two of each byte.
		buf, pooled = e.bucketBuf(st.n * s)
		copy(buf, g)
	}
	part := make([]float32, s)
	e.track(int64(len(buf)+len(part)) * 4)
	drop := func() {
		e.track(-int64(len(buf)+len(part)) * 4)
		if pooled {
			e.pool.put(buf)
		}
	}
	if e.runCtx == nil {
		drop()
		return errNoCtx
	}
	w, err := e.c.ReduceScatter(e.runCtx, comm.FromSlice(part), comm.FromSlice(buf), comm.Avg)
	if err != nil {
		drop()
		return err
	}
	op := &rsOp{done: make(chan struct{})}
	st.mu.Lock()
	st.pending = append(st.pending, op)
	st.mu.Unlock()
	dst := e.gradShard[st.off[i] : st.off[i]+s]
	go func() {
		defer close(op.done)
		<-w.Done()
		if op.err = w.Err(); op.err == nil {
			for j, v := range part {
				dst[j] += v
			}
		}
		drop()
	}()
	return nil
}

// done reports whether w has completed, without waiting.
func done(w comm.Work) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// finish waits for the gradient reductions and drops prefetched
// parameters nobody fetched (the last prefetch of each pass).
func (st *stage3) finish() error {
	st.mu.Lock()
	pending := st.pending
	st.pending = nil
	var left []int
	for i := range st.slots {
		left = append(left, i)
	}
	st.mu.Unlock()
	var first error
	for _, op := range pending {
		<-op.done
		if op.err != nil && first == nil {
			first = fmt.Errorf("zero: reduce-scatter of gradients: %w", op.err)
		}
	}
	for _, i := range left {
		st.mu.Lock()
		s := st.slots[i]
		st.mu.Unlock()
		if s != nil {
			<-s.w.Done()
		}
	}
	st.Release(left)
	return first
}

var _ flat.Store = (*stage3)(nil)

// errNoCtx: a stage-3 graph ran outside Backward or Eval.
var errNoCtx = fmt.Errorf("zero: a stage-3 graph ran outside Backward or Eval, which give its collectives their context")

// takeShard copies this rank's per-tensor shards of full (the model's flat
// layout, P values) into dst (the shard layout).
func (st *stage3) takeShard(dst, full []float32) {
	e := st.e
	for i, p := range e.fp.Spans {
		lo := e.rank * st.sz[i]
		hi := min(lo+st.sz[i], p.Size)
		if lo < hi {
			copy(dst[st.off[i]:st.off[i]+hi-lo], full[p.Offset+lo:p.Offset+hi])
		}
	}
}

// fileSpan gathers, tensor by tensor, the contiguous range [lo, lo+n) of
// the flat parameters and of each optimizer state tensor (the layout of
// the shard files stages 1 and 2 write). A collective: every rank calls it
// with its own range.
func (st *stage3) fileSpan(ctx context.Context, lo, n int, opt map[string][]float32) ([]float32, map[string][]float32, error) {
	e := st.e
	params := hugepage.Float32s(n)
	outOpt := map[string][]float32{}
	names := make([]string, 0, len(opt))
	for k := range opt {
		outOpt[k] = hugepage.Float32s(n)
		names = append(names, k)
	}
	sort.Strings(names) // every rank gathers in the same order
	for i, p := range e.fp.Spans {
		a, b := max(lo, p.Offset), min(lo+n, p.Offset+p.Size)
		sources := [][]float32{e.flatP}
		dsts := [][]float32{params}
		for _, k := range names {
			sources = append(sources, opt[k])
			dsts = append(dsts, outOpt[k])
		}
		for j, src := range sources {
			full := hugepage.Float32s(st.n * st.sz[i])
			shard := comm.FromSlice(src[st.off[i] : st.off[i]+st.sz[i]])
			if err := comm.Run(ctx)(e.c.AllGather(ctx, comm.FromSlice(full), shard)); err != nil {
				return nil, nil, fmt.Errorf("zero: gathering %s for a checkpoint: %w", p.Name, err)
			}
			if a < b {
				copy(dsts[j][a-lo:b-lo], full[a-p.Offset:b-p.Offset])
			}
		}
	}
	return params, outOpt, nil
}

// FullParams gathers the whole model's parameters (stage 3 only), tensor
// by tensor, in the model's flat layout. A collective.
func (e *Engine) FullParams(ctx context.Context) ([]float32, error) {
	if e.st3 == nil {
		return append([]float32(nil), e.fp.Value[:e.p]...), nil
	}
	params, _, err := e.st3.fileSpan(ctx, 0, e.p, nil)
	return params, err
}
