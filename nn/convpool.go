package nn

import (
	"fmt"

	"github.com/chewxy/hm"
	"gonum.org/v1/gonum/blas"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Conv2d, ReLU, MaxPool2d in a row (a Sequential builds them as one op):
// convolution, bias, ReLU and 2x2 max pooling image by image, so that
// each image's convolution output is pooled while it is in cache, and in
// backward the pooling's gradient, the bias's and the filter's are made
// image by image too. The values and gradients are bit for bit those of
// conv2dOp (with bias) followed by poolReLUOp: the same kernels, in the
// same order.
//
// The forward op keeps, for each pooled output, which input of its window
// it came from (a byte; the convolution's output itself stays in cache,
// one image at a time), for the backward ops, and the filter-gradient op leaves the gradient w.r.t. that
// output and the bias gradient for the other two, which take the filter
// gradient as an input only to run after it. Where the convolution runs
// as Winograd with an input gradient, the filter-gradient op makes the
// input gradient too (winogradBackward: both a chunk of images at a
// time, each chunk's output gradient pooled back while in cache and
// read there by both) and leaves it for the input-gradient op; the
// batch's output gradient is never made. Like the other ops here, an
// instance must not run concurrently with itself or its gradient ops.

// convPoolState is what the fused ops share.
type convPoolState struct {
	g     convGeom
	y     []float32 // one image's conv + bias, (Cout, Ho, Wo)
	arg   []uint8   // which input each output is (poolReLUArg), for all images
	dconv []float32 // the gradient w.r.t. conv + bias, (N, Cout, Ho, Wo); one image's without dx or with Winograd
	db    []float32 // the bias gradient
	// With Winograd and an input gradient, the filter-gradient op makes
	// the input gradient too (winogradBackward), into dx, and sets dxSet.
	dx    []float32
	dxSet bool
}

type convPoolOp struct {
	baseOp
	conv *conv2dOp // k, pad, noDX and the im2col scratch
	st   *convPoolState
	out  outBuf
}

func newConvPool(k, pad int, noDX bool) *convPoolOp {
	c := newConv2d(k, pad)
	c.noDX, c.bias = noDX, true
	return &convPoolOp{baseOp: baseOp{nextID(), fmt.Sprintf("conv%dx%dp%d+relu+maxpool2x2", k, k, pad)}, conv: c, st: &convPoolState{}}
}

func (op *convPoolOp) Arity() int { return 3 }
func (op *convPoolOp) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(4), tt(1), tt(4))
}
func (op *convPoolOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	s, err := op.conv.InferShape(ds...)
	if err != nil {
		return nil, err
	}
	return poolShape(s)
}
func (op *convPoolOp) ReturnsPtr() bool { return false }

func (op *convPoolOp) Do(v ...G.Value) (G.Value, error) {
	if err := convGemmCheck(); err != nil {
		return nil, err
	}
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	w, ws, err := f32n(v[1])
	if err != nil {
		return nil, err
	}
	b, bs, err := f32n(v[2])
	if err != nil {
		return nil, err
	}
	g, err := newConvGeom(xs, ws, op.conv.k, op.conv.pad)
	if err != nil {
		return nil, err
	}
	if len(bs) != 1 || bs[0] != g.cout {
		return nil, fmt.Errorf("nn: conv2d with %d output channels: bias of shape %v", g.cout, bs)
	}
	ps, err := poolShape(g.outShape())
	if err != nil {
		return nil, err
	}
	st := op.st
	st.g = g
	st.y = grow(st.y, g.cout*g.howo())
	if cap(st.arg) < ps.TotalSize() {
		st.arg = make([]uint8, ps.TotalSize())
	}
	st.arg = st.arg[:ps.TotalSize()]
	t, out := op.out.get(ps, x, w, b)
	impl := convBLAS()
	ckk, hw, howo := g.ckk(), g.cin*g.hw(), g.howo()
	pn := ps.TotalSize() / g.n
	if m := op.conv.sc.winograd(g); m != 0 {
		// Winograd a chunk of images at a time (the chunks of
		// conv2dForward's, hence its values), each pooled while in cache.
		sc := &op.conv.sc.wg
		sc.forwardFilters(m, g, w)
		nb := winogradChunk(m, g.h, g.w, g.n, g.cin, g.cout)
		per := g.cout * howo
		st.y = grow(st.y, nb*per)
		for s0 := 0; s0 < g.n; s0 += nb {
			s1 := min(s0+nb, g.n)
			sc.run(m, s1-s0, g.h, g.w, g.cin, g.cout, x[s0*hw:s1*hw], sc.u, b, st.y[:(s1-s0)*per])
			for n := s0; n < s1; n++ {
				poolReLUArg(st.y[(n-s0)*per:(n-s0+1)*per], g.cout, g.ho, g.wo, out[n*pn:(n+1)*pn], st.arg[n*pn:(n+1)*pn])
			}
		}
		return t, nil
	}
	for n := 0; n < g.n; n++ {
		xn := x[n*hw : (n+1)*hw]
		col := xn
		if !g.direct() {
			col = op.conv.sc.get(ckk * howo)
			op.conv.sc.im2col(g, xn, col)
		}
		yn := st.y // stays in cache: only the pooled output and arg are kept
		impl.Sgemm(blas.NoTrans, blas.NoTrans, g.cout, howo, ckk, 1, w, ckk, col, howo, 0, yn, howo)
		for c, bc := range b[:g.cout] {
			addScalar(yn[c*howo:(c+1)*howo], bc)
		}
		poolReLUArg(yn, g.cout, g.ho, g.wo, out[n*pn:(n+1)*pn], st.arg[n*pn:(n+1)*pn])
	}
	return t, nil
}

