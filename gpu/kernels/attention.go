package kernels

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/gdist/gdist/gpu/cuda"
)

// AttentionGeom is a causal self-attention's sizes (nn's
// CausalSelfAttention{Dim: C, Heads: H} over (N, T, C) input): N
// sequences of T positions, C channels in H heads of D = C / H.
//
// Block is the rows of the block-causal products (BlockSize): 0 chooses
// (the usual), a value above T is T.
type AttentionGeom struct {
	N, T, C, H int
	Block      int
}

// EnvAttentionBlock, where AttentionGeom.Block is 0, sets the rows of the
// block-causal products (GDIST_ATTENTION_BLOCK=1024 at T = 1024 computes
// the whole T x T scores as one block: the products of before the
// blocks, for comparisons on a GPU).
const EnvAttentionBlock = "GDIST_ATTENTION_BLOCK"

// DefaultAttentionBlock is the block's rows where neither Block nor
// $GDIST_ATTENTION_BLOCK sets them and T is longer: 128. A block row i
// computes the scores of its 128 queries against the keys of blocks 0 to
// i, so the products compute (nb + 1) / (2 nb) of the T x T scores (nb =
// T / 128 blocks: 56% at T = 1024, against 100% without blocks) and the
// rest, above the diagonal, is neither computed, written nor read. Why
// 128, with no measurement: a smaller block saves little more (64: 53%)
// for twice the launches (6 nb products a layer, each over all N H
// heads) and products of 64 rows, half cuBLAS's usual 128-row tiles on
// an H100; a larger one saves less (256: 62.5%). Each block product
// still has 128 rows of output a head (128 x 128 scores or more, 128 x D
// of O, dQ, dK, dV) over all N H heads (96 at GPT-2 small's batch 8):
// whole tiles of 128 and 64 rows (cuBLAS's and the tiled kernel's). The
// price: 6 nb products a layer instead of 6 (48 at T = 1024), each a
// launch (benchmarks/NOTES.md). For T <= 128 the block is T: one
// product each, as without blocks.
const DefaultAttentionBlock = 128

// BlockSize is the rows of a block of the block-causal products: Block,
// else $GDIST_ATTENTION_BLOCK, else T for T <= DefaultAttentionBlock and
// DefaultAttentionBlock above; never more than T. (A bad
// $GDIST_ATTENTION_BLOCK is refused by the layers' calls; here it counts
// as unset.)
func (g AttentionGeom) BlockSize() int {
	tb, _ := g.blockSize()
	return tb
}

func (g AttentionGeom) blockSize() (int, error) {
	tb := g.Block
	var err error
	if tb == 0 {
		if v := os.Getenv(EnvAttentionBlock); v != "" {
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 {
				err = fmt.Errorf("kernels: $%s=%q: want a positive number of rows", EnvAttentionBlock, v)
			} else {
				tb = n
			}
		}
	}
	if tb == 0 {
		tb = DefaultAttentionBlock
	}
	return max(min(tb, g.T), 1), err
}

// Scores is the float32s of the (N H, T, T) scores the block-causal
// products compute, and the causal softmax and its backward write: per
// head, each block row's rows times the keys up to the end of its block
// (sum over blocks of rows x ((i+1) Tb or T)): N H T (T + Tb) / 2 where
// Tb divides T. The rest of Probs' storage is neither written nor read.
func (g AttentionGeom) Scores() int {
	return g.N * g.H * lowerBlocks(g.T, g.BlockSize())
}

// lowerBlocks is the entries of a t x t matrix in the blocks of tb rows
// at or left of the diagonal block.
func lowerBlocks(t, tb int) int {
	n := 0
	for i := 0; i < t; i += tb {
		n += min(tb, t-i) * min(i+tb, t)
	}
	return n
}

// Probs is the float32s of the attention probabilities (N H, T, T) that
// AttentionForward keeps for AttentionBackward (of which it writes
// Scores).
func (g AttentionGeom) Probs() int { return g.N * g.H * g.T * g.T }

