//go:build cgo && !noblas

package nn

/*
#cgo LDFLAGS: -lopenblas -ldl
#define _GNU_SOURCE
#include <dlfcn.h>

typedef long gdBL;
// OpenBLAS's small-matrix kernels, column-major: C = alpha op(A) op(B) (+ beta C).
typedef int (*gdSmall)(gdBL, gdBL, gdBL, float *, gdBL, float, float *, gdBL, float, float *, gdBL);
typedef int (*gdSmallB0)(gdBL, gdBL, gdBL, float *, gdBL, float, float *, gdBL, float *, gdBL);

static gdSmall gdNN, gdTN;
static gdSmallB0 gdNNB0, gdTNB0;

static int gdSmallInit(void) {
	gdNN = (gdSmall)dlsym(RTLD_DEFAULT, "sgemm_small_kernel_nn_SKYLAKEX");
	gdTN = (gdSmall)dlsym(RTLD_DEFAULT, "sgemm_small_kernel_tn_SKYLAKEX");
	gdNNB0 = (gdSmallB0)dlsym(RTLD_DEFAULT, "sgemm_small_kernel_b0_nn_SKYLAKEX");
	gdTNB0 = (gdSmallB0)dlsym(RTLD_DEFAULT, "sgemm_small_kernel_b0_tn_SKYLAKEX");
	return gdNN && gdTN && gdNNB0 && gdTNB0;
}

// gdSgemm is row-major C (m x n) = alpha A op(B) + beta C, op(B) = B
// (k x n) or, with bt, B^T (B n x k): column-major C^T = op(B)^T A^T,
// which is the "nn" kernel (bt: "tn") with the operands swapped, as
// OpenBLAS's cblas_sgemm calls it.
static void gdSgemm(int bt, gdBL m, gdBL n, gdBL k, float alpha, float *a, gdBL lda, float *b, gdBL ldb, float beta, float *c, gdBL ldc) {
	if (beta == 0) {
		(bt ? gdTNB0 : gdNNB0)(n, m, k, b, ldb, alpha, a, lda, c, ldc);
	} else {
		(bt ? gdTN : gdNN)(n, m, k, b, ldb, alpha, a, lda, beta, c, ldc);
	}
}
*/
import "C"

import (
	"os"
	"sync"
	"unsafe"

	"github.com/gdist/gdist/internal/vecmath"
)

// smallGemmOK says whether convBLAS uses OpenBLAS's AVX-512 small-matrix
// kernels: the active vecmath kernels are avx512 (the CPU runs AVX-512,
// GDIST_KERNELS does not cap it lower), GDIST_CONV_GEMM is not "blas"
// (which keeps blas32, for comparisons; another value the forward ops
// refuse, convGemmCheck, and this panics on as a last resort:
// convGemmEnv), and the OpenBLAS linked has them. Looked up at the first
// convolution (importing nn does nothing).
var smallGemmOK = sync.OnceValue(func() bool {
	small, err := convGemmEnv(os.Getenv("GDIST_CONV_GEMM"))
	if err != nil {
		panic(err)
	}
	return small && vecmath.KernelSet() == "avx512" && C.gdSmallInit() != 0
})

// smallSgemm runs the kernel; the arguments are checked (smallGemm).
func smallSgemm(bt bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	var t C.int
	if bt {
		t = 1
	}
	C.gdSgemm(t, C.gdBL(m), C.gdBL(n), C.gdBL(k), C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.gdBL(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.gdBL(ldb), C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.gdBL(ldc))
}
