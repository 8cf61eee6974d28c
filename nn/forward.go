package nn

import (
	"fmt"
	"reflect"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Forward-only evaluation.
//
// An evaluation graph is built without gradients (no gorgonia.Grad, no
// hooks), and it does not run on gorgonia's tape machine either: the
// machine keeps every node's value, and each of nn's ops keeps its output
// buffer from run to run (outBuf), so a forward pass held all of its
// activations at once (gpt-large: about 36 MB a window, 2.3 GB of
// resident memory at batch 64). forward runs the same ops in the same
// order (gorgonia's stable topological sort) with the same inputs, so its
// values are the tape machine's bit for bit, but it lends each op's output
// buffer from a pool and takes it back as soon as the last op that reads
// it has run: the peak is then a few layers' activations (gpt-large at
// batch 64: about 0.2 GB).

// forward is an evaluation graph's executor.
type forward struct {
	nodes []*G.Node // the output's ancestors, inputs first
	args  [][]int   // each node's inputs (indices into nodes), in order
	uses  []int     // how many ops read each node (+1 for the output)
	out   int       // the output's index
	pool  *fwdPool

	// per run
	vals  []G.Value
	store []*storage // the memory each live value lives in
	left  []int      // reads left of each value
}

// storage is a pooled buffer and how many live values view it (an op may
// return a view of its input: a reshape, an identity).
type storage struct {
	buf  []float32
	live int
}

// newForward plans the forward pass that computes out, and hands every
// op's output buffers (outBuf) to one pool.
func newForward(g *G.ExprGraph, out *G.Node) (*forward, error) {
	sorted, err := G.Sort(g)
	if err != nil {
		return nil, fmt.Errorf("nn: ordering the evaluation graph: %w", err)
	}
	// Sort puts the roots first: turn it round, inputs first, as the tape
	// machine runs it, and keep the output's ancestors.
	need := map[int64]bool{out.ID(): true}
	var keep []*G.Node
	for i := 0; i < len(sorted); i++ {
		n := sorted[i]
		if !need[n.ID()] {
			continue
		}
		keep = append(keep, n)
		for it := g.From(n.ID()); it.Next(); {
			need[it.Node().ID()] = true
		}
	}
	f := &forward{pool: &fwdPool{free: map[int][][]float32{}}}
	idx := map[int64]int{}
	for i := len(keep) - 1; i >= 0; i-- {
		n := keep[i]
		idx[n.ID()] = len(f.nodes)
		f.nodes = append(f.nodes, n)
	}
	f.args = make([][]int, len(f.nodes))
	f.uses = make([]int, len(f.nodes))
	for i, n := range f.nodes {
		if n.Op() == nil {
			continue
		}
		for it := g.From(n.ID()); it.Next(); {
			j, ok := idx[it.Node().ID()]
			if !ok || j >= i {
				return nil, fmt.Errorf("nn: evaluation graph: %v reads %v, not computed before it", n, it.Node())
			}
			f.args[i] = append(f.args[i], j)
			f.uses[j]++
		}
		setPool(n.Op(), f.pool)
	}
	f.out = idx[out.ID()]
	f.uses[f.out]++
	f.vals = make([]G.Value, len(f.nodes))
	f.store = make([]*storage, len(f.nodes))
	f.left = make([]int, len(f.nodes))
	return f, nil
}

// outBufType is the type of the ops' output buffers, which setPool finds.
var outBufType = reflect.TypeOf(outBuf{})

// setPool makes op's output buffers (its outBuf fields) lend from p. An op
// of this package keeps its outputs in outBuf fields; other ops (gorgonia's
// own, a user's) allocate theirs, and the garbage collector frees them.
func setPool(op G.Op, p *fwdPool) {
	v := reflect.ValueOf(op)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	s := v.Elem()
	for i := 0; i < s.NumField(); i++ {
		if f := s.Field(i); f.Type() == outBufType {
			(*outBuf)(unsafe.Pointer(f.UnsafeAddr())).pool = p
		}
	}
}

// run computes the output and returns it; it stays valid until the next
// run. Every other value's buffer is back in the pool when run returns.
func (f *forward) run() (G.Value, error) {
	copy(f.left, f.uses)
	defer func() {
		// After a failure, the values still live go back too.
		for i := range f.vals {
			if i != f.out {
				f.drop(i)
			}
		}
	}()
	if f.vals[f.out] != nil {
		f.drop(f.out) // the last run's output
	}
	var in []G.Value
	for i, n := range f.nodes {
		op := n.Op()
		if op == nil {
			f.vals[i] = n.Value()
			if f.vals[i] == nil {
				return nil, fmt.Errorf("nn: evaluation graph: input %v has no value", n)
			}
			continue
		}
		in = in[:0]
		for _, j := range f.args[i] {
			in = append(in, f.vals[j])
		}
		v, err := op.Do(in...)
		if err != nil {
			return nil, fmt.Errorf("nn: evaluating %v: %w", n, err)
		}
		f.vals[i] = v
		f.store[i] = f.storageOf(v, i)
		if f.store[i] != nil {
			f.store[i].live++
		}
		for _, j := range f.args[i] {
			f.release(j)
		}
		if f.left[i] == 0 {
			f.drop(i)
		}
	}
	return f.vals[f.out], nil
}

// storageOf finds the pooled memory value v of node i lives in: an
// input's (v views it) or a buffer the op took from the pool; nil for
// memory the pool does not own.
func (f *forward) storageOf(v G.Value, i int) *storage {
	d := floats(v)
	if len(d) == 0 {
		return nil
	}
	for _, j := range f.args[i] {
		if s := f.store[j]; s != nil && overlapsAny(d, [][]float32{s.buf}) {
			return s
		}
	}
	if b, ok := f.pool.take(d); ok {
		return &storage{buf: b}
	}
	return nil
}

// release counts one read of node j done.
func (f *forward) release(j int) {
	f.left[j]--
	if f.left[j] == 0 {
		f.drop(j)
	}
}

// drop forgets node i's value; its buffer goes back to the pool once no
// live value views it.
func (f *forward) drop(i int) {
	s := f.store[i]
	f.vals[i], f.store[i] = nil, nil
	if s == nil {
		return
	}
	s.live--
	if s.live == 0 {
		f.pool.put(s.buf)
	}
}

// floats is v's float32 data (nil for other values).
func floats(v G.Value) []float32 {
	t, ok := v.(*tensor.Dense)
	if !ok || t.Dtype() != tensor.Float32 {
		return nil
	}
	d, _ := t.Data().([]float32)
	return d
}

// fwdPool lends float32 buffers by length. Buffers come back dirty: an op
// writes every value of its output (as with outBuf's reuse).
type fwdPool struct {
	made int // floats allocated in all (the pool's size)
	free map[int][][]float32
	lent map[*float32][]float32 // lent to an op, not yet claimed by forward
}

func (p *fwdPool) get(n int) []float32 {
	var b []float32
	if l := p.free[n]; len(l) > 0 {
		b, p.free[n] = l[len(l)-1], l[:len(l)-1]
	} else {
		b = make([]float32, n)
		p.made += n
	}
	if n > 0 {
		if p.lent == nil {
			p.lent = map[*float32][]float32{}
		}
		p.lent[&b[0]] = b
	}
	return b
}

// take claims d for forward if it is a buffer the pool lent (and not a
// view into one).
func (p *fwdPool) take(d []float32) ([]float32, bool) {
	b, ok := p.lent[&d[0]]
	if ok {
		delete(p.lent, &d[0])
	}
	return b, ok
}

func (p *fwdPool) put(b []float32) {
	if len(b) > 0 {
		delete(p.lent, &b[0])
	}
	p.free[len(b)] = append(p.free[len(b)], b)
}
