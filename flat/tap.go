package flat

import (
	"fmt"
	"hash"
	"hash/fnv"
	"sync/atomic"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Tap returns an identity node standing for the learnable w in the
// forward code. Its backward tells the strategy that w's gradient is
// complete (see the package doc), so reductions overlap the rest of
// backward. Use the returned node everywhere the forward code would use w;
// tap before gorgonia.Grad, once per learnable. The learnable is bound
// later (ddp.Wrap, zero.Wrap find its tap in the graph); a tap whose
// learnable is never bound fails the backward pass with an error naming
// it.
func Tap(w *G.Node) (*G.Node, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: Tap of a nil node", ErrInvalid)
	}
	if w.Op() != nil {
		return nil, fmt.Errorf("%w: Tap(%q): not a learnable (it is the result of %v)", ErrInvalid, w.Name(), w.Op())
	}
	if w.Deriv() != nil {
		return nil, fmt.Errorf("%w: Tap(%q): the graph is already differentiated; tap in the forward code, before gorgonia.Grad", ErrInvalid, w.Name())
	}
	if tapOf(w) != nil {
		return nil, fmt.Errorf("%w: Tap(%q): already tapped; use the node the first Tap returned", ErrInvalid, w.Name())
	}
	op := &tapOp{id: tapIDs.Add(1), name: w.Name(), cell: &tapCell{idx: -1}}
	return G.ApplyOp(op, w)
}

var tapIDs atomic.Int64

// Hook returns an identity node standing for the learnable w whose
// backward calls fn with w's complete gradient for this pass (the sum
// over every use of the returned node) right where gorgonia produces it.
// fn must not keep grad after it returns. Unlike Tap, it needs no dual
// values and no binding: it is how a graph builder that owns its
// learnables (package nn) routes their gradients.
func Hook(w *G.Node, fn func(grad []float32) error) (*G.Node, error) {
	if w == nil || fn == nil {
		return nil, fmt.Errorf("%w: Hook of a nil node or with a nil function", ErrInvalid)
	}
	return G.ApplyOp(&tapOp{id: tapIDs.Add(1), name: w.Name(), fn: fn}, w)
}

// tapCell routes a tap's backward to the Params that bound its learnable.
type tapCell struct {
	p   *Params
	idx int
}

// tapOf returns the cell of w's tap, or nil.
func tapOf(w *G.Node) *tapCell {
	g := w.Graph()
	if g == nil {
		return nil
	}
	for it := g.To(w.ID()); it.Next(); {
		if op, ok := it.Node().(*G.Node).Op().(*tapOp); ok {
			return op.cell
		}
	}
	return nil
}

// findTaps connects the taps of bound learnables to p.
func (p *Params) findTaps() error {
	p.taps = make([]*tapCell, len(p.nodes))
	for i, n := range p.nodes {
		if c := tapOf(n); c != nil {
			if c.p != nil && c.p != p {
				// A new binding of the same learnables takes the tap over.
				c.p.taps[c.idx] = nil
			}
			c.p, c.idx = p, i
			p.taps[i] = c
		}
	}
	return nil
}

// Tapped reports whether learnable i has a tap.
func (p *Params) Tapped(i int) bool { return p.taps != nil && p.taps[i] != nil }

// OnGrad sets the function taps call for learnable i (nil: none): with
// ready false just before gorgonia adds i's gradient into Grad, and with
// ready true once it is complete there. It runs on the goroutine running
// the graph.
func (p *Params) OnGrad(fn func(i int, ready bool)) { p.onGrad = fn }

// fire records that learnable i's gradient has been produced. gorgonia
// adds it into the dual value (Grad) right after the tap's backward op
// returns, so i is reported ready at the next tap or at Flush.
func (p *Params) fire(i int) {
	p.Flush()
	if p.onGrad != nil {
		p.onGrad(i, false)
	}
	p.last = i
}

// Flush reports the last tapped gradient of a backward pass as ready.
// Strategies call it when the pass has ended.
func (p *Params) Flush() {
	if p.last >= 0 && p.onGrad != nil {
		p.onGrad(p.last, true)
	}
	p.last = -1
}