// Workspace is the float32s of scratch AttentionForward and
// AttentionBackward need: the queries, keys, values and output by head
// (4 N T C), their gradients (3 N T C), the probabilities' (N H T T).
// With the heads in place (AttentionInPlace) InPlaceWorkspace is enough.
func (g AttentionGeom) Workspace() int { return 7*g.N*g.T*g.C + g.Probs() }

// InPlaceWorkspace is the float32s of scratch attention needs with the
// heads in place (AttentionInPlace): the probabilities' gradients (N H T
// T), for AttentionBackward only (AttentionForward reads no workspace
// then).
func (g AttentionGeom) InPlaceWorkspace() int { return g.Probs() }

func (g AttentionGeom) check(op string) error {
	if err := sizeErr(op, "N", g.N, "T", g.T, "C", g.C, "H", g.H); err != nil {
		return err
	}
	if g.N < 1 || g.T < 1 || g.H < 1 || g.C < 1 || g.C%g.H != 0 {
		return fmt.Errorf("kernels: %s: %d heads of a dimension %d over %d x %d positions", op, g.H, g.C, g.N, g.T)
	}
	if g.Block < 0 {
		return fmt.Errorf("kernels: %s: Block %d: want the rows of a block (0 chooses)", op, g.Block)
	}
	if _, err := g.blockSize(); err != nil {
		return fmt.Errorf("%w (%s)", err, op)
	}
	if int64(g.Workspace()) > 1<<31-1 || int64(g.N)*int64(g.H)*int64(g.T)*int64(g.T) > 1<<31-1 {
		return fmt.Errorf("kernels: %s: %+v is too large (split the batch)", op, g)
	}
	return nil
}

// heads copies between (N, T, ld) rows holding secs sections of C
// values from column off (qkv: the queries, keys and values, secs 3) and
// secs (N H, T, D) arrays one after another: one launch.
func (k *Kernels) heads(s *cuda.Stream, dst, src uintptr, g AttentionGeom, ld, off, secs int, toHeads bool) error {
	name, v := "gd_heads", 1
	if aligned4([]uintptr{dst, src}, g.C/g.H, ld, off) {
		name, v = "gd_heads4", 4
	}
	n := int64(secs) * int64(g.N) * int64(g.T) * int64(g.C)
	return k.launch(name, s, rowGrid(g.N*g.T, secs*g.C, v), rw(n, n), dst, src, int32(g.N), int32(g.T), int32(g.H),
		int32(g.C/g.H), int32(ld), int32(off), int32(secs), b32(toHeads))
}

// holder is a Products that can cast a region several products read
// once and serve them all from it (gemm.Engine under bf16 autocast).
type holder interface {
	Hold(ptr uintptr, ld int, stride int64, batch int, widths []int) error
	Release()
}

// hold asks h, if it can, to hold batch matrices stride apart of rows
// ld apart, row r's first widths[r] values, until release.
func hold(h Products, ptr uintptr, ld int, stride int64, batch int, widths []int) error {
	if hh, ok := h.(holder); ok {
		return hh.Hold(ptr, ld, stride, batch, widths)
	}
	return nil
}

func release(h Products) {
	if hh, ok := h.(holder); ok {
		hh.Release()
	}
}

// widths is t rows of w values each.
func widths(t, w int) []int {
	ws := make([]int, t)
	for i := range ws {
		ws[i] = w
	}
	return ws
}

// blockWidths is the values of each row of a t x t matrix that the
// block-causal products read: up to the end of its block of tb rows.
func blockWidths(t, tb int) []int {
	ws := make([]int, t)
	for i := range ws {
		ws[i] = min((i/tb+1)*tb, t)
	}
	return ws
}

// f32 is the address n float32s after p.
func f32(p uintptr, n int) uintptr { return p + uintptr(4*n) }

