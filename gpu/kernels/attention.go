package kernels

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cuda"
)

// AttentionGeom is a causal self-attention's sizes (nn's
// CausalSelfAttention{Dim: C, Heads: H} over (N, T, C) input): N
// sequences of T positions, C channels in H heads of D = C / H.
type AttentionGeom struct{ N, T, C, H int }

// Probs is the float32s of the attention probabilities (N H, T, T) that
// AttentionForward keeps for AttentionBackward.
func (g AttentionGeom) Probs() int { return g.N * g.H * g.T * g.T }

// Workspace is the float32s of scratch AttentionForward and
// AttentionBackward need: the queries, keys, values and output by head
// (4 N T C), their gradients (3 N T C), the probabilities' (N H T T).
func (g AttentionGeom) Workspace() int { return 7*g.N*g.T*g.C + g.Probs() }

func (g AttentionGeom) check(op string) error {
	if err := sizeErr(op, "N", g.N, "T", g.T, "C", g.C, "H", g.H); err != nil {
		return err
	}
	if g.N < 1 || g.T < 1 || g.H < 1 || g.C < 1 || g.C%g.H != 0 {
		return fmt.Errorf("kernels: %s: %d heads of a dimension %d over %d x %d positions", op, g.H, g.C, g.N, g.T)
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

// AttentionForward is the core of nn's CausalSelfAttention (its attnOp,
// between the input and output projections): from qkv (N, T, 3C), the
// queries, keys and values side by side as nn's in_proj makes them, out
// (N, T, C) = per sequence and head, P V with P = the causal softmax of
// Q K^T / sqrt(D). The heads are copied into (N H, T, D) matrices in ws,
// the products are cuBLAS batched products over all sequences and heads
// (S with alpha 1/sqrt(D), as nn), the softmax is CausalSoftmax (nn's
// operations); p (g.Probs() float32s) keeps P for AttentionBackward. On
// h's stream.
func AttentionForward(h Products, k *Kernels, out, p, qkv, ws uintptr, g AttentionGeom) error {
	if err := sameDevice(h, k); err != nil {
		return err
	}
	if err := g.check("AttentionForward"); err != nil {
		return err
	}
	s := h.Stream()
	d, ntc, b := g.C/g.H, g.N*g.T*g.C, g.N*g.H
	q, kk, v, o := ws, ws+uintptr(4*ntc), ws+uintptr(8*ntc), ws+uintptr(12*ntc)
	td, tt := int64(g.T*d), int64(g.T*g.T)
	scale := float32(1 / math.Sqrt(float64(d)))
	if err := k.heads(s, q, qkv, g, 3*g.C, 0, 3, true); err != nil { // q, kk, v one after another
		return err
	}
	if err := h.MatMulBatched(false, true, g.T, g.T, d, scale, q, d, td, kk, d, td, 0, p, g.T, tt, b); err != nil {
		return err
	}
	if err := k.CausalSoftmax(s, p, b*g.T, g.T); err != nil {
		return err
	}
	if err := h.MatMulBatched(false, false, g.T, d, g.T, 1, p, g.T, tt, v, d, td, 0, o, d, td, b); err != nil {
		return err
	}
	return k.heads(s, out, o, g, g.C, 0, 1, false)
}

// AttentionBackward is the core's backward, nn's attnGradOp: from dout
// (N, T, C), qkv and p as AttentionForward left them, dqkv (N, T, 3C):
// per sequence and head dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P
// dP)) / sqrt(D) (CausalSoftmaxBackward), dQ = dS K, dK = dS^T Q, each
// product one cuBLAS batched call over all sequences and heads. On h's
// stream.
func AttentionBackward(h Products, k *Kernels, dqkv, dout, qkv, p, ws uintptr, g AttentionGeom) error {
	if err := sameDevice(h, k); err != nil {
		return err
	}
	if err := g.check("AttentionBackward"); err != nil {
		return err
	}
	s := h.Stream()
	d, ntc, b := g.C/g.H, g.N*g.T*g.C, g.N*g.H
	at := func(i int) uintptr { return ws + uintptr(4*i*ntc) }
	q, kk, v, do, dq, dk, dv, dp := at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)
	td, tt := int64(g.T*d), int64(g.T*g.T)
	scale := float32(1 / math.Sqrt(float64(d)))
	// dO and dS are each read by two products in a row: cast once (bf16)
	keep := func(ptr uintptr) error { keepNext(h, ptr); return nil }
	for _, e := range []error{
		k.heads(s, q, qkv, g, 3*g.C, 0, 3, true), // q, kk, v one after another
		k.heads(s, do, dout, g, g.C, 0, 1, true),
		keep(do),
		h.MatMulBatched(true, false, g.T, d, g.T, 1, p, g.T, tt, do, d, td, 0, dv, d, td, b),
		h.MatMulBatched(false, true, g.T, g.T, d, 1, do, d, td, v, d, td, 0, dp, g.T, tt, b),
		k.CausalSoftmaxBackward(s, dp, p, b*g.T, g.T, scale),
		keep(dp),
		h.MatMulBatched(false, false, g.T, d, g.T, 1, dp, g.T, tt, kk, d, td, 0, dq, d, td, b),
		h.MatMulBatched(true, false, g.T, d, g.T, 1, dp, g.T, tt, q, d, td, 0, dk, d, td, b),
		k.heads(s, dqkv, dq, g, 3*g.C, 0, 3, false), // dq, dk, dv one after another
	} {
		if e != nil {
			return e
		}
	}
	return nil
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

// causalIO is what a causal softmax over rows of t moves: in reads of the
// rows' first i+1 entries (about half), every entry written.
func causalIO(rows, t, in int) traffic {
	n := int64(rows) * int64(t)
	return rw(int64(in)*(n+int64(rows))/2, n)
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
	for _, k := range regWidths[name] {
		if n <= 32*k {
			return fmt.Sprintf("%s_r%d", name, k)
		}
	}
	return name
}

// CausalSoftmax turns p, rows of t (row r is position r % t of its
// sequence: (N H, T, T) scores), into the causal softmax of each row,
// in place: row i the softmax of its first i+1 entries, zeros after, with
// nn's operations (max subtracted, nn's float32 exponential, 1/sum times
// each, the sum in Sum32's order): bit for bit nn's causalSoftmax, a
// warp per row.
func (k *Kernels) CausalSoftmax(s *cuda.Stream, p uintptr, rows, t int) error {
	if err := softmaxCheck("CausalSoftmax", rows, t); err != nil || rows == 0 {
		return err
	}
	return k.launch(rowsKernel("gd_causal_softmax", t), s, rowsGrid(rows), causalIO(rows, t, 1), p, int32(rows), int32(t))
}

// CausalSoftmaxBackward turns ds (the gradient of CausalSoftmax's output
// p) into the gradient of its input times scale, in place: (p (ds - sum
// p ds)) scale over each row's first i+1 entries, zeros after; bit for
// bit nn's.
func (k *Kernels) CausalSoftmaxBackward(s *cuda.Stream, ds, p uintptr, rows, t int, scale float32) error {
	if err := softmaxCheck("CausalSoftmaxBackward", rows, t); err != nil || rows == 0 {
		return err
	}
	return k.launch(rowsKernel("gd_causal_softmax_backward", t), s, rowsGrid(rows), causalIO(rows, t, 2), ds, p, int32(rows), int32(t), scale)
}
