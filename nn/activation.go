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
	return G.ApplyOp(&unaryOp{baseOp: baseOp{nextID(), "gelu"}, f: gelu, df: geluGrad}, x)
}

func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func geluGrad(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

// unaryOp is y = f(x) elementwise; its gradient is dy * df(x). Both are
// computed in float64.
type unaryOp struct {
	baseOp
	f, df func(float64) float64
	back  bool // the gradient op: inputs (x, dy)
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
	d, err := G.ApplyOp(&unaryOp{baseOp: baseOp{nextID(), op.name + "'"}, f: op.f, df: op.df, back: true}, inputs[0], grad)
	return G.Nodes{d}, err
}
