package nn

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/internal/vecmath"
	"gonum.org/v1/gonum/blas"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Convolution and max-pooling ops in NCHW, written for speed on a CPU
// without gorgonia's generic iterators and transposes.
//
// conv2dOp computes each sample as one matrix product: the sample is
// unrolled (im2col) into a [Cin*k*k, Ho*Wo] buffer and W, viewed as
// [Cout, Cin*k*k], multiplies it straight into the sample's
// [Cout, Ho*Wo] block of the NCHW output. The matrix products go through
// blas32, which models/blas.go points at OpenBLAS in the default build.
//
// All ops here are single-threaded (training runs one process per core)
// and keep their scratch between calls: an op instance must not be run
// concurrently with itself or with the other ops of its layer.

// convScratch is the im2col buffer shared by a convolution's forward op
// and its two gradient ops (they never run at the same time), and the
// vectorised im2col's geometry for the last input size.
type convScratch struct {
	col   []float32
	plane *vecmath.ConvPlane
	wg    winogradScratch // where winogradTile picks Winograd
	// noWinograd keeps the im2col path everywhere (tests and benchmarks
	// that compare the two).
	noWinograd bool
}

// winograd is winogradTile(g) unless s keeps im2col: 0 for im2col.
func (s *convScratch) winograd(g convGeom) int {
	if s.noWinograd {
		return 0
	}
	return winogradTile(g)
}

// planeFor is vecmath's im2col/col2im geometry of g's planes.
func (s *convScratch) planeFor(g convGeom) *vecmath.ConvPlane {
	if p := s.plane; p != nil && p.H == g.h && p.W == g.w && p.K == g.k && p.Pad == g.pad {
		return p
	}
	s.plane = vecmath.NewConvPlane(g.h, g.w, g.k, g.pad)
	return s.plane
}

// im2col unrolls one sample x (Cin, H, W) into col [Cin*k*k, Ho*Wo]: row
// (c, ki, kj), column (oy, ox) holds x[c, oy+ki-pad, ox+kj-pad], 0
// outside; a channel at a time (vecmath.ConvPlane.Im2col).
func (s *convScratch) im2col(g convGeom, x, col []float32) {
	p := s.planeFor(g)
	if p == nil { // no output
		return
	}
	kk, hw := g.k*g.k*g.howo(), g.hw()
	for c := 0; c < g.cin; c++ {
		p.Im2col(col[c*kk:(c+1)*kk], x[c*hw:(c+1)*hw])
	}
}

// col2im adds col [Cin*k*k, Ho*Wo] back into one sample dx (Cin, H, W):
// the adjoint of im2col, a channel at a time (vecmath.ConvPlane.Col2im).
func (s *convScratch) col2im(g convGeom, col, dx []float32) {
	p := s.planeFor(g)
	if p == nil {
		return
	}
	kk, hw := g.k*g.k*g.howo(), g.hw()
	for c := 0; c < g.cin; c++ {
		p.Col2im(dx[c*hw:(c+1)*hw], col[c*kk:(c+1)*kk])
	}
}

func (s *convScratch) get(n int) []float32 {
	if cap(s.col) < n {
		s.col = make([]float32, n)
	}
	return s.col[:n]
}

// conv2dOp: x (N, Cin, H, W), w (Cout, Cin, k, k)[, b (Cout)] ->
// (N, Cout, Ho, Wo) with stride 1 and symmetric zero padding pad,
// Ho = H+2pad-k+1 (likewise Wo). With noDX the op is not differentiable
// w.r.t. x (for a network's input, whose gradient nobody reads).
type conv2dOp struct {
	baseOp
	k, pad int
	noDX   bool
	// bias: a third input b (Cout) is added to each output channel, in
	// the same pass over the output as the matrix product.
	bias bool
	sc   *convScratch
	out  outBuf
}

func newConv2d(k, pad int) *conv2dOp {
	return &conv2dOp{baseOp: baseOp{nextID(), fmt.Sprintf("conv%dx%dp%d", k, k, pad)}, k: k, pad: pad, sc: &convScratch{}}
}

// convGeom is one convolution's sizes.
type convGeom struct {
	n, cin, h, w, cout, k, pad, ho, wo int
}

func (g convGeom) ckk() int  { return g.cin * g.k * g.k }
func (g convGeom) hw() int   { return g.h * g.w }
func (g convGeom) howo() int { return g.ho * g.wo }

