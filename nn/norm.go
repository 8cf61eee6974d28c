package nn

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// LayerNorm normalises over the last axis (of size C), then scales by
// "weight" and shifts by "bias" (PyTorch's nn.LayerNorm(C), eps 1e-5).
type LayerNorm struct {
	C   int
	Eps float64 // 0: 1e-5
}

func (l *LayerNorm) Params() []Param {
	return []Param{{Name: "weight", Shape: []int{l.C}, Init: Fill(1)}, {Name: "bias", Shape: []int{l.C}, Init: Fill(0)}}
}

func (l *LayerNorm) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	s := x.Shape()
	if len(s) < 1 || s[len(s)-1] != l.C {
		return nil, fmt.Errorf("layer norm over %d: input shape %v", l.C, s)
	}
	eps := l.Eps
	if eps == 0 {
		eps = 1e-5
	}
	op := &lnOp{baseOp: baseOp{nextID(), "layernorm"}, dims: x.Dims(), c: l.C, eps: eps, st: &lnState{}}
	return G.ApplyOp(op, x, b.Param(0), b.Param(1))
}

// lnState is what layer norm's forward leaves for its gradients.
type lnState struct {
	xhat   []float32
	invstd []float64 // per row
}

type lnOp struct {
	baseOp
	dims, c int
	eps     float64
	st      *lnState
}

func (op *lnOp) Arity() int       { return 3 }
func (op *lnOp) Type() hm.Type    { return hm.NewFnType(tt(op.dims), tt(1), tt(1), tt(op.dims)) }
func (op *lnOp) ReturnsPtr() bool { return false }
func (op *lnOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

func (op *lnOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	gamma, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	beta, _, err := f32(v[2])
	if err != nil {
		return nil, err
	}
	c := op.c
	if len(gamma) != c || len(beta) != c || len(x)%c != 0 {
		return nil, fmt.Errorf("nn: layer norm over %d: input of %d values, scale %d, shift %d", c, len(x), len(gamma), len(beta))
	}
	st := op.st
	st.xhat = make([]float32, len(x))
	st.invstd = make([]float64, len(x)/c)
	y := make([]float32, len(x))
	for r := 0; r < len(x); r += c {
		row := x[r : r+c]
		var mean float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(c)
		var vr float64
		for _, v := range row {
			d := float64(v) - mean
			vr += d * d
		}
		inv := 1 / math.Sqrt(vr/float64(c)+op.eps)
		st.invstd[r/c] = inv
		for j, v := range row {
			xh := (float64(v) - mean) * inv
			st.xhat[r+j] = float32(xh)
			y[r+j] = float32(xh*float64(gamma[j]) + float64(beta[j]))
		}
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(y)), nil
}

func (op *lnOp) DiffWRT(int) []bool { return []bool{true, true, true} }
func (op *lnOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	return normGrads(inputs, grad, func(g normGrad) G.Op { return &lnGradOp{g, op} }, "layernorm'", op.dims)
}

// lnGradOp computes one of dx, dgamma, dbeta (normGrad) from the forward
// pass's state.
type lnGradOp struct {
	normGrad
	fwd *lnOp
}

func (op *lnGradOp) Do(v ...G.Value) (G.Value, error) {
	gamma, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	dy, shape, err := f32(v[2])
	if err != nil {
		return nil, err
	}
	st, c := op.fwd.st, op.fwd.c
	if len(dy) != len(st.xhat) {
		return nil, fmt.Errorf("nn: layer norm gradient of %d values for an input of %d", len(dy), len(st.xhat))
	}
	if op.which > 0 {
		out := make([]float32, c)
		for r := 0; r < len(dy); r += c {
			for j := 0; j < c; j++ {
				if op.which == 1 {
					out[j] += dy[r+j] * st.xhat[r+j]
				} else {
					out[j] += dy[r+j]
				}
			}
		}
		return tensor.New(tensor.WithShape(c), tensor.WithBacking(out)), nil
	}
	dx := make([]float32, len(dy))
	for r := 0; r < len(dy); r += c {
		// dxhat = dy * gamma; dx = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
		var m1, m2 float64
		for j := 0; j < c; j++ {
			g := float64(dy[r+j]) * float64(gamma[j])
			m1 += g
			m2 += g * float64(st.xhat[r+j])
		}
		m1 /= float64(c)
		m2 /= float64(c)
		inv := st.invstd[r/c]
		for j := 0; j < c; j++ {
			g := float64(dy[r+j]) * float64(gamma[j])
			dx[r+j] = float32(inv * (g - m1 - float64(st.xhat[r+j])*m2))
		}
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(dx)), nil
}
