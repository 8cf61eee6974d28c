package nn

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/internal/vecmath"
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
	invstd []float32 // per row
}

type lnOp struct {
	baseOp
	dims, c int
	eps     float64
	st      *lnState
	out     outBuf
}

func (op *lnOp) Arity() int       { return 3 }
func (op *lnOp) Type() hm.Type    { return hm.NewFnType(tt(op.dims), tt(1), tt(1), tt(op.dims)) }
func (op *lnOp) ReturnsPtr() bool { return false }
func (op *lnOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

// sum32 is the sum of v in float32, over 8 running sums (vecmath.Sum32).
func sum32(v []float32) float32 { return vecmath.Sum32(v) }

// Do normalises each row in float32 (mean, then the mean squared
// deviation from it: two passes, as PyTorch's float32 layer norm is
// accurate to float32), keeping xhat and 1/std for the gradients.
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
	if cap(st.xhat) < len(x) {
		st.xhat = make([]float32, len(x))
	}
	st.xhat = st.xhat[:len(x)]
	if rows := len(x) / c; cap(st.invstd) < rows {
		st.invstd = make([]float32, rows)
	}
	st.invstd = st.invstd[:len(x)/c]
	t, y := op.out.get(shape, x, gamma, beta)
	invC := 1 / float32(c)
	for r := 0; r < len(x); r += c {
		row := x[r : r+c]
		mean := sum32(row) * invC
		inv := float32(1 / math.Sqrt(float64(vecmath.SqDev32(row, mean)*invC)+op.eps))
		st.invstd[r/c] = inv
		// xhat = (x - mean) inv, y = xhat gamma + beta
		vecmath.LayerNormRow(y[r:r+c], st.xhat[r:r+c], row, gamma, beta, mean, inv)
	}
	return t, nil
}

func (op *lnOp) DiffWRT(int) []bool { return []bool{true, true, true} }
func (op *lnOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	return normGrads(inputs, grad, func(g normGrad) G.Op { return &lnGradOp{normGrad: g, fwd: op} }, "layernorm'", op.dims)
}

// lnGradOp computes one of dx, dgamma, dbeta (normGrad) from the forward
// pass's state.
type lnGradOp struct {
	normGrad
	fwd *lnOp
	out outBuf
	g   []float32 // scratch: one row of dy * gamma
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
	if len(dy) != len(st.xhat) || len(gamma) != c {
		return nil, fmt.Errorf("nn: layer norm gradient of %d values for an input of %d", len(dy), len(st.xhat))
	}
	if op.which > 0 {
		t, out := op.out.get(tensor.Shape{c}, dy, gamma)
		clear(out)
		for r := 0; r < len(dy); r += c {
			if op.which == 1 {
				vecmath.AddMulTo(out, dy[r:r+c], st.xhat[r:r+c])
			} else {
				vecmath.AddTo(out, dy[r:r+c])
			}
		}
		return t, nil
	}
	t, dx := op.out.get(shape, dy, gamma)
	if len(op.g) != c {
		op.g = make([]float32, c)
	}
	g := op.g
	invC := 1 / float32(c)
	for r := 0; r < len(dy); r += c {
		// g = dy * gamma; dx = invstd * (g - mean(g) - xhat * mean(g * xhat))
		vecmath.LayerNormGradRow(dx[r:r+c], g, dy[r:r+c], gamma, st.xhat[r:r+c], st.invstd[r/c], invC)
	}
	return t, nil
}