func (g convGeom) outShape() tensor.Shape { return tensor.Shape{g.n, g.cout, g.ho, g.wo} }

// direct reports whether im2col is the identity (1x1 kernel, no padding).
func (g convGeom) direct() bool { return g.k == 1 && g.pad == 0 }

func newConvGeom(x, w tensor.Shape, k, pad int) (convGeom, error) {
	if len(x) != 4 || len(w) != 4 {
		return convGeom{}, fmt.Errorf("nn: conv2d wants 4-d input and filter, got %v and %v", x, w)
	}
	if w[1] != x[1] || w[2] != k || w[3] != k {
		return convGeom{}, fmt.Errorf("nn: conv2d filter %v does not fit input %v with a %dx%d kernel", w, x, k, k)
	}
	g := convGeom{n: x[0], cin: x[1], h: x[2], w: x[3], cout: w[0], k: k, pad: pad}
	g.ho, g.wo = g.h+2*pad-k+1, g.w+2*pad-k+1
	if k < 1 || pad < 0 || g.ho < 1 || g.wo < 1 {
		return convGeom{}, fmt.Errorf("nn: conv2d kernel %d, padding %d: no output for input %v", k, pad, x)
	}
	return g, nil
}

func (op *conv2dOp) Arity() int {
	if op.bias {
		return 3
	}
	return 2
}
func (op *conv2dOp) Type() hm.Type {
	if op.bias {
		return hm.NewFnType(tt(4), tt(4), tt(1), tt(4))
	}
	return hm.NewFnType(tt(4), tt(4), tt(4))
}
func (op *conv2dOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	if len(ds) != op.Arity() {
		return nil, fmt.Errorf("nn: conv2d wants %d inputs, got %d", op.Arity(), len(ds))
	}
	x, ok1 := ds[0].(tensor.Shape)
	w, ok2 := ds[1].(tensor.Shape)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("nn: conv2d wants shapes, got %T and %T", ds[0], ds[1])
	}
	g, err := newConvGeom(x, w, op.k, op.pad)
	if err != nil {
		return nil, err
	}
	return g.outShape(), nil
}
func (op *conv2dOp) ReturnsPtr() bool { return false }

// f32n is f32 that also checks the number of elements against the shape.
func f32n(v G.Value) ([]float32, tensor.Shape, error) {
	d, s, err := f32(v)
	if err != nil {
		return nil, nil, err
	}
	if len(d) != s.TotalSize() {
		return nil, nil, fmt.Errorf("nn: tensor of shape %v holds %d values", s, len(d))
	}
	return d, s, nil
}

func (op *conv2dOp) Do(v ...G.Value) (G.Value, error) {
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
	g, err := newConvGeom(xs, ws, op.k, op.pad)
	if err != nil {
		return nil, err
	}
	var b []float32
	if op.bias {
		var bs tensor.Shape
		if b, bs, err = f32n(v[2]); err != nil {
			return nil, err
		}
		if len(bs) != 1 || bs[0] != g.cout {
			return nil, fmt.Errorf("nn: conv2d with %d output channels: bias of shape %v", g.cout, bs)
		}
	}
	t, out := op.out.get(g.outShape(), x, w, b)
	conv2dForward(g, x, w, b, out, op.sc)
	return t, nil
}

// conv2dForward: y[n] [Cout, HoWo] = W [Cout, CKK] x im2col(x[n]) (+ b,
// one value per row, unless b is nil). y need not be zero.
func conv2dForward(g convGeom, x, w, b, y []float32, sc *convScratch) {
	if m := sc.winograd(g); m != 0 {
		winogradForward(m, g, x, w, b, y, &sc.wg)
		return
	}
	impl := convBLAS()
	ckk, hw, howo := g.ckk(), g.cin*g.hw(), g.howo()
	for n := 0; n < g.n; n++ {
		xn := x[n*hw : (n+1)*hw]
		col := xn
		if !g.direct() {
			col = sc.get(ckk * howo)
			sc.im2col(g, xn, col)
		}
		yn := y[n*g.cout*howo : (n+1)*g.cout*howo]
		impl.Sgemm(blas.NoTrans, blas.NoTrans, g.cout, howo, ckk, 1, w, ckk, col, howo, 0, yn, howo)
		if b != nil {
			// While yn is still in cache.
			for c, bc := range b[:g.cout] {
				addScalar(yn[c*howo:(c+1)*howo], bc)
			}
		}
	}
}

