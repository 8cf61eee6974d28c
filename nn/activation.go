package nn

import (
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// GELU is x * Phi(x), Phi the standard normal CDF (PyTorch's nn.GELU with
// its default, exact form).
type GELU struct{}

func (GELU) Params() []Param { return nil }
func (GELU) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	st := &geluState{}
	// Forward keeps Phi(x), so backward needs no second erf.
	f := func(x float64) float64 {
		return x * st.phi(x)
	}
	df := func(x float64) float64 {
		return st.next() + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
	}
	return G.ApplyOp(&unaryOp{baseOp: baseOp{nextID(), "gelu"}, f: f, df: df, reset: st.reset}, x)
}

// geluState is Phi(x) of each element of the last forward pass, in order,
// read back in the same order by the gradient.
type geluState struct {
	cdf  []float64
	read int
}

func (s *geluState) phi(x float64) float64 {
	v := 0.5 * (1 + math.Erf(x/math.Sqrt2))
	s.cdf = append(s.cdf, v)
	return v
}

func (s *geluState) next() float64 {
	v := s.cdf[s.read]
	s.read++
	return v
}

// reset starts a pass: forward (back false) refills, backward rereads.
func (s *geluState) reset(back bool) {
	if back {
		s.read = 0
	} else {
		s.cdf = s.cdf[:0]
	}
}

// unaryOp is y = f(x) elementwise; its gradient is dy * df(x). Both are
// computed in float64.
type unaryOp struct {
	baseOp
	f, df func(float64) float64
	reset func(back bool) // optional: called before each pass over the elements
	back  bool            // the gradient op: inputs (x, dy)
	out   outBuf
}

func (op *unaryOp) Arity() int {
	if op.back {
		return 2
	}
	return 1
}
func (op *unaryOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	if op.back {
		return hm.NewFnType(a, a, a)
	}
	return hm.NewFnType(a, a)
}
func (op *unaryOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *unaryOp) ReturnsPtr() bool { return false }
func (op *unaryOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	if op.reset != nil {
		op.reset(op.back)
	}
	if !op.back {
		t, y := op.out.get(shape, x)
		for i, xv := range x {
			y[i] = float32(op.f(float64(xv)))
		}
		return t, nil
	}
	dy, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	t, dx := op.out.get(shape, x, dy)
	for i, xv := range x {
		dx[i] = float32(float64(dy[i]) * op.df(float64(xv)))
	}
	return t, nil
}
func (op *unaryOp) DiffWRT(int) []bool { return []bool{!op.back, false} }
func (op *unaryOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&unaryOp{baseOp: baseOp{nextID(), op.name + "'"}, f: op.f, df: op.df, reset: op.reset, back: true}, inputs[0], grad)
	return G.Nodes{d}, err
}
