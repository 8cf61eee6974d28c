//go:build !cgo || noblas

package nn

// smallGemmOK: without OpenBLAS there are no small-matrix kernels.
func smallGemmOK() bool { return false }

func smallSgemm(bt bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("nn: OpenBLAS's small-matrix kernels without OpenBLAS")
}