// addScalar adds s to every element of v.
func addScalar(v []float32, s float32) { vecmath.AddScalar(v, s) }

func (op *conv2dOp) DiffWRT(int) []bool {
	if op.bias {
		return []bool{!op.noDX, true, true}
	}
	return []bool{!op.noDX, true}
}
func (op *conv2dOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if len(inputs) != op.Arity() {
		return nil, fmt.Errorf("nn: conv2d has %d inputs, got %d", op.Arity(), len(inputs))
	}
	var dx *G.Node
	if !op.noDX {
		var err error
		dx, err = G.ApplyOp(&conv2dGradOp{baseOp: baseOp{nextID(), op.name + "'x"}, fwd: op, out: inputs[0].Shape().Clone()}, inputs[1], grad)
		if err != nil {
			return nil, err
		}
	}
	dw, err := G.ApplyOp(&conv2dGradOp{baseOp: baseOp{nextID(), op.name + "'w"}, fwd: op, wrtW: true, out: inputs[1].Shape().Clone()}, inputs[0], grad)
	if err != nil {
		return nil, err
	}
	if !op.bias {
		return G.Nodes{dx, dw}, nil
	}
	db, err := G.ApplyOp(&channelSumOp{baseOp: baseOp{nextID(), "channelsum"}, c: inputs[2].Shape()[0], dims: 4}, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, dw, db}, nil
}

// conv2dGradOp computes dx from (w, dy) or, with wrtW, dw from (x, dy).
// out is the shape of the result (x's or w's).
type conv2dGradOp struct {
	baseOp
	fwd  *conv2dOp
	wrtW bool
	out  tensor.Shape
	buf  outBuf
}

func (op *conv2dGradOp) Arity() int { return 2 }
func (op *conv2dGradOp) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(4), tt(4))
}
func (op *conv2dGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return op.out.Clone(), nil
}
func (op *conv2dGradOp) ReturnsPtr() bool { return false }

func (op *conv2dGradOp) Do(v ...G.Value) (G.Value, error) {
	a, as, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	dy, dys, err := f32n(v[1])
	if err != nil {
		return nil, err
	}
	xs, ws := op.out, as
	if op.wrtW {
		xs, ws = as, op.out
	}
	g, err := newConvGeom(xs, ws, op.fwd.k, op.fwd.pad)
	if err != nil {
		return nil, err
	}
	if !dys.Eq(g.outShape()) {
		return nil, fmt.Errorf("nn: %s: gradient of shape %v, want %v", op.name, dys, g.outShape())
	}
	t, out := op.buf.get(op.out, a, dy)
	if op.wrtW {
		conv2dBackwardW(g, a, dy, out, op.fwd.sc)
	} else {
		conv2dBackwardX(g, a, dy, out, op.fwd.sc)
	}
	return t, nil
}

// conv2dBackwardX: dx[n] = col2im(W^T [CKK, Cout] x dy[n] [Cout, HoWo]).
// dx need not be zero.
func conv2dBackwardX(g convGeom, w, dy, dx []float32, sc *convScratch) {
	if m := sc.winograd(g); m != 0 {
		winogradBackwardX(m, g, w, dy, dx, &sc.wg)
		return
	}
	impl := convBLAS()
	ckk, hw, howo := g.ckk(), g.cin*g.hw(), g.howo()
	for n := 0; n < g.n; n++ {
		dyn := dy[n*g.cout*howo : (n+1)*g.cout*howo]
		dxn := dx[n*hw : (n+1)*hw]
		if g.direct() {
			impl.Sgemm(blas.Trans, blas.NoTrans, ckk, howo, g.cout, 1, w, ckk, dyn, howo, 0, dxn, howo)
			continue
		}
		col := sc.get(ckk * howo)
		impl.Sgemm(blas.Trans, blas.NoTrans, ckk, howo, g.cout, 1, w, ckk, dyn, howo, 0, col, howo)
		clear(dxn)
		sc.col2im(g, col, dxn)
	}
}

