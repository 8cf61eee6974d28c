package models

import (
	"fmt"

	"github.com/gdist/gdist/flat"

	"github.com/chewxy/hm"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ParamStore is the parameter source of ZeRO stage 3 (flat.Store): with
// Model.Store set, NewGraph builds layers that fetch their parameters
// inside their forward and backward ops and hand their gradients to it.
type ParamStore = flat.Store

// LayerParams lists the parameter indices of each layer that has any, in
// forward order (for a store's prefetching).
func (m *Model) LayerParams() [][]int {
	var out [][]int
	i := 0
	for _, l := range m.layers {
		n := len(l.params())
		if n > 0 {
			idx := make([]int, n)
			for j := range idx {
				idx[j] = i + j
			}
			out = append(out, idx)
		}
		i += n
	}
	return out
}

// shardedOp is the part every store-backed layer op shares.
type shardedOp struct {
	baseOp
	store  ParamStore
	params []int
	noDX   bool // the input is the network's input: no dx needed
}

func (op *shardedOp) ReturnsPtr() bool { return false }

func (op *shardedOp) fetch(backward bool) ([][]float32, error) {
	vals, err := op.store.Fetch(op.params, backward)
	if err != nil {
		return nil, fmt.Errorf("models: fetching parameters of %s: %w", op.name, err)
	}
	return vals, nil
}

func (op *shardedOp) grads(gs ...[]float32) error {
	for k, g := range gs {
		if err := op.store.AddGrad(op.params[k], g); err != nil {
			return fmt.Errorf("models: gradient of %s: %w", op.name, err)
		}
	}
	return nil
}

// ---- linear: y = x W + b, W [in, out] ----

type shardLinearOp struct {
	shardedOp
	in, out int
}

func (op *shardLinearOp) Arity() int    { return 1 }
func (op *shardLinearOp) Type() hm.Type { return hm.NewFnType(tt(2), tt(2)) }
func (op *shardLinearOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	s := ds[0].(tensor.Shape)
	return tensor.Shape{s[0], op.out}, nil
}

func (op *shardLinearOp) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	vals, err := op.fetch(false)
	if err != nil {
		return nil, err
	}
	defer op.store.Release(op.params)
	w, b := vals[0], vals[1]
	n := xs[0]
	y := make([]float32, n*op.out)
	for i := 0; i < n; i++ {
		copy(y[i*op.out:(i+1)*op.out], b)
	}
	blas32.Implementation().Sgemm(blas.NoTrans, blas.NoTrans, n, op.out, op.in, 1, x, op.in, w, op.out, 1, y, op.out)
	return tensor.New(tensor.WithShape(n, op.out), tensor.WithBacking(y)), nil
}

func (op *shardLinearOp) DiffWRT(int) []bool { return []bool{true} }
func (op *shardLinearOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&shardLinearGradOp{baseOp{nextID(), op.name + "'"}, op}, inputs[0], grad)
	return G.Nodes{d}, err
}

type shardLinearGradOp struct {
	baseOp
	fwd *shardLinearOp
}

func (op *shardLinearGradOp) Arity() int    { return 2 }
func (op *shardLinearGradOp) Type() hm.Type { return hm.NewFnType(tt(2), tt(2), tt(2)) }
func (op *shardLinearGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *shardLinearGradOp) ReturnsPtr() bool { return false }

func (op *shardLinearGradOp) Do(v ...G.Value) (G.Value, error) {
	f := op.fwd
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	dy, _, err := f32n(v[1])
	if err != nil {
		return nil, err
	}
	n := xs[0]
	impl := blas32.Implementation()
	dw := make([]float32, f.in*f.out)
	impl.Sgemm(blas.Trans, blas.NoTrans, f.in, f.out, n, 1, x, f.in, dy, f.out, 0, dw, f.out)
	db := make([]float32, f.out)
	for i := 0; i < n; i++ {
		AddTo(db, dy[i*f.out:(i+1)*f.out])
	}
	dx := make([]float32, n*f.in)
	if !f.noDX {
		vals, err := f.fetch(true)
		if err != nil {
			return nil, err
		}
		impl.Sgemm(blas.NoTrans, blas.Trans, n, f.in, f.out, 1, dy, f.out, vals[0], f.out, 0, dx, f.in)
		f.store.Release(f.params)
	}
	if err := f.grads(dw, db); err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(xs.Clone()...), tensor.WithBacking(dx)), nil
}

// ---- conv2d + bias, NCHW, stride 1 ----

type shardConvOp struct {
	shardedOp
	k, pad, cout int
	sc           *convScratch
}

