// abicheck.c: compiled by TestRealHeaders against the real cuBLAS headers
// (cublas_api.h, library_types.h). It proves at compile time that shim.h's
// prototypes and values are the real ones: each value the shim or the Go
// code uses, and the type of every function the shim calls (each real
// function is assigned to the shim's pointer field, which must not need a
// conversion: the test compiles with -Werror=incompatible-pointer-types).
// go_values.h, written by the test, holds the Go constants (GO_*). With
// -DGDIST_ABICHECK_SELFTEST one deliberately wrong assignment is added,
// which must fail to compile.
#include <stddef.h>
#include <cublas_v2.h> /* defines CUBLASAPI, includes cublas_api.h */

#include "go_values.h"

#define GDCB_STATUS cublasStatus_t
#define GDCB_HANDLE cublasHandle_t
#define GDCB_OP cublasOperation_t
#define GDCB_MATH cublasMath_t
#define GDCB_DTYPE cudaDataType
#define GDCB_COMPUTE cublasComputeType_t
#define GDCB_ALGO cublasGemmAlgo_t
#define GDCB_STREAM cudaStream_t
#define GDCB_PROP libraryPropertyType
#include "shim.h"

#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a " == " #b)

SAME(sizeof(cublasStatus_t), sizeof(int));
SAME(sizeof(cublasOperation_t), sizeof(int));
SAME(sizeof(cublasMath_t), sizeof(int));
SAME(sizeof(cudaDataType), sizeof(int));
SAME(sizeof(cublasComputeType_t), sizeof(int));
SAME(sizeof(cublasGemmAlgo_t), sizeof(int));
SAME(sizeof(libraryPropertyType), sizeof(int));

SAME(CUBLAS_STATUS_SUCCESS, gdcb_SUCCESS);
SAME(CUBLAS_STATUS_INVALID_VALUE, gdcb_INVALID_VALUE);
SAME(CUBLAS_STATUS_NOT_SUPPORTED, gdcb_NOT_SUPPORTED);
SAME(CUBLAS_OP_N, gdcb_OP_N);
SAME(CUBLAS_OP_T, gdcb_OP_T);
SAME(CUBLAS_DEFAULT_MATH, gdcb_DEFAULT_MATH);
SAME(CUBLAS_PEDANTIC_MATH, gdcb_PEDANTIC_MATH);
SAME(CUBLAS_TF32_TENSOR_OP_MATH, gdcb_TF32_TENSOR_OP_MATH);
SAME(CUDA_R_32F, gdcb_R_32F);
SAME(CUDA_R_16F, gdcb_R_16F);
SAME(CUDA_R_16BF, gdcb_R_16BF);
SAME(CUBLAS_COMPUTE_32F, gdcb_COMPUTE_32F);
SAME(CUBLAS_COMPUTE_32F_PEDANTIC, gdcb_COMPUTE_32F_PEDANTIC);
SAME(CUBLAS_COMPUTE_32F_FAST_16F, gdcb_COMPUTE_32F_FAST_16F);
SAME(CUBLAS_COMPUTE_32F_FAST_16BF, gdcb_COMPUTE_32F_FAST_16BF);
SAME(CUBLAS_COMPUTE_32F_FAST_TF32, gdcb_COMPUTE_32F_FAST_TF32);
SAME(CUBLAS_GEMM_DEFAULT, gdcb_GEMM_DEFAULT);
SAME(MAJOR_VERSION, gdcb_MAJOR_VERSION);
SAME(MINOR_VERSION, gdcb_MINOR_VERSION);
SAME(PATCH_LEVEL, gdcb_PATCH_LEVEL);

/* The Go constants (types.go). */
SAME(CUBLAS_OP_N, GO_NoTrans);
SAME(CUBLAS_OP_T, GO_Trans);
SAME(CUBLAS_DEFAULT_MATH, GO_DefaultMath);
SAME(CUBLAS_PEDANTIC_MATH, GO_PedanticMath);
SAME(CUBLAS_TF32_TENSOR_OP_MATH, GO_TF32);
SAME(CUDA_R_32F, GO_F32);
SAME(CUDA_R_16F, GO_F16);
SAME(CUDA_R_16BF, GO_BF16);
SAME(CUBLAS_COMPUTE_32F, GO_Compute32F);
SAME(CUBLAS_COMPUTE_32F_PEDANTIC, GO_Compute32FPedantic);
SAME(CUBLAS_COMPUTE_32F_FAST_16F, GO_Compute32FFast16F);
SAME(CUBLAS_COMPUTE_32F_FAST_16BF, GO_Compute32FFast16BF);
SAME(CUBLAS_COMPUTE_32F_FAST_TF32, GO_Compute32FFastTF32);
SAME(CUBLAS_STATUS_SUCCESS, GO_StatusSuccess);
SAME(CUBLAS_STATUS_NOT_INITIALIZED, GO_StatusNotInitialized);
SAME(CUBLAS_STATUS_ALLOC_FAILED, GO_StatusAllocFailed);
SAME(CUBLAS_STATUS_INVALID_VALUE, GO_StatusInvalidValue);
SAME(CUBLAS_STATUS_ARCH_MISMATCH, GO_StatusArchMismatch);
SAME(CUBLAS_STATUS_EXECUTION_FAILED, GO_StatusExecutionFailed);
SAME(CUBLAS_STATUS_NOT_SUPPORTED, GO_StatusNotSupported);

void gdist_abicheck(gdcb_lib *l) {
	l->create = cublasCreate_v2;
	l->destroy = cublasDestroy_v2;
	l->setStream = cublasSetStream_v2;
	l->setMathMode = cublasSetMathMode;
	l->sgemm = cublasSgemm_v2;
	l->sgemmStridedBatched = cublasSgemmStridedBatched;
	l->gemmEx = cublasGemmEx;
	l->gemmStridedBatchedEx = cublasGemmStridedBatchedEx;
	l->gemmBatchedEx = cublasGemmBatchedEx;
	l->getProperty = cublasGetProperty;
	l->statusName = cublasGetStatusName;
	l->statusString = cublasGetStatusString;
#ifdef GDIST_ABICHECK_SELFTEST
	l->sgemm = cublasGemmEx; /* must not compile */
#endif
}