// conv2dBackwardW: dw [Cout, CKK] = sum over n of dy[n] [Cout, HoWo] x
// im2col(x[n])^T.
func conv2dBackwardW(g convGeom, x, dy, dw []float32, sc *convScratch) {
	if m := sc.winograd(g); m != 0 {
		winogradBackwardW(m, g, x, dy, dw, &sc.wg)
		return
	}
	impl := convBLAS()
	ckk, hw, howo := g.ckk(), g.cin*g.hw(), g.howo()
	var beta float32
	for n := 0; n < g.n; n++ {
		xn := x[n*hw : (n+1)*hw]
		col := xn
		if !g.direct() {
			col = sc.get(ckk * howo)
			sc.im2col(g, xn, col)
		}
		dyn := dy[n*g.cout*howo : (n+1)*g.cout*howo]
		impl.Sgemm(blas.NoTrans, blas.Trans, g.cout, ckk, howo, 1, dyn, howo, col, howo, beta, dw, ckk)
		beta = 1
	}
}

// ---- 2x2 max pooling, stride 2, no padding, NCHW ----

// poolState is what the forward pass leaves for the backward pass: for
// each output, the index into x of the input it took.
type poolState struct {
	argmax []int32
	inLen  int
}

// maxPool2x2Op: (N, C, H, W) -> (N, C, H/2, W/2) (floor: an odd last row or
// column is dropped, like PyTorch's default). Ties go to the first maximum
// in row-major order (with -0 below +0).
type maxPool2x2Op struct {
	baseOp
	st  *poolState
	out outBuf
}

func newMaxPool2x2() *maxPool2x2Op {
	return &maxPool2x2Op{baseOp: baseOp{nextID(), "maxpool2x2"}, st: &poolState{}}
}

func poolShape(x tensor.Shape) (tensor.Shape, error) {
	if len(x) != 4 || x[2] < 2 || x[3] < 2 {
		return nil, fmt.Errorf("nn: maxpool2x2 wants (N, C, H>=2, W>=2), got %v", x)
	}
	return tensor.Shape{x[0], x[1], x[2] / 2, x[3] / 2}, nil
}

func (op *maxPool2x2Op) Arity() int { return 1 }
func (op *maxPool2x2Op) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(4))
}
func (op *maxPool2x2Op) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	x, ok := ds[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("nn: maxpool2x2 wants a shape, got %T", ds[0])
	}
	return poolShape(x)
}
func (op *maxPool2x2Op) ReturnsPtr() bool { return false }

func (op *maxPool2x2Op) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	ys, err := poolShape(xs)
	if err != nil {
		return nil, err
	}
	if len(x) > math.MaxInt32 {
		return nil, fmt.Errorf("nn: maxpool2x2 input of %d values is too large", len(x))
	}
	t, out := op.out.get(ys, x)
	if cap(op.st.argmax) < len(out) {
		op.st.argmax = make([]int32, len(out))
	}
	op.st.argmax = op.st.argmax[:len(out)]
	op.st.inLen = len(x)
	maxPool2x2(x, xs[0]*xs[1], xs[2], xs[3], out, op.st.argmax)
	return t, nil
}

// maxPool2x2 pools the planes (H, W) of x into y, recording in arg the
// index into x of each output's maximum. It compares order-preserving
// integer keys with masks instead of branches: on real activations the
// branches are unpredictable, and that made pooling several times slower.
func maxPool2x2(x []float32, planes, h, w int, y []float32, arg []int32) {
	ho, wo := h/2, w/2
	o := 0
	for p := 0; p < planes; p++ {
		base := p * h * w
		for oy := 0; oy < ho; oy++ {
			r0 := base + 2*oy*w
			top := x[r0 : r0+2*wo]
			bot := x[r0+w : r0+w+2*wo]
			bot = bot[:len(top)]
			yr := y[o : o+wo]
			ar := arg[o : o+wo]
			ar = ar[:len(yr)]
			for ox := range yr {
				i := 2 * ox
				bk, bi := orderKey(top[i]), int64(r0+i)
				bk, bi = keepMax(bk, bi, orderKey(top[i+1]), int64(r0+i+1))
				bk, bi = keepMax(bk, bi, orderKey(bot[i]), int64(r0+w+i))
				_, bi = keepMax(bk, bi, orderKey(bot[i+1]), int64(r0+w+i+1))
				yr[ox], ar[ox] = x[bi], int32(bi)
			}
			o += wo
		}
	}
}

// orderKey maps a float32 to an integer with the same order (-0 < +0; a
// NaN with the sign bit clear is above +Inf, one with it set below -Inf).
func orderKey(v float32) int64 {
	b := int32(math.Float32bits(v))
	return int64(b ^ (b>>31)&0x7fffffff)
}

