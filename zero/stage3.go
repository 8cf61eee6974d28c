package zero

import (
	"context"
	"fmt"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/models"
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
	buf []float32
	w   comm.Work
}

type rsOp struct {
	done chan struct{}
	err  error
}

func (e *Engine) initStage3(ctx context.Context) error {
	m := e.m
	n := e.c.Size()
	st := &stage3{e: e, n: n, slots: map[int]*slot{}, layers: m.LayerParams()}
	st.off = make([]int, len(m.Params))
	st.sz = make([]int, len(m.Params))
	st.layer = make([]int, len(m.Params))
	total := 0
	for i, p := range m.Params {
		st.off[i] = total
		st.sz[i] = (p.Size + n - 1) / n
		total += st.sz[i]
	}
	for li, l := range st.layers {
		for _, i := range l {
			st.layer[i] = li
		}
	}
	e.s = total
	e.flatP = make([]float32, total)
	for i, p := range m.Params {
		lo := e.rank * st.sz[i]
		hi := min(lo+st.sz[i], p.Size)
		if lo < hi {
			copy(e.flatP[st.off[i]:], m.Flat[p.Offset+lo:p.Offset+hi])
		}
	}
	e.gradShard = make([]float32, total)
	// The model holds no parameters or gradients from here on.
	m.Flat, m.Grad = nil, nil
	m.Store = st
	e.st3 = st
	return nil
}

func (st *stage3) gather(i int) *slot {
	if s := st.slots[i]; s != nil {
		return s
	}
	e := st.e
	s := &slot{buf: make([]float32, st.n*st.sz[i])}
	e.track(int64(len(s.buf)) * 4)
	shard := comm.FromSlice(e.flatP[st.off[i] : st.off[i]+st.sz[i]])
	w, err := e.c.AllGather(e.opctx(), comm.FromSlice(s.buf), shard)
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
		if err := s.w.Wait(st.e.opctx()); err != nil {
			return nil, fmt.Errorf("zero: gathering %s: %w", st.e.m.Params[idx[k]].Name, err)
		}
		vals[k] = s.buf[:st.e.m.Params[idx[k]].Size]
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
		}
	}
}

// AddGrad reduce-scatters a full gradient into the owners' shards.
func (st *stage3) AddGrad(i int, g []float32) error {
	e := st.e
	s := st.sz[i]
	buf := g // the store owns g (see models.ParamStore)
	if len(g) != st.n*s {
		buf = make([]float32, st.n*s)
		copy(buf, g)
	}
	part := make([]float32, s)
	e.track(int64(len(buf)+len(part)) * 4)
	w, err := e.c.ReduceScatter(e.opctx(), comm.FromSlice(part), comm.FromSlice(buf), comm.Avg)
	if err != nil {
		e.track(-int64(len(buf)+len(part)) * 4)
		return err
	}
	op := &rsOp{done: make(chan struct{})}
	st.mu.Lock()
	st.pending = append(st.pending, op)
	st.mu.Unlock()
	dst := e.gradShard[st.off[i] : st.off[i]+s]
	go func() {
		defer close(op.done)
		if op.err = w.Wait(context.Background()); op.err == nil {
			for j, v := range part {
				dst[j] += v
			}
		}
		e.track(-int64(len(buf)+len(part)) * 4)
	}()
	return nil
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
			s.w.Wait(context.Background())
		}
	}
	st.Release(left)
	return first
}

var _ models.ParamStore = (*stage3)(nil)