// grow returns s with length n, reallocated if too short.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (op *convPoolOp) DiffWRT(int) []bool { return []bool{!op.conv.noDX, true, true} }
func (op *convPoolOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if len(inputs) != 3 {
		return nil, fmt.Errorf("nn: %s has 3 inputs, got %d", op.name, len(inputs))
	}
	// With an input gradient the filter-gradient op also reads the
	// filters (for Winograd's, made with the filter gradient).
	gw := &convPoolGradW{baseOp: baseOp{nextID(), op.name + "'w"}, fwd: op, ws: inputs[1].Shape().Clone()}
	in := G.Nodes{inputs[0], output, grad}
	if !op.conv.noDX {
		in = append(in, inputs[1])
	}
	dw, err := G.ApplyOp(gw, in...)
	if err != nil {
		return nil, err
	}
	db, err := G.ApplyOp(&convPoolGradB{baseOp: baseOp{nextID(), op.name + "'b"}, fwd: op}, dw)
	if err != nil {
		return nil, err
	}
	var dx *G.Node
	if !op.conv.noDX {
		if dx, err = G.ApplyOp(&convPoolGradX{baseOp: baseOp{nextID(), op.name + "'x"}, fwd: op, xs: inputs[0].Shape().Clone()}, inputs[1], dw); err != nil {
			return nil, err
		}
	}
	return G.Nodes{dx, dw, db}, nil
}

// convPoolGradW: (x, y, dy[, w]) -> dw, y and dy being the fused op's
// output and its gradient, w the filters (given where the forward op has
// an input gradient). It leaves the bias gradient in the shared state,
// and either the gradient w.r.t. the convolution's output or (Winograd)
// the input gradient.
type convPoolGradW struct {
	baseOp
	fwd *convPoolOp
	ws  tensor.Shape
	out outBuf
}

func (op *convPoolGradW) Arity() int {
	if op.fwd.conv.noDX {
		return 3
	}
	return 4
}
func (op *convPoolGradW) Type() hm.Type {
	if op.fwd.conv.noDX {
		return hm.NewFnType(tt(4), tt(4), tt(4), tt(4))
	}
	return hm.NewFnType(tt(4), tt(4), tt(4), tt(4), tt(4))
}
func (op *convPoolGradW) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return op.ws.Clone(), nil
}
func (op *convPoolGradW) ReturnsPtr() bool { return false }