// keepMax returns (k, i) if k > bk, else (bk, bi), without branching.
func keepMax(bk, bi, k, i int64) (int64, int64) {
	m := (bk - k) >> 63 // all ones iff k > bk
	return bk ^ (bk^k)&m, bi ^ (bi^i)&m
}

func (op *maxPool2x2Op) DiffWRT(int) []bool { return []bool{true} }
func (op *maxPool2x2Op) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dx, err := G.ApplyOp(&maxPool2x2GradOp{baseOp: baseOp{nextID(), "maxpool2x2'"}, fwd: op}, inputs[0], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}

// maxPool2x2GradOp: (x, dy) -> dx, dy scattered to the forward's argmax
// positions. x only gives the shape (and orders this op after the forward).
type maxPool2x2GradOp struct {
	baseOp
	fwd *maxPool2x2Op
	out outBuf
}

func (op *maxPool2x2GradOp) Arity() int { return 2 }
func (op *maxPool2x2GradOp) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(4), tt(4))
}
func (op *maxPool2x2GradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *maxPool2x2GradOp) ReturnsPtr() bool { return false }

func (op *maxPool2x2GradOp) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	dy, _, err := f32n(v[1])
	if err != nil {
		return nil, err
	}
	st := op.fwd.st
	if len(st.argmax) != len(dy) || st.inLen != xs.TotalSize() {
		return nil, fmt.Errorf("nn: maxpool2x2': no forward pass recorded for input %v and %d gradients", xs, len(dy))
	}
	t, dx := op.out.get(xs, x, dy)
	clear(dx)
	for i, a := range st.argmax {
		dx[a] += dy[i]
	}
	return t, nil
}

// ---- ReLU then 2x2 max pooling, fused ----

// poolReLUOp is maxpool2x2(relu(x)), computed as relu(maxpool2x2(x)) (the
// same values: ReLU is monotone) in one pass over x with no argmax kept:
// the backward op finds the maximum again by comparing x with the output.
// Values and gradients are bit for bit those of reluOp followed by
// maxPool2x2Op: the output is the first maximum in row-major order under
// orderKey's total order, clamped to +0; the gradient goes to the first
// input with exactly the output's bits, and nowhere when the output is +0
// (ReLU's gradient at x <= 0 is 0).
type poolReLUOp struct {
	baseOp
	out outBuf
	st  *poolArgState
}

// poolArgState is what poolReLUOp leaves its gradient op: which input of
// its window each output came from (poolReLUArg), for the input and output
// it was computed on.
type poolArgState struct {
	arg  []uint8
	x, y *float32 // the forward's input and output data
}

// argFor returns the recorded codes if they are x's and y's, else nil.
func (s *poolArgState) argFor(x, y []float32) []uint8 {
	if len(x) == 0 || len(y) != len(s.arg) || s.x != &x[0] || s.y != &y[0] {
		return nil
	}
	return s.arg
}

func newPoolReLU() *poolReLUOp {
	return &poolReLUOp{baseOp: baseOp{nextID(), "relu+maxpool2x2"}, st: &poolArgState{}}
}

func (op *poolReLUOp) Arity() int { return 1 }
func (op *poolReLUOp) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(4))
}
func (op *poolReLUOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	x, ok := ds[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("nn: relu+maxpool2x2 wants a shape, got %T", ds[0])
	}
	return poolShape(x)
}
func (op *poolReLUOp) ReturnsPtr() bool { return false }

func (op *poolReLUOp) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	ys, err := poolShape(xs)
	if err != nil {
		return nil, err
	}
	t, out := op.out.get(ys, x)
	st := op.st
	if cap(st.arg) < len(out) {
		st.arg = make([]uint8, len(out))
	}
	st.arg = st.arg[:len(out)]
	st.x, st.y = nil, nil
	poolReLUArg(x, xs[0]*xs[1], xs[2], xs[3], out, st.arg)
	if len(x) > 0 && len(out) > 0 {
		st.x, st.y = &x[0], &out[0]
	}
	return t, nil
}

// key32 is orderKey in 32 bits: an int32 with the order of the float32
// with bits b. It is its own inverse.
func key32(b uint32) int32 {
	v := int32(b)
	return v ^ (v>>31)&0x7fffffff
}