// Verify checks, after a backward pass, what can only be seen then:
// every tapped learnable got its gradient only through its tap, and the
// tape machine binds dual values (otherwise gradients never reach Grad).
// It returns nil at once for Params that bind no gorgonia nodes.
func (p *Params) Verify() error {
	if p.nodes == nil {
		return nil
	}
	for i, n := range p.nodes {
		c := p.taps[i]
		d := n.Deriv()
		if c == nil || d == nil {
			continue
		}
		if op, ok := d.Op().(*tapGradOp); !ok || op.cell != c {
			return fmt.Errorf("%w: learnable %q gets gradients from outside its tap: use the node Tap returned everywhere in the forward code", ErrInvalid, p.Spans[i].Name)
		}
	}
	if p.dual || !p.HasGrad() {
		return nil
	}
	for i, n := range p.nodes {
		d := n.Deriv()
		if d == nil || d.Value() == nil {
			continue
		}
		dv, ok := d.Value().(*tensor.Dense)
		if !ok {
			continue
		}
		if !dv.IsNativelyAccessible() || allZero(dv.Data()) {
			continue
		}
		if allZero(p.viewOf(i, true)) {
			return fmt.Errorf("%w: learnable %q has a gradient but it never reached the gradient buffer: build the tape machine with gorgonia.BindDualValues(learnables...)", ErrInvalid, p.Spans[i].Name)
		}
		p.dual = true
		return nil
	}
	return nil
}

// allZero reports whether a float32 or float64 slice (or scalar) is all
// zeros (true for other types).
func allZero(data any) bool {
	switch s := data.(type) {
	case []float32:
		for _, v := range s {
			if v != 0 {
				return false
			}
		}
	case []float64:
		for _, v := range s {
			if v != 0 {
				return false
			}
		}
	case float32:
		return s == 0
	case float64:
		return s == 0
	}
	return true
}

// ---- the ops ----

type tapOp struct {
	id   int64
	name string
	cell *tapCell                   // Tap
	fn   func(grad []float32) error // Hook
}

func (op *tapOp) Arity() int { return 1 }
func (op *tapOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *tapOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *tapOp) ReturnsPtr() bool     { return true }
func (op *tapOp) CallsExtern() bool    { return false }
func (op *tapOp) OverwritesInput() int { return -1 }
func (op *tapOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "gdist.tap(%s)#%d", op.name, op.id)
}
func (op *tapOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
func (op *tapOp) String() string                   { return "tap(" + op.name + ")" }
func (op *tapOp) Do(v ...G.Value) (G.Value, error) { return v[0], nil }
func (op *tapOp) DiffWRT(int) []bool               { return []bool{true} }
func (op *tapOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	n, err := G.ApplyOp(&tapGradOp{tapOp{id: tapIDs.Add(1), name: op.name + "'", cell: op.cell, fn: op.fn}}, grad)
	return G.Nodes{n}, err
}

// tapGradOp passes the gradient through and reports it.
type tapGradOp struct{ tapOp }

func (op *tapGradOp) Do(v ...G.Value) (G.Value, error) {
	if op.fn != nil {
		t, ok := v[0].(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%w: gradient of %q is a %T, not a dense tensor", ErrInvalid, op.name, v[0])
		}
		g, ok := t.Data().([]float32)
		if !ok {
			return nil, fmt.Errorf("%w: gradient of %q is %v, not float32", ErrInvalid, op.name, t.Dtype())
		}
		return v[0], op.fn(g)
	}
	c := op.cell
	if c.p == nil {
		return nil, fmt.Errorf("%w: learnable %q was tapped but never bound: pass it to ddp.Wrap or zero.Wrap", ErrInvalid, op.name[:len(op.name)-1])
	}
	c.p.fire(c.idx)
	return v[0], nil
}
func (op *tapGradOp) DiffWRT(int) []bool { return []bool{false} }
func (op *tapGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("flat: the gradient of a tap's gradient is not defined")
}
