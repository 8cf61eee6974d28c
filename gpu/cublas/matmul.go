package cublas

// MatMul is the product of row-major matrices, our tensors' layout
// ([rows, cols], each row contiguous): C = alpha op(A) op(B) + beta C with
// C [m, n], op(A) [m, k], op(B) [k, n], every matrix dense (no padding).
// With ta, A is stored [k, m] and used transposed; with tb, B is stored
// [n, k]. nn's Linear (weight W [in, out]) is y = x W: MatMul(false,
// false, rows, out, in, 1, x, W, 0, y); its gradients are dW = x^T dy:
// MatMul(true, false, in, out, rows, ...), and dx = dy W^T:
// MatMul(false, true, rows, in, out, ...).
//
// cuBLAS is column-major, and a row-major [r, c] matrix is a column-major
// [c, r] one, so this computes C^T = op(B)^T op(A)^T with Sgemm.
func (h *Handle) MatMul(ta, tb bool, m, n, k int, alpha float32, a, b uintptr, beta float32, c uintptr) error {
	lda, ldb := k, n // the row length of A and B as stored
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	return h.Sgemm(op(tb), op(ta), n, m, k, alpha, b, ld(ldb), a, ld(lda), beta, c, ld(n))
}

func op(t bool) Op {
	if t {
		return Trans
	}
	return NoTrans
}

// MatMulBatched is MatMul over batch products of row-major matrices that
// need not be dense: C_i [m, n] = alpha op(A_i) op(B_i) + beta C_i, with
// lda, ldb and ldc the elements between the starts of two rows of A, B
// and C as stored (A is [m, k] rows of lda, or [k, m] with ta), and the
// matrices of product i at a + i sa, b + i sb, c + i sc (elements; 0
// shares one matrix). One cublasSgemmStridedBatched call. Attention's
// per-head products and a convolution's per-image ones are such batches.
func (h *Handle) MatMulBatched(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa int64,
	b uintptr, ldb int, sb int64, beta float32, c uintptr, ldc int, sc int64, batch int) error {
	return h.SgemmStridedBatched(op(tb), op(ta), n, m, k, alpha, b, ld(ldb), sb, a, ld(lda), sa, beta, c, ld(ldc), sc, batch)
}
