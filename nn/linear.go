package nn

import (
	"fmt"

	"github.com/chewxy/hm"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// matMulOp is y = x W for x (N, in) and W (in, out). Unlike gorgonia's
// Mul it can skip the input's gradient (noDX: the input is the data),
// which gorgonia would otherwise compute and throw away, and which would
// make ZeRO-3 gather the first layer's weights again for nothing.
type matMulOp struct {
	baseOp
	noDX bool
	out  outBuf
}

func newMatMul(noDX bool) *matMulOp {
	return &matMulOp{baseOp: baseOp{nextID(), "matmul"}, noDX: noDX}
}

func (op *matMulOp) Arity() int       { return 2 }
func (op *matMulOp) Type() hm.Type    { return hm.NewFnType(tt(2), tt(2), tt(2)) }
func (op *matMulOp) ReturnsPtr() bool { return false }
func (op *matMulOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	x, w := ds[0].(tensor.Shape), ds[1].(tensor.Shape)
	if len(x) != 2 || len(w) != 2 || x[1] != w[0] {
		return nil, fmt.Errorf("nn: matmul of %v and %v", x, w)
	}
	return tensor.Shape{x[0], w[1]}, nil
}

// sgemm sets c = op(a) op(b) for row-major a, b, c (m x n result, k inner).
func sgemm(ta, tb bool, m, n, k int, a, b, c []float32) {
	t := func(tr bool) blas.Transpose {
		if tr {
			return blas.Trans
		}
		return blas.NoTrans
	}
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	blas32.Implementation().Sgemm(t(ta), t(tb), m, n, k, 1, a, lda, b, ldb, 0, c, n)
}

func (op *matMulOp) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	w, ws, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	if len(x) != xs.TotalSize() || len(w) != ws.TotalSize() {
		return nil, fmt.Errorf("nn: %s: values of %d and %d floats for shapes %v and %v (parameters not fetched?)", op.name, len(x), len(w), xs, ws)
	}
	t, y := op.out.get(tensor.Shape{xs[0], ws[1]}, x, w)
	sgemm(false, false, xs[0], ws[1], xs[1], x, w, y)
	return t, nil
}

func (op *matMulOp) DiffWRT(int) []bool { return []bool{!op.noDX, true} }
func (op *matMulOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	var dx *G.Node
	if !op.noDX {
		var err error
		if dx, err = G.ApplyOp(&matMulGradOp{baseOp: baseOp{nextID(), "matmul'x"}}, grad, inputs[1]); err != nil {
			return nil, err
		}
	}
	dw, err := G.ApplyOp(&matMulGradOp{baseOp: baseOp{nextID(), "matmul'w"}, wrtW: true}, inputs[0], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, dw}, nil
}

// matMulGradOp is dx = dy W^T from (dy, W), or with wrtW dW = x^T dy
// from (x, dy).
type matMulGradOp struct {
	baseOp
	wrtW bool
	out  outBuf
}

func (op *matMulGradOp) Arity() int       { return 2 }
func (op *matMulGradOp) Type() hm.Type    { return hm.NewFnType(tt(2), tt(2), tt(2)) }
func (op *matMulGradOp) ReturnsPtr() bool { return false }
func (op *matMulGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	a, b := ds[0].(tensor.Shape), ds[1].(tensor.Shape)
	if op.wrtW { // x (N, in), dy (N, out) -> (in, out)
		return tensor.Shape{a[1], b[1]}, nil
	}
	return tensor.Shape{a[0], b[0]}, nil // dy (N, out), W (in, out) -> (N, in)
}

func (op *matMulGradOp) Do(v ...G.Value) (G.Value, error) {
	a, as, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	b, bs, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	if len(a) != as.TotalSize() || len(b) != bs.TotalSize() {
		return nil, fmt.Errorf("nn: %s: values of %d and %d floats for shapes %v and %v (parameters not fetched?)", op.name, len(a), len(b), as, bs)
	}
	if op.wrtW {
		t, dw := op.out.get(tensor.Shape{as[1], bs[1]}, a, b)
		sgemm(true, false, as[1], bs[1], as[0], a, b, dw)
		return t, nil
	}
	t, dx := op.out.get(tensor.Shape{as[0], bs[0]}, a, b)
	sgemm(false, true, as[0], bs[0], as[1], a, b, dx)
	return t, nil
}
