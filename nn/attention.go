package nn

import (
	"fmt"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"math"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/internal/vecmath"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// CausalSelfAttention is multi-head self-attention in which position t
// attends to positions 0..t, over (N, T, Dim) input. Its parameters carry
// the names and layout of PyTorch's nn.MultiheadAttention(Dim, Heads,
// batch_first=True) ("in_proj_weight" [3 Dim, Dim] holding the query, key
// and value projections, "in_proj_bias", "out_proj.weight",
// "out_proj.bias"), which computes the same with a causal attn_mask.
type CausalSelfAttention struct{ Dim, Heads int }

func (l *CausalSelfAttention) Params() []Param {
	c := l.Dim
	return []Param{
		// PyTorch: xavier_uniform_ for in_proj_weight, zeros for the biases.
		{Name: "in_proj_weight", Shape: []int{c, 3 * c}, Torch: []int{3 * c, c}, TransT: true, Init: Uniform(math.Sqrt(6 / float64(4*c)))},
		{Name: "in_proj_bias", Shape: []int{3 * c}, Init: Fill(0)},
		{Name: "out_proj.weight", Shape: []int{c, c}, Torch: []int{c, c}, TransT: true, Init: FanIn(c)},
		{Name: "out_proj.bias", Shape: []int{c}, Init: Fill(0)},
	}
}

func (l *CausalSelfAttention) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	s := x.Shape()
	if l.Heads < 1 || l.Dim%l.Heads != 0 {
		return nil, fmt.Errorf("attention: %d heads do not divide dimension %d", l.Heads, l.Dim)
	}
	if len(s) != 3 || s[2] != l.Dim {
		return nil, fmt.Errorf("attention over %d: input shape %v; want (N, T, %d)", l.Dim, s, l.Dim)
	}
	qkv, err := affine(b, x, b.Param(0), b.Param(1), l.Dim, 3*l.Dim)
	if err != nil {
		return nil, err
	}
	o, err := G.ApplyOp(&attnOp{baseOp: baseOp{nextID(), "attention"}, heads: l.Heads, st: &attnState{}}, qkv)
	if err != nil {
		return nil, err
	}
	return affine(b, o, b.Param(2), b.Param(3), l.Dim, l.Dim)
}

// attnState keeps the attention probabilities for backward.
type attnState struct{ p []float32 } // (N, H, T, T), zero above the diagonal

// attnOp: (N, T, 3C) queries|keys|values -> (N, T, C), causal, H heads.
// Per batch row and head, the products are matrix multiplies over strided
// views of the input (leading dimension 3C): S = Q K^T / sqrt(D), P the
// causal row softmax of S, O = P V.
type attnOp struct {
	baseOp
	heads int
	st    *attnState
	out   outBuf
	kt    []float32 // scratch: one head's keys transposed (D x T)
}

func (op *attnOp) Arity() int       { return 1 }
func (op *attnOp) Type() hm.Type    { return hm.NewFnType(tt(3), tt(3)) }
func (op *attnOp) ReturnsPtr() bool { return false }
func (op *attnOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	s := ds[0].(tensor.Shape)
	if len(s) != 3 || s[2]%3 != 0 {
		return nil, fmt.Errorf("nn: attention input %v; want (N, T, 3C)", s)
	}
	return tensor.Shape{s[0], s[1], s[2] / 3}, nil
}

// geom returns N, T, C and the head size.
func (op *attnOp) geom(s tensor.Shape) (n, t, c, d int) {
	return s[0], s[1], s[2] / 3, s[2] / 3 / op.heads
}

