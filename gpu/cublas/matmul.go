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