// poolReLU sets y to relu(maxpool2x2(x)) over planes (H, W). The ReLU is
// a max with the key of +0, which is 0: positive floats (and NaNs with
// the sign bit clear) are their own keys.
func poolReLU(x []float32, planes, h, w int, y []float32) {
	if len(x) == 0 {
		return
	}
	xb := unsafe.Slice((*uint32)(unsafe.Pointer(&x[0])), len(x))
	yb := unsafe.Slice((*uint32)(unsafe.Pointer(&y[0])), len(y))
	ho, wo := h/2, w/2
	o := 0
	for p := 0; p < planes; p++ {
		for oy := 0; oy < ho; oy++ {
			r0 := p*h*w + 2*oy*w
			top := xb[r0 : r0+2*wo]
			bot := xb[r0+w : r0+w+2*wo]
			bot = bot[:len(top)]
			yr := yb[o : o+wo]
			if wo == 0 {
				continue
			}
			// Checked above: top and bot hold 2*wo values, yr wo.
			pt, pb, py := unsafe.Pointer(&top[0]), unsafe.Pointer(&bot[0]), unsafe.Pointer(&yr[0])
			for ox := 0; ox < wo; ox++ {
				t := (*[2]uint32)(unsafe.Add(pt, 8*ox))
				b := (*[2]uint32)(unsafe.Add(pb, 8*ox))
				*(*uint32)(unsafe.Add(py, 4*ox)) = uint32(max(key32(t[0]), key32(t[1]), key32(b[0]), key32(b[1]), 0))
			}
			o += wo
		}
	}
}