func (op *convPoolGradW) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	p, _, err := f32n(v[1])
	if err != nil {
		return nil, err
	}
	dp, _, err := f32n(v[2])
	if err != nil {
		return nil, err
	}
	st := op.fwd.st
	g := st.g
	ps, err := poolShape(g.outShape())
	if err != nil {
		return nil, err
	}
	if len(st.arg) != ps.TotalSize() || !xs.Eq(tensor.Shape{g.n, g.cin, g.h, g.w}) || len(p) != ps.TotalSize() || len(dp) != len(p) {
		return nil, fmt.Errorf("nn: %s: no forward pass recorded for input %v", op.name, xs)
	}
	per := g.cout * g.howo()
	st.db = grow(st.db, g.cout)
	clear(st.db)
	st.dxSet = false
	t, dw := op.out.get(op.ws, x, p, dp)
	impl := convBLAS()
	ckk, hw, howo := g.ckk(), g.cin*g.hw(), g.howo()
	pn := len(p) / g.n
	// poolGrad sets dn to image n's gradient w.r.t. the convolution's
	// output and adds its channel sums to the bias gradient.
	poolGrad := func(n int, dn []float32) {
		poolReLUArgGrad(st.arg[n*pn:(n+1)*pn], dp[n*pn:(n+1)*pn], g.cout, g.ho, g.wo, dn)
		for c := range st.db {
			st.db[c] += sum32(dn[c*howo : (c+1)*howo])
		}
	}
	// With Winograd (which needs an input gradient to win: the first
	// layer has one input channel), the filter and input gradients are
	// made together, a chunk of images at a time, from the output
	// gradient made a chunk at a time: it stays in cache.
	if wm := op.fwd.conv.sc.winograd(g); wm != 0 && !op.fwd.conv.noDX {
		st.dx = grow(st.dx, g.n*hw)
		if len(v) != 4 {
			return nil, fmt.Errorf("nn: %s: no filters given", op.name)
		}
		w, ws, err := f32n(v[3])
		if err != nil {
			return nil, err
		}
		if !ws.Eq(op.ws) {
			return nil, fmt.Errorf("nn: %s: filters of shape %v, want %v", op.name, ws, op.ws)
		}
		st.dconv = grow(st.dconv, 0) // the batch's is never made
		winogradBackward(wm, g, x, w, func(s0, s1 int, dy []float32) {
			for n := s0; n < s1; n++ {
				poolGrad(n, dy[(n-s0)*per:(n-s0+1)*per])
			}
		}, dw, st.dx, &op.fwd.conv.sc.wg)
		st.dxSet = true
		return t, nil
	}
	// Otherwise nobody reads the gradient w.r.t. the convolution's
	// output after the image's filter gradient (im2col, image by image)
	// unless the input gradient does: with one, dconv holds the batch's;
	// without, one image's, which stays in cache.
	if op.fwd.conv.noDX {
		st.dconv = grow(st.dconv, per)
	} else {
		st.dconv = grow(st.dconv, g.n*per)
	}
	var beta float32
	for n := 0; n < g.n; n++ {
		dn := st.dconv[:per]
		if !op.fwd.conv.noDX {
			dn = st.dconv[n*per : (n+1)*per]
		}
		poolGrad(n, dn)
		xn := x[n*hw : (n+1)*hw]
		col := xn
		if !g.direct() {
			col = op.fwd.conv.sc.get(ckk * howo)
			op.fwd.conv.sc.im2col(g, xn, col)
		}
		impl.Sgemm(blas.NoTrans, blas.Trans, g.cout, ckk, howo, 1, dn, howo, col, howo, beta, dw, ckk)
		beta = 1
	}
	return t, nil
}

// convPoolGradB: (dw) -> the bias gradient convPoolGradW left.
type convPoolGradB struct {
	baseOp
	fwd *convPoolOp
	out outBuf
}

func (op *convPoolGradB) Arity() int { return 1 }
func (op *convPoolGradB) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(1))
}
func (op *convPoolGradB) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	s, ok := ds[0].(tensor.Shape)
	if !ok || len(s) != 4 {
		return nil, fmt.Errorf("nn: %s wants a filter shape, got %v", op.name, ds[0])
	}
	return tensor.Shape{s[0]}, nil
}
func (op *convPoolGradB) ReturnsPtr() bool { return false }

func (op *convPoolGradB) Do(v ...G.Value) (G.Value, error) {
	st := op.fwd.st
	if len(st.db) != st.g.cout {
		return nil, fmt.Errorf("nn: %s: no filter gradient computed", op.name)
	}
	t, db := op.out.get(tensor.Shape{st.g.cout}, st.db)
	copy(db, st.db)
	return t, nil
}

// convPoolGradX: (w, dw) -> dx from the gradient w.r.t. the convolution's
// output that convPoolGradW left.
type convPoolGradX struct {
	baseOp
	fwd *convPoolOp
	xs  tensor.Shape
	out outBuf
	dx  *tensor.Dense // over the state's dx
}

func (op *convPoolGradX) Arity() int { return 2 }
func (op *convPoolGradX) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(4), tt(4))
}
func (op *convPoolGradX) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return op.xs.Clone(), nil
}
func (op *convPoolGradX) ReturnsPtr() bool { return false }

func (op *convPoolGradX) Do(v ...G.Value) (G.Value, error) {
	w, ws, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	st := op.fwd.st
	g := st.g
	if !op.xs.Eq(tensor.Shape{g.n, g.cin, g.h, g.w}) || !ws.Eq(tensor.Shape{g.cout, g.cin, g.k, g.k}) || (!st.dxSet && len(st.dconv) != g.outShape().TotalSize()) {
		return nil, fmt.Errorf("nn: %s: no filter gradient computed for input %v", op.name, op.xs)
	}
	if st.dxSet { // made with the filter gradient
		st.dxSet = false
		if op.dx == nil || &op.dx.Data().([]float32)[0] != &st.dx[0] {
			op.dx = tensor.New(tensor.WithShape(op.xs.Clone()...), tensor.WithBacking(st.dx))
		}
		return op.dx, nil
	}
	t, dx := op.out.get(op.xs, w, st.dconv)
	conv2dBackwardX(g, w, st.dconv, dx, op.fwd.conv.sc)
	return t, nil
}