// AttentionForward is the core of nn's CausalSelfAttention (its attnOp,
// between the input and output projections): from qkv (N, T, 3C), the
// queries, keys and values side by side as nn's in_proj makes them, out
// (N, T, C) = per sequence and head, P V with P = the causal softmax of
// Q K^T / sqrt(D). Where h batches by pointers (AttentionInPlace: a
// gemm.Engine through a cuBLAS with cublasGemmBatchedEx) the products
// read the heads from qkv and write out in place and ws is not used;
// otherwise the heads are copied into (N H, T, D) matrices in ws (and
// out's back). The products are block-causal: for each block i of g.BlockSize() rows,
// S_i = Q_i K_{0..i}^T (alpha 1/sqrt(D), as nn) and O_i = P_i V_{0..i},
// each one batched product over all sequences and heads with rows T
// apart in p (p's layout is (N H, T, T) as without blocks); the
// softmax, one launch, is CausalSoftmax's (nn's operations) over each
// row's keys, zeros up to its block's end. p (g.Probs() float32s) keeps
// P for AttentionBackward; the blocks above the diagonal are neither
// written nor read. Under bf16 autocast Q, K and V are cast once (held,
// gemm.Engine.Hold) and each block of P for its one product. On h's
// stream.
func AttentionForward(h Products, k *Kernels, out, p, qkv, ws uintptr, g AttentionGeom) error {
	z, err := g.dims(h, k, "AttentionForward")
	if err != nil {
		return err
	}
	if ip, ok := inPlaceOf(h); ok {
		return attentionForward2(ip, h, k, out, p, qkv, g, z)
	}
	s, d, b, T, tb, td, tt, scale := h.Stream(), z.d, z.b, g.T, z.tb, z.td, z.tt, z.scale
	q, kk, v, o := ws, f32(ws, z.ntc), f32(ws, 2*z.ntc), f32(ws, 3*z.ntc)
	if err := k.heads(s, q, qkv, g, 3*g.C, 0, 3, true); err != nil { // q, kk, v one after another
		return err
	}
	if err := hold(h, q, d, td, 3*b, widths(T, d)); err != nil { // read by every block row
		return err
	}
	defer release(h)
	for i := 0; i < T; i += tb { // block row i: rows [i, i+ri), keys [0, ci)
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := h.MatMulBatched(false, true, ri, ci, d, scale, f32(q, i*d), d, td, kk, d, td, 0, f32(p, i*T), T, tt, b); err != nil {
			return err
		}
	}
	if err := k.causalSoftmax(s, p, b*T, T, tb); err != nil {
		return err
	}
	for i := 0; i < T; i += tb {
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := h.MatMulBatched(false, false, ri, d, ci, 1, f32(p, i*T), T, tt, v, d, td, 0, f32(o, i*d), d, td, b); err != nil {
			return err
		}
	}
	release(h)
	return k.heads(s, out, o, g, g.C, 0, 1, false)
}