// gemm is c = alpha op(a) op(b) + beta c over row-major views with
// leading dimensions lda, ldb, ldc (m x n result, k inner).
func gemm(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	t := func(tr bool) blas.Transpose {
		if tr {
			return blas.Trans
		}
		return blas.NoTrans
	}
	blas32.Implementation().Sgemm(t(ta), t(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// tileGemm is gemm for ta and tb = false (op(a) = a or, with ta, a's
// transpose), on vecmath.GemmTiles' AVX-512 tiles where they take the
// shape (m a multiple of 8, n of 32: attention's blocks and heads of 64)
// and beta is 0, else on the BLAS: for attention's small products, where
// the BLAS's packing and call cost more than the arithmetic.
func tileGemm(ta bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	sai, sak := lda, 1
	if ta {
		sai, sak = 1, lda
	}
	if !attnTiles || !vecmath.GemmTiles(m, n, k, alpha, a, sai, sak, b, ldb, c, ldc) {
		gemm(ta, false, m, n, k, alpha, a, lda, b, ldb, 0, c, ldc)
	}
}

// tilesFit says whether attention's blocks at context t take
// vecmath.GemmTiles' tiles (which then pays for transposing the keys
// and values that Q K^T and dO V^T read across).
func tilesFit(t int) bool {
	return attnTiles && vecmath.KernelSet() == "avx512" && attnBlock%32 == 0 && t%attnBlock == 0
}

// attnTiles turns vecmath.GemmTiles on for attention (tests compare with
// the BLAS alone).
var attnTiles = true

// headTranspose sets *dst (grown as needed) to the d x r transpose of
// the r x d matrix src (leading dimension ld) and returns it.
func headTranspose(dst *[]float32, src []float32, r, d, ld int) []float32 {
	if cap(*dst) < r*d {
		*dst = make([]float32, r*d)
	}
	out := (*dst)[:r*d]
	vecmath.Transpose(out, r, src, ld, r, d)
	return out
}

// causalSoftmax turns each row i of s (t x t) into the softmax of its
// first i+1 entries, zeroing the rest. In float32 throughout (vecmath.Exp32), as
// PyTorch's float32 softmax; vecmath.Softmax's assembly per row.
func causalSoftmax(s []float32, t int) { causalSoftmaxRows(s, t, 0, t) }

// causalSoftmaxRows is causalSoftmax over rows [i0, i1) of s.
func causalSoftmaxRows(s []float32, t, i0, i1 int) {
	for i := i0; i < i1; i++ {
		row := s[i*t : (i+1)*t]
		vecmath.Softmax(row[:i+1])
		clear(row[i+1:])
	}
}

func (op *attnOp) Do(v ...G.Value) (G.Value, error) {
	qkv, s, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	n, t, c, d := op.geom(s)
	h := op.heads
	scale := float32(1 / math.Sqrt(float64(d)))
	// Training keeps every P for backward; forward-only evaluation (a
	// pooled output) needs one at a time.
	var scratch []float32
	if op.out.pool != nil {
		scratch = op.out.pool.get(t * t)
		defer op.out.pool.put(scratch)
	} else if len(op.st.p) != n*h*t*t {
		op.st.p = make([]float32, n*h*t*t)
	}
	res, out := op.out.get(tensor.Shape{n, t, c}, qkv)
	for b := 0; b < n; b++ {
		x := qkv[b*t*3*c:]
		for hd := 0; hd < h; hd++ {
			p := scratch
			if p == nil {
				p = op.st.p[(b*h+hd)*t*t : (b*h+hd+1)*t*t]
			}
			q, k, vv := x[hd*d:], x[c+hd*d:], x[2*c+hd*d:]
			o := out[b*t*c+hd*d:]
			var kt []float32
			if tilesFit(t) {
				kt = headTranspose(&op.kt, k, t, d, 3*c)
			}
			// Row block [i0, i1) attends to keys [0, i1) only: S and O
			// skip the products that the causal mask zeroes.
			for i0 := 0; i0 < t; i0 += attnBlock {
				i1 := min(i0+attnBlock, t)
				if kt != nil {
					tileGemm(false, i1-i0, i1, d, scale, q[i0*3*c:], 3*c, kt, t, p[i0*t:], t)
				} else {
					gemm(false, true, i1-i0, i1, d, scale, q[i0*3*c:], 3*c, k, 3*c, 0, p[i0*t:], t)
				}
				causalSoftmaxRows(p, t, i0, i1)
				tileGemm(false, i1-i0, d, i1, 1, p[i0*t:], t, vv, 3*c, o[i0*c:], c)
			}
		}
	}
	return res, nil
}

// attnBlock is the rows (and columns) per block of attention's causal
// products: a block of query rows [i0, i1) reads keys and values [0, i1)
// only, and the gradients' products skip the blocks above the diagonal
// likewise (5/8 of the full products' work at T = 4 blocks). Smaller
// blocks skip more but run sgemm on smaller matrices.
var attnBlock = 32

func (op *attnOp) DiffWRT(int) []bool { return []bool{true} }
func (op *attnOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&attnGradOp{baseOp: baseOp{nextID(), "attention'"}, fwd: op}, inputs[0], grad)
	return G.Nodes{d}, err
}

// attnGradOp: (qkv, dout) -> dqkv. With P from forward, per row and head:
// dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)) / sqrt(D),
// dQ = dS K, dK = dS^T Q.
type attnGradOp struct {
	baseOp
	fwd *attnOp
	ds  []float32 // scratch, t x t
	vt  []float32 // scratch: one head's values transposed (D x T)
	out outBuf
}

func (op *attnGradOp) Arity() int       { return 2 }
func (op *attnGradOp) Type() hm.Type    { return hm.NewFnType(tt(3), tt(3), tt(3)) }
func (op *attnGradOp) ReturnsPtr() bool { return false }
func (op *attnGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

func (op *attnGradOp) Do(v ...G.Value) (G.Value, error) {
	qkv, s, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	dout, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	n, t, c, d := op.fwd.geom(s)
	h := op.fwd.heads
	if len(op.fwd.st.p) != n*h*t*t {
		return nil, fmt.Errorf("nn: attention gradient without its forward pass")
	}
	scale := float32(1 / math.Sqrt(float64(d)))
	if len(op.ds) != t*t {
		op.ds = make([]float32, t*t)
	}
	ds := op.ds
	res, dq := op.out.get(s, qkv, dout) // every value written below

	for b := 0; b < n; b++ {
		x, dx := qkv[b*t*3*c:], dq[b*t*3*c:]
		do := dout[b*t*c:]
		for hd := 0; hd < h; hd++ {
			p := op.fwd.st.p[(b*h+hd)*t*t : (b*h+hd+1)*t*t]
			q, k, vv := x[hd*d:], x[c+hd*d:], x[2*c+hd*d:]
			doh := do[hd*d:]
			dqh, dkh, dvh := dx[hd*d:], dx[c+hd*d:], dx[2*c+hd*d:]
			var vt []float32
			if tilesFit(t) {
				vt = headTranspose(&op.vt, vv, t, d, 3*c)
			}
			// P and dS are zero above the diagonal: row block [i0, i1)
			// of dP, dS and dQ needs keys [0, i1); column block [j0, j1)
			// of dV and dK needs query rows [j0, T).
			for i0 := 0; i0 < t; i0 += attnBlock {
				i1 := min(i0+attnBlock, t)
				if vt != nil { // dP
					tileGemm(false, i1-i0, i1, d, 1, doh[i0*c:], c, vt, t, ds[i0*t:], t)
				} else {
					gemm(false, true, i1-i0, i1, d, 1, doh[i0*c:], c, vv, 3*c, 0, ds[i0*t:], t)
				}
				for i := i0; i < i1; i++ {
					pr, dr := p[i*t:i*t+i+1], ds[i*t:(i+1)*t]
					vecmath.SoftmaxGradRow(dr, pr, scale)
					clear(dr[i+1:])
				}
				tileGemm(false, i1-i0, d, i1, 1, ds[i0*t:], t, k, 3*c, dqh[i0*3*c:], 3*c) // dQ
			}
			for j0 := 0; j0 < t; j0 += attnBlock {
				j1 := min(j0+attnBlock, t)
				tileGemm(true, j1-j0, d, t-j0, 1, p[j0*t+j0:], t, doh[j0*c:], c, dvh[j0*3*c:], 3*c)    // dV
				tileGemm(true, j1-j0, d, t-j0, 1, ds[j0*t+j0:], t, q[j0*3*c:], 3*c, dkh[j0*3*c:], 3*c) // dK
			}
		}
	}
	return res, nil
}