func (op *shardConvOp) Arity() int    { return 1 }
func (op *shardConvOp) Type() hm.Type { return hm.NewFnType(tt(4), tt(4)) }
func (op *shardConvOp) geom(xs tensor.Shape) (convGeom, error) {
	if len(xs) != 4 {
		return convGeom{}, fmt.Errorf("models: %s wants 4-d input, got %v", op.name, xs)
	}
	return newConvGeom(xs, tensor.Shape{op.cout, xs[1], op.k, op.k}, op.k, op.pad)
}
func (op *shardConvOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	g, err := op.geom(ds[0].(tensor.Shape))
	if err != nil {
		return nil, err
	}
	return g.outShape(), nil
}

func (op *shardConvOp) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	g, err := op.geom(xs)
	if err != nil {
		return nil, err
	}
	vals, err := op.fetch(false)
	if err != nil {
		return nil, err
	}
	defer op.store.Release(op.params)
	y := make([]float32, g.n*g.cout*g.howo())
	conv2dForward(g, x, vals[0], y, op.sc)
	b := vals[1]
	howo := g.howo()
	for i := 0; i < len(y); i += howo {
		bc := b[(i/howo)%g.cout]
		for j := range y[i : i+howo] {
			y[i+j] += bc
		}
	}
	return tensor.New(tensor.WithShape(g.outShape()...), tensor.WithBacking(y)), nil
}

func (op *shardConvOp) DiffWRT(int) []bool { return []bool{true} }
func (op *shardConvOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&shardConvGradOp{baseOp{nextID(), op.name + "'"}, op}, inputs[0], grad)
	return G.Nodes{d}, err
}

type shardConvGradOp struct {
	baseOp
	fwd *shardConvOp
}

func (op *shardConvGradOp) Arity() int       { return 2 }
func (op *shardConvGradOp) Type() hm.Type    { return hm.NewFnType(tt(4), tt(4), tt(4)) }
func (op *shardConvGradOp) ReturnsPtr() bool { return false }
func (op *shardConvGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

func (op *shardConvGradOp) Do(v ...G.Value) (G.Value, error) {
	f := op.fwd
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	dy, _, err := f32n(v[1])
	if err != nil {
		return nil, err
	}
	g, err := f.geom(xs)
	if err != nil {
		return nil, err
	}
	dw := make([]float32, g.cout*g.ckk())
	conv2dBackwardW(g, x, dy, dw, f.sc)
	db := make([]float32, g.cout)
	howo := g.howo()
	for i := 0; i < len(dy); i += howo {
		var s float32
		for _, d := range dy[i : i+howo] {
			s += d
		}
		db[(i/howo)%g.cout] += s
	}
	dx := make([]float32, len(x))
	if !f.noDX {
		vals, err := f.fetch(true)
		if err != nil {
			return nil, err
		}
		conv2dBackwardX(g, vals[0], dy, dx, f.sc)
		f.store.Release(f.params)
	}
	if err := f.grads(dw, db); err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(xs.Clone()...), tensor.WithBacking(dx)), nil
}

// ---- batch norm with store-held scale and shift ----

type shardBNOp struct {
	shardedOp
	dims  int
	l     *BNLayer
	train bool
	st    *BNState
}

func (op *shardBNOp) Arity() int    { return 1 }
func (op *shardBNOp) Type() hm.Type { return hm.NewFnType(tt(op.dims), tt(op.dims)) }
func (op *shardBNOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

func (op *shardBNOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	vals, err := op.fetch(false)
	if err != nil {
		return nil, err
	}
	defer op.store.Release(op.params)
	out, err := op.l.Forward(x, shape[0], inner(shape), vals[0], vals[1], op.train, op.st)
	if err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(out)), nil
}

func (op *shardBNOp) DiffWRT(int) []bool { return []bool{true} }
func (op *shardBNOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&shardBNGradOp{baseOp{nextID(), op.name + "'"}, op}, grad)
	return G.Nodes{d}, err
}

type shardBNGradOp struct {
	baseOp
	fwd *shardBNOp
}

func (op *shardBNGradOp) Arity() int       { return 1 }
func (op *shardBNGradOp) Type() hm.Type    { return hm.NewFnType(tt(op.fwd.dims), tt(op.fwd.dims)) }
func (op *shardBNGradOp) ReturnsPtr() bool { return false }
func (op *shardBNGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

func (op *shardBNGradOp) Do(v ...G.Value) (G.Value, error) {
	f := op.fwd
	dy, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	vals, err := f.fetch(true)
	if err != nil {
		return nil, err
	}
	dx, dg, db, err := f.l.Backward(dy, inner(shape), vals[0], f.st)
	f.store.Release(f.params)
	if err != nil {
		return nil, err
	}
	if err := f.grads(dg, db); err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(dx)), nil
}