// AttentionBackward is the core's backward, nn's attnGradOp: from dout
// (N, T, C), qkv and p as AttentionForward left them, dqkv (N, T, 3C):
// per sequence and head dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P
// dP)) / sqrt(D) (CausalSoftmaxBackward's operations), dQ = dS K, dK =
// dS^T Q, block-causal as AttentionForward: dP_i = dO_i V_{0..i}^T and
// dQ_i = dS_i K_{0..i} by block rows, dV_j = P_{j..,j}^T dO_{j..} and
// dK_j = dS_{j..,j}^T Q_{j..} by block columns (the blocks at and below
// the diagonal), each one batched product over all sequences and heads
// (the heads in place where AttentionInPlace(h), as AttentionForward,
// the score gradients at ws: g.InPlaceWorkspace() float32s of it are
// enough; else at ws + 7 N T C, g.Workspace()). Under bf16 autocast
// Q, K, V and dO are cast once (held: qkv and dout in place), dS's blocks
// once for both of their products, each block column of P for its
// product. On h's stream.
func AttentionBackward(h Products, k *Kernels, dqkv, dout, qkv, p, ws uintptr, g AttentionGeom) error {
	z, err := g.dims(h, k, "AttentionBackward")
	if err != nil {
		return err
	}
	if ip, ok := inPlaceOf(h); ok {
		return attentionBackward2(ip, h, k, dqkv, dout, qkv, p, ws, g, z)
	}
	s, d, b, T, tb, td, tt, scale := h.Stream(), z.d, z.b, g.T, z.tb, z.td, z.tt, z.scale
	at := func(i int) uintptr { return f32(ws, i*z.ntc) }
	q, kk, v, do, dq, dk, dv, dp := at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)
	if err := k.heads(s, q, qkv, g, 3*g.C, 0, 3, true); err != nil { // q, kk, v one after another
		return err
	}
	if err := k.heads(s, do, dout, g, g.C, 0, 1, true); err != nil {
		return err
	}
	if err := hold(h, q, d, td, 4*b, widths(T, d)); err != nil { // q, kk, v, do
		return err
	}
	defer release(h)
	for j := 0; j < T; j += tb { // block column j: keys [j, j+cj), queries [j, T)
		cj := min(tb, T-j)
		if err := h.MatMulBatched(true, false, cj, d, T-j, 1, f32(p, j*T+j), T, tt, f32(do, j*d), d, td, 0, f32(dv, j*d), d, td, b); err != nil {
			return err
		}
	}
	for i := 0; i < T; i += tb {
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := h.MatMulBatched(false, true, ri, ci, d, 1, f32(do, i*d), d, td, v, d, td, 0, f32(dp, i*T), T, tt, b); err != nil {
			return err
		}
	}
	if err := k.causalSoftmaxBackward(s, dp, p, b*T, T, tb, scale); err != nil {
		return err
	}
	if err := hold(h, dp, T, tt, b, blockWidths(T, tb)); err != nil { // dS: its blocks read twice
		return err
	}
	for i := 0; i < T; i += tb {
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := h.MatMulBatched(false, false, ri, d, ci, 1, f32(dp, i*T), T, tt, kk, d, td, 0, f32(dq, i*d), d, td, b); err != nil {
			return err
		}
	}
	for j := 0; j < T; j += tb {
		cj := min(tb, T-j)
		if err := h.MatMulBatched(true, false, cj, d, T-j, 1, f32(dp, j*T+j), T, tt, f32(q, j*d), d, td, 0, f32(dk, j*d), d, td, b); err != nil {
			return err
		}
	}
	release(h)
	return k.heads(s, dqkv, dq, g, 3*g.C, 0, 3, false) // dq, dk, dv one after another
}

// attnDims are the sizes both passes of attention use: a head's width
// d, the (N H) matrices b, the values of one of the heads' copies ntc
// (N T C), the block size tb, a matrix's stride in the heads' copies td
// (T d) and in p tt (T T), and the scores' scale 1/sqrt(d).
type attnDims struct {
	d, b, ntc, tb int
	td, tt        int64
	scale         float32
}

// dims checks op's arguments (h and k of one device, g) and gives its
// sizes.
func (g AttentionGeom) dims(h Products, k *Kernels, op string) (attnDims, error) {
	if err := sameDevice(h, k); err != nil {
		return attnDims{}, err
	}
	if err := g.check(op); err != nil {
		return attnDims{}, err
	}
	if err := headsEnv(op); err != nil {
		return attnDims{}, err
	}
	d := g.C / g.H
	return attnDims{d: d, b: g.N * g.H, ntc: g.N * g.T * g.C, tb: g.BlockSize(),
		td: int64(g.T * d), tt: int64(g.T * g.T), scale: float32(1 / math.Sqrt(float64(d)))}, nil
}

func softmaxCheck(op string, rows, t int) error {
	if err := sizeErr(op, "rows", rows, "T", t); err != nil {
		return err
	}
	if t < 1 || int64(rows)*int64(t) > 1<<40 {
		return fmt.Errorf("kernels: %s of %d rows of %d", op, rows, t)
	}
	return nil
}

