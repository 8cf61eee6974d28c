package nn

import (
	"fmt"
	"os"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// The convolutions' matrix products (im2col's and Winograd's) are small:
// 64 x 98 x 32 for a Winograd chunk of the cnn, 32 x 784 x 9 for its
// first layer. OpenBLAS (0.3.21, Debian's DYNAMIC_ARCH build) runs its
// Haswell kernels on CPUs it does not know (AMD Zen 5 here): AVX2, with
// packing, at 40-50% of what the core does with AVX-512 on such sizes.
// Its builds carry the AVX-512 small-matrix kernels of its SkylakeX
// target (sgemm_small_kernel_{nn,tn}_SKYLAKEX and their beta = 0 forms:
// no packing, one call per product), which it uses itself where it knows
// the CPU. convBLAS finds them at run time (dlsym: a build without them
// keeps blas32) and uses them, where the CPU runs AVX-512 and
// vecmath's kernel set is avx512 (GDIST_KERNELS caps both), for the
// products C = alpha A B + beta C and C = alpha A B^T + beta C
// (row-major); any other goes to blas32. Measured on one Zen 5 core, best
// of 15 (us, OpenBLAS's Haswell path / the small kernels): 64x98x32 3.79 /
// 1.74, 32x98x64 3.94 / 1.68, Winograd's filter gradient 64x32 over 98
// tiles 4.05 / 2.76, 32x784x9 5.01 / 2.20, 32x9 over 784 8.97 / 2.81.
// Their sums run in another order than the Haswell kernels': results
// agree to float32 rounding (TestConvGemm), not bit for bit; only the
// convolutions use them (Linear and the rest keep blas32, so the mlp's
// results are unchanged).

// convGemmEnv reads GDIST_CONV_GEMM's value: unset (or empty) lets
// convBLAS use the small-matrix kernels where they run, "blas" keeps
// blas32 (for comparisons); any other value is refused, naming it, rather
// than taken for the default.
func convGemmEnv(v string) (small bool, err error) {
	switch v {
	case "":
		return true, nil
	case "blas":
		return false, nil
	}
	return false, fmt.Errorf("nn: GDIST_CONV_GEMM=%q: want \"blas\" (the convolutions on OpenBLAS's sgemm) or unset (on its AVX-512 small-matrix kernels where they run)", v)
}

// convGemmCheck is convGemmEnv's error for $GDIST_CONV_GEMM, which the
// convolutions' forward ops return before any product (smallGemmOK, which
// takes the value once, panics on it as a last resort).
func convGemmCheck() error {
	_, err := convGemmEnv(os.Getenv("GDIST_CONV_GEMM"))
	return err
}

// sgemmer is the part of blas32's implementation the convolutions use.
type sgemmer interface {
	Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

// convBLAS is the convolutions' sgemm: the small kernels where they run
// (smallGemmOK), blas32 otherwise.
func convBLAS() sgemmer {
	if smallGemmOK() {
		return smallGemm{}
	}
	return blas32.Implementation()
}

// smallGemm is blas32's Sgemm with the NoTrans x NoTrans and NoTrans x
// Trans products on OpenBLAS's small-matrix kernels. They have no cache
// blocking, yet the NoTrans x NoTrans one still beats the Haswell path
// at 512x3136x512 (12.8 against 21.3 ms); the other loses from about
// 256x256x3136 (3.8 against 3.5 ms) and goes to blas32 above smallNTMax
// multiply-adds.
type smallGemm struct{}

// smallNTMax is the largest m*n*k of a NoTrans x Trans product on the
// small kernel (128x576x196, 14.4 M: 189 against 247 us).
const smallNTMax = 1 << 24

func (smallGemm) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if tA != blas.NoTrans || (tB != blas.NoTrans && tB != blas.Trans) || m <= 0 || n <= 0 || k <= 0 ||
		tB == blas.Trans && m*n*k > smallNTMax {
		blas32.Implementation().Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	// Row-major C (m x n) = A (m x k) op(B): B is k x n (NoTrans) or
	// n x k (Trans) with leading dimension ldb.
	bRows, bCols := k, n
	if tB == blas.Trans {
		bRows, bCols = n, k
	}
	if lda < max(1, k) || ldb < max(1, bCols) || ldc < max(1, n) ||
		len(a) < (m-1)*lda+k || len(b) < (bRows-1)*ldb+bCols || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("nn: sgemm %dx%dx%d: lda %d ldb %d ldc %d for %d, %d, %d values", m, n, k, lda, ldb, ldc, len(a), len(b), len(c)))
	}
	smallSgemm(tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
