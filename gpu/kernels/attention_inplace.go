package kernels

import (
	"fmt"
	"os"

	"github.com/gdist/gdist/gpu/gemm"
)

// EnvAttentionHeads set to "copy" makes attention copy the heads into
// (N H, T, D) matrices and back (the path of before the in-place
// products, and the one without cublasGemmBatchedEx), for comparisons
// on a GPU; "" or "inplace" is the default. Another value is refused by
// AttentionForward and AttentionBackward.
const EnvAttentionHeads = "GDIST_ATTENTION_HEADS"

// headsEnv checks $GDIST_ATTENTION_HEADS.
func headsEnv(op string) error {
	switch v := os.Getenv(EnvAttentionHeads); v {
	case "", "inplace", "copy":
		return nil
	default:
		return fmt.Errorf("kernels: %s: $%s=%q: want inplace (the default) or copy", op, EnvAttentionHeads, v)
	}
}

// inPlace is a Products that computes two-level batches as one product
// (gemm.Engine through a cuBLAS with cublasGemmBatchedEx): attention's
// products then read and write the heads where they are.
type inPlace interface {
	PointerBatches() bool
	MatMulBatched2(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa gemm.Strides2,
		b uintptr, ldb int, sb gemm.Strides2, beta float32, c uintptr, ldc int, sc gemm.Strides2, outer, inner int) error
}

// inPlaceOf is h as an inPlace, where attention uses the in-place
// products: h batches by pointers and $GDIST_ATTENTION_HEADS is not
// "copy".
func inPlaceOf(h Products) (inPlace, bool) {
	ip, ok := h.(inPlace)
	if !ok || !ip.PointerBatches() || os.Getenv(EnvAttentionHeads) == "copy" {
		return nil, false
	}
	return ip, true
}

// AttentionInPlace reports whether attention's products through h read
// the heads in place (no copies; see AttentionForward).
func AttentionInPlace(h Products) bool {
	_, ok := inPlaceOf(h)
	return ok
}

// attnStrides are where the heads are, as two-level batches over N
// sequences (outer) and H heads (inner): of the (N T, 3C) rows of qkv
// and dqkv, of the (N T, C) rows of out and dout, and of p (N H, T, T).
func (g AttentionGeom) attnStrides(z attnDims) (qkv, rows, p gemm.Strides2) {
	d := int64(z.d)
	return gemm.Strides2{Outer: int64(g.T) * 3 * int64(g.C), Inner: d}, gemm.Strides2{Outer: int64(g.T) * int64(g.C), Inner: d},
		gemm.Strides2{Outer: int64(g.H) * z.tt, Inner: z.tt}
}

// attentionForward2 is AttentionForward with the heads read from qkv and
// written into out in place: the same block products (each one product
// over all N H heads) with no copies; under bf16 qkv held (Q, K and V:
// the values the copies held).
func attentionForward2(ip inPlace, h Products, k *Kernels, out, p, qkv uintptr, g AttentionGeom, z attnDims) error {
	d, T, C, tb, scale := z.d, g.T, g.C, z.tb, z.scale
	sq, so, sp := g.attnStrides(z)
	q, kk, v := qkv, f32(qkv, C), f32(qkv, 2*C)
	if err := hold(h, qkv, 3*C, sq.Outer, g.N, widths(T, 3*C)); err != nil {
		return err
	}
	defer release(h)
	for i := 0; i < T; i += tb {
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := ip.MatMulBatched2(false, true, ri, ci, d, scale, f32(q, i*3*C), 3*C, sq, kk, 3*C, sq, 0, f32(p, i*T), T, sp, g.N, g.H); err != nil {
			return err
		}
	}
	if err := k.causalSoftmax(h.Stream(), p, z.b*T, T, tb); err != nil {
		return err
	}
	for i := 0; i < T; i += tb {
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := ip.MatMulBatched2(false, false, ri, d, ci, 1, f32(p, i*T), T, sp, v, 3*C, sq, 0, f32(out, i*C), C, so, g.N, g.H); err != nil {
			return err
		}
	}
	return nil
}

// attentionBackward2 is AttentionBackward with the heads read from qkv
// and dout and written into dqkv in place; dp (the score gradients, N H
// T T) is where the copy path keeps them in the workspace. Under bf16
// qkv and dout are held (the values the copies held) and dS as there.
func attentionBackward2(ip inPlace, h Products, k *Kernels, dqkv, dout, qkv, p, dp uintptr, g AttentionGeom, z attnDims) error {
	d, T, C, tb, scale := z.d, g.T, g.C, z.tb, z.scale
	sq, so, sp := g.attnStrides(z)
	q, kk, v := qkv, f32(qkv, C), f32(qkv, 2*C)
	dq, dk, dv := dqkv, f32(dqkv, C), f32(dqkv, 2*C)
	if err := hold(h, qkv, 3*C, sq.Outer, g.N, widths(T, 3*C)); err != nil {
		return err
	}
	defer release(h)
	if err := hold(h, dout, C, so.Outer, g.N, widths(T, C)); err != nil {
		return err
	}
	for j := 0; j < T; j += tb { // block column j: keys [j, j+cj), queries [j, T)
		cj := min(tb, T-j)
		if err := ip.MatMulBatched2(true, false, cj, d, T-j, 1, f32(p, j*T+j), T, sp, f32(dout, j*C), C, so, 0, f32(dv, j*3*C), 3*C, sq, g.N, g.H); err != nil {
			return err
		}
	}
	for i := 0; i < T; i += tb {
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := ip.MatMulBatched2(false, true, ri, ci, d, 1, f32(dout, i*C), C, so, v, 3*C, sq, 0, f32(dp, i*T), T, sp, g.N, g.H); err != nil {
			return err
		}
	}
	if err := k.causalSoftmaxBackward(h.Stream(), dp, p, z.b*T, T, tb, scale); err != nil {
		return err
	}
	if err := hold(h, dp, T, z.tt, z.b, blockWidths(T, tb)); err != nil { // dS: its blocks read twice
		return err
	}
	for i := 0; i < T; i += tb {
		ri, ci := min(tb, T-i), min(i+tb, T)
		if err := ip.MatMulBatched2(false, false, ri, d, ci, 1, f32(dp, i*T), T, sp, kk, 3*C, sq, 0, f32(dq, i*3*C), 3*C, sq, g.N, g.H); err != nil {
			return err
		}
	}
	for j := 0; j < T; j += tb {
		cj := min(tb, T-j)
		if err := ip.MatMulBatched2(true, false, cj, d, T-j, 1, f32(dp, j*T+j), T, sp, f32(q, j*3*C), 3*C, sq, 0, f32(dk, j*3*C), 3*C, sq, g.N, g.H); err != nil {
			return err
		}
	}
	return nil
}