func (op *poolReLUOp) DiffWRT(int) []bool { return []bool{true} }
func (op *poolReLUOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dx, err := G.ApplyOp(&poolReLUGradOp{baseOp: baseOp{nextID(), "relu+maxpool2x2'"}, st: op.st}, inputs[0], output, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}

// poolReLUGradOp: (x, y, dy) -> dx for y = poolReLU(x), from the winners
// the forward op recorded when they are for this x and y (else found
// again from x and y: the same gradient).
type poolReLUGradOp struct {
	baseOp
	out outBuf
	st  *poolArgState
}

func (op *poolReLUGradOp) Arity() int { return 3 }
func (op *poolReLUGradOp) Type() hm.Type {
	return hm.NewFnType(tt(4), tt(4), tt(4), tt(4))
}
func (op *poolReLUGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *poolReLUGradOp) ReturnsPtr() bool { return false }

func (op *poolReLUGradOp) Do(v ...G.Value) (G.Value, error) {
	x, xs, err := f32n(v[0])
	if err != nil {
		return nil, err
	}
	y, ys, err := f32n(v[1])
	if err != nil {
		return nil, err
	}
	dy, dys, err := f32n(v[2])
	if err != nil {
		return nil, err
	}
	want, err := poolShape(xs)
	if err != nil {
		return nil, err
	}
	if !ys.Eq(want) || !dys.Eq(want) {
		return nil, fmt.Errorf("nn: relu+maxpool2x2': output %v and gradient %v for input %v", ys, dys, xs)
	}
	t, dx := op.out.get(xs, x, y, dy)
	if arg := op.st.argFor(x, y); arg != nil {
		poolReLUArgGrad(arg, dy, xs[0]*xs[1], xs[2], xs[3], dx)
	} else {
		poolReLUGrad(x, y, dy, xs[0]*xs[1], xs[2], xs[3], dx)
	}
	return t, nil
}

// poolReLUGrad writes every element of dx: dy of each window at the
// window's first input with the output's bits, if the output is not +0;
// 0 elsewhere (the dropped odd last row and column included).
func poolReLUGrad(x, y, dy []float32, planes, h, w int, dx []float32) {
	if len(x) == 0 {
		return
	}
	xb := unsafe.Slice((*uint32)(unsafe.Pointer(&x[0])), len(x))
	yb := unsafe.Slice((*uint32)(unsafe.Pointer(&y[0])), len(y))
	gb := unsafe.Slice((*uint32)(unsafe.Pointer(&dy[0])), len(dy))
	db := unsafe.Slice((*uint32)(unsafe.Pointer(&dx[0])), len(dx))
	ho, wo := h/2, w/2
	o := 0
	for p := 0; p < planes; p++ {
		for oy := 0; oy < ho; oy++ {
			r0 := p*h*w + 2*oy*w
			top := xb[r0 : r0+2*wo]
			bot := xb[r0+w : r0+w+2*wo]
			dt := db[r0 : r0+2*wo]
			dbt := db[r0+w : r0+w+2*wo]
			yr := yb[o : o+wo]
			gr := gb[o : o+wo]
			if wo == 0 {
				continue
			}
			// Checked above: top, bot, dt and dbt hold 2*wo values, yr
			// and gr wo. Conditional moves throughout: which input is the
			// maximum is a coin toss that branches would lose.
			pt, pb := unsafe.Pointer(&top[0]), unsafe.Pointer(&bot[0])
			pdt, pdb := unsafe.Pointer(&dt[0]), unsafe.Pointer(&dbt[0])
			py, pg := unsafe.Pointer(&yr[0]), unsafe.Pointer(&gr[0])
			for ox := 0; ox < wo; ox++ {
				t := (*[2]uint32)(unsafe.Add(pt, 8*ox))
				b := (*[2]uint32)(unsafe.Add(pb, 8*ox))
				yv := *(*uint32)(unsafe.Add(py, 4*ox))
				var g uint32
				if yv != 0 { // +0: the ReLU passes no gradient
					g = *(*uint32)(unsafe.Add(pg, 4*ox))
				}
				k := 3
				if b[0] == yv {
					k = 2
				}
				if t[1] == yv {
					k = 1
				}
				if t[0] == yv {
					k = 0
				}
				var g0, g1, g2, g3 uint32
				if k == 0 {
					g0 = g
				}
				if k == 1 {
					g1 = g
				}
				if k == 2 {
					g2 = g
				}
				if k == 3 {
					g3 = g
				}
				*(*[2]uint32)(unsafe.Add(pdt, 8*ox)) = [2]uint32{g0, g1}
				*(*[2]uint32)(unsafe.Add(pdb, 8*ox)) = [2]uint32{g2, g3}
			}
			if w%2 == 1 {
				db[r0+w-1] = 0
				db[r0+2*w-1] = 0
			}
			o += wo
		}
		if h%2 == 1 {
			clear(db[p*h*w+(h-1)*w : (p+1)*h*w])
		}
	}
}

// poolReLUArg is poolReLU that also records, for each output, which of
// its window's four inputs it is (0, 1: top row; 2, 3: bottom row; the
// first in that order with the output's bits), or 4 where the output is
// +0 (no gradient), a row of outputs at a time (vecmath.PoolReLUArg).
// poolReLUArgGrad then needs neither x nor y.
func poolReLUArg(x []float32, planes, h, w int, y []float32, arg []uint8) {
	ho, wo := h/2, w/2
	if wo == 0 {
		return
	}
	if h >= 2 && h%2 == 0 && w%2 == 0 { // every row in one call, the same values
		vecmath.PoolReLUArgPlanes(x, planes, h, w, y, arg)
		return
	}
	o := 0
	for p := 0; p < planes; p++ {
		for oy := 0; oy < ho; oy++ {
			r0 := p*h*w + 2*oy*w
			vecmath.PoolReLUArg(x[r0:r0+2*wo], x[r0+w:r0+w+2*wo], y[o:o+wo], arg[o:o+wo])
			o += wo
		}
	}
}

// poolReLUArgGrad writes every element of dx from the gradient dy of
// poolReLUArg's output and its arg: dy at the recorded input, 0 elsewhere
// (the dropped odd last row and column included).
func poolReLUArgGrad(arg []uint8, dy []float32, planes, h, w int, dx []float32) {
	ho, wo := h/2, w/2
	if h >= 2 && w >= 2 && h%2 == 0 && w%2 == 0 { // every row in one call, the same values
		vecmath.PoolArgGradPlanes(arg, dy, planes, h, w, dx)
		return
	}
	o := 0
	for p := 0; p < planes; p++ {
		for oy := 0; oy < ho; oy++ {
			r0 := p*h*w + 2*oy*w
			vecmath.PoolArgGrad(arg[o:o+wo], dy[o:o+wo], dx[r0:r0+2*wo], dx[r0+w:r0+w+2*wo])
			if w%2 == 1 {
				dx[r0+w-1] = 0
				dx[r0+2*w-1] = 0
			}
			o += wo
		}
		if h%2 == 1 {
			clear(dx[p*h*w+(h-1)*w : (p+1)*h*w])
		}
	}
}