// causalIO is what a causal softmax over rows of t, blocks of tb, moves:
// in reads of the rows' first i+1 entries, each row written up to its
// block's end.
func causalIO(rows, t, tb, in int) traffic {
	full, rem := int64(rows/t), rows%t
	r := full * int64(t) * int64(t+1) / 2
	w := full * int64(lowerBlocks(t, tb))
	for i := 0; i < rem; i++ {
		r += int64(i + 1)
		w += int64(min((i/tb+1)*tb, t))
	}
	return rw(int64(in)*r, w)
}

// rowsInRegisters is whether the row kernels (the causal softmax, layer
// norm) keep rows of up to 1024 in registers (tests turn it off to
// compare with the row-in-memory kernels).
var rowsInRegisters = true

// regWidths are the register widths the row kernels are instantiated
// for: K values a lane, rows of up to 32 K.
var regWidths = map[string][]int{
	"gd_causal_softmax": {2, 4, 8, 16, 32}, "gd_causal_softmax_backward": {2, 4, 8, 16, 32},
	"gd_layernorm": {2, 4, 8, 16, 24, 32}, "gd_layernorm_backward": {2, 4, 8, 16, 24, 32},
}

// rowsKernel is a row kernel's name (name: its base name) for rows of n:
// the rows in registers, 32 K values a warp, for n <= 1024.
func rowsKernel(name string, n int) string {
	if !rowsInRegisters {
		return name
	}
	for i, k := range regWidths[name] {
		if n <= 32*k {
			return regNames[name][i]
		}
	}
	return name
}

// regNames are the names of regWidths' instantiations (name_rK), made
// once rather than at each launch.
var regNames = func() map[string][]string {
	m := map[string][]string{}
	for name, ks := range regWidths {
		for _, k := range ks {
			m[name] = append(m[name], fmt.Sprintf("%s_r%d", name, k))
		}
	}
	return m
}()

// CausalSoftmax turns p, rows of t (row r is position r % t of its
// sequence: (N H, T, T) scores), into the causal softmax of each row,
// in place: row i the softmax of its first i+1 entries, zeros after, with
// nn's operations (max subtracted, nn's float32 exponential, 1/sum times
// each, the sum in Sum32's order): bit for bit nn's causalSoftmax, a
// warp per row.
func (k *Kernels) CausalSoftmax(s *cuda.Stream, p uintptr, rows, t int) error {
	return k.causalSoftmax(s, p, rows, t, t)
}

// causalSoftmax is CausalSoftmax with each row written only up to the end
// of its block of tb rows (the block-causal products' part; tb >= t: the
// whole row); nothing beyond is read or written.
func (k *Kernels) causalSoftmax(s *cuda.Stream, p uintptr, rows, t, tb int) error {
	if err := softmaxCheck("CausalSoftmax", rows, t); err != nil || rows == 0 {
		return err
	}
	tb = max(min(tb, t), 1)
	return k.launch(rowsKernel("gd_causal_softmax", t), s, rowsGrid(rows), causalIO(rows, t, tb, 1), p, int32(rows), int32(t), int32(tb))
}

// CausalSoftmaxBackward turns ds (the gradient of CausalSoftmax's output
// p) into the gradient of its input times scale, in place: (p (ds - sum
// p ds)) scale over each row's first i+1 entries, zeros after; bit for
// bit nn's.
func (k *Kernels) CausalSoftmaxBackward(s *cuda.Stream, ds, p uintptr, rows, t int, scale float32) error {
	return k.causalSoftmaxBackward(s, ds, p, rows, t, t, scale)
}

// causalSoftmaxBackward is CausalSoftmaxBackward with each row written
// only up to the end of its block of tb rows.
func (k *Kernels) causalSoftmaxBackward(s *cuda.Stream, ds, p uintptr, rows, t, tb int, scale float32) error {
	if err := softmaxCheck("CausalSoftmaxBackward", rows, t); err != nil || rows == 0 {
		return err
	}
	tb = max(min(tb, t), 1)
	return k.launch(rowsKernel("gd_causal_softmax_backward", t), s, rowsGrid(rows), causalIO(rows, t, tb, 2), ds, p, int32(rows), int32(t), int32(tb), scale)
}
