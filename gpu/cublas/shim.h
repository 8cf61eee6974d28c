//go:build cgo

// The few cuBLAS entry points gdist calls, re-declared here so that the
// package builds without CUDA headers, and loaded with dlopen at run time.
// Enumerations are passed as int (the C ABI of the real enums). Values used
// (cublas_api.h, library_types.h):
//
//   cublasStatus_t:      CUBLAS_STATUS_SUCCESS = 0, ..._INVALID_VALUE = 7;
//                        others are shown by name.
//   cublasOperation_t:   CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
//   cublasMath_t:        CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2,
//                        CUBLAS_TF32_TENSOR_OP_MATH = 3.
//   cudaDataType:        CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14.
//   cublasComputeType_t: CUBLAS_COMPUTE_32F = 68, _32F_PEDANTIC = 69,
//                        _32F_FAST_16F = 74, _32F_FAST_16BF = 75,
//                        _32F_FAST_TF32 = 77.
//   cublasGemmAlgo_t:    CUBLAS_GEMM_DEFAULT = -1.
//   libraryPropertyType: MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2.
//
// The exported names are the _v2 ones where cublas_v2.h maps a name to
// one (cublasCreate -> cublasCreate_v2). Alpha and beta are host pointers
// (CUBLAS_POINTER_MODE_HOST, the default).
#ifndef GDIST_CUBLAS_SHIM_H
#define GDIST_CUBLAS_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* The types of the re-declared prototypes, ABI-identical to the real ones;
   testdata/abicheck.c (TestRealHeaders) defines them as the real types. */
#ifndef GDCB_STATUS
#define GDCB_STATUS int     /* cublasStatus_t */
#define GDCB_HANDLE void *  /* cublasHandle_t */
#define GDCB_OP int         /* cublasOperation_t */
#define GDCB_MATH int       /* cublasMath_t */
#define GDCB_DTYPE int      /* cudaDataType */
#define GDCB_COMPUTE int    /* cublasComputeType_t */
#define GDCB_ALGO int       /* cublasGemmAlgo_t */
#define GDCB_STREAM void *  /* cudaStream_t */
#define GDCB_PROP int       /* libraryPropertyType */
#endif

enum {
	gdcb_SUCCESS = 0,
	gdcb_INVALID_VALUE = 7,
	gdcb_NOT_SUPPORTED = 15,
	gdcb_OP_N = 0,
	gdcb_OP_T = 1,
	gdcb_DEFAULT_MATH = 0,
	gdcb_PEDANTIC_MATH = 2,
	gdcb_TF32_TENSOR_OP_MATH = 3,
	gdcb_R_32F = 0,
	gdcb_R_16F = 2,
	gdcb_R_16BF = 14,
	gdcb_COMPUTE_32F = 68,
	gdcb_COMPUTE_32F_PEDANTIC = 69,
	gdcb_COMPUTE_32F_FAST_16F = 74,
	gdcb_COMPUTE_32F_FAST_16BF = 75,
	gdcb_COMPUTE_32F_FAST_TF32 = 77,
	gdcb_GEMM_DEFAULT = -1,
	gdcb_MAJOR_VERSION = 0,
	gdcb_MINOR_VERSION = 1,
	gdcb_PATCH_LEVEL = 2,
};

/* A wrapper's result: a cublasStatus_t, or GDCB_CUDA_ERROR plus the
   cudaError_t of the runtime call that made the device current. */
#define GDCB_CUDA_ERROR (1 << 20)

typedef struct gdcb_lib {
	void *handle;
	GDCB_STATUS (*create)(GDCB_HANDLE *);
	GDCB_STATUS (*destroy)(GDCB_HANDLE);
	GDCB_STATUS (*setStream)(GDCB_HANDLE, GDCB_STREAM);
	GDCB_STATUS (*setMathMode)(GDCB_HANDLE, GDCB_MATH);
	GDCB_STATUS (*sgemm)(GDCB_HANDLE, GDCB_OP, GDCB_OP, int, int, int, const float *, const float *, int,
			     const float *, int, const float *, float *, int);
	GDCB_STATUS (*sgemmStridedBatched)(GDCB_HANDLE, GDCB_OP, GDCB_OP, int, int, int, const float *, const float *, int,
					   long long int, const float *, int, long long int, const float *, float *, int,
					   long long int, int);
	GDCB_STATUS (*gemmEx)(GDCB_HANDLE, GDCB_OP, GDCB_OP, int, int, int, const void *, const void *, GDCB_DTYPE, int,
			      const void *, GDCB_DTYPE, int, const void *, void *, GDCB_DTYPE, int, GDCB_COMPUTE, GDCB_ALGO);
	GDCB_STATUS (*gemmStridedBatchedEx)(GDCB_HANDLE, GDCB_OP, GDCB_OP, int, int, int, const void *, const void *,
					    GDCB_DTYPE, int, long long int, const void *, GDCB_DTYPE, int, long long int,
					    const void *, void *, GDCB_DTYPE, int, long long int, int, GDCB_COMPUTE, GDCB_ALGO);
	/* optional (NULL when the library lacks them) */
	GDCB_STATUS (*gemmBatchedEx)(GDCB_HANDLE, GDCB_OP, GDCB_OP, int, int, int, const void *, const void *const *,
				     GDCB_DTYPE, int, const void *const *, GDCB_DTYPE, int, const void *, void *const *,
				     GDCB_DTYPE, int, int, GDCB_COMPUTE, GDCB_ALGO);
	GDCB_STATUS (*getProperty)(GDCB_PROP, int *);
	const char *(*statusName)(GDCB_STATUS);
	const char *(*statusString)(GDCB_STATUS);
	/* from the CUDA runtime gpu/cuda loaded: make a device current */
	int (*setDevice)(int);
	int (*free_)(void *);
} gdcb_lib;

gdcb_lib *gdcb_open(const char *path, uintptr_t setDevice, uintptr_t free_, char *err, size_t errlen);
int gdcb_version(gdcb_lib *l, int *major, int *minor, int *patch);
const char *gdcb_status_name(gdcb_lib *l, int s);
const char *gdcb_status_string(gdcb_lib *l, int s);
int gdcb_create(gdcb_lib *l, int dev, uintptr_t stream, uintptr_t *out);
int gdcb_destroy(gdcb_lib *l, int dev, uintptr_t h);
int gdcb_set_math(gdcb_lib *l, int dev, uintptr_t h, int mode);
int gdcb_sgemm(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha, uintptr_t a, int lda,
	       uintptr_t b, int ldb, float beta, uintptr_t c, int ldc);
int gdcb_sgemm_strided_batched(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha,
			       uintptr_t a, int lda, long long sa, uintptr_t b, int ldb, long long sb, float beta, uintptr_t c,
			       int ldc, long long sc, int batch);
int gdcb_gemm_ex(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha, uintptr_t a, int at,
		 int lda, uintptr_t b, int bt, int ldb, float beta, uintptr_t c, int ct, int ldc, int compute);
int gdcb_gemm_strided_batched_ex(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha,
				 uintptr_t a, int at, int lda, long long sa, uintptr_t b, int bt, int ldb, long long sb,
				 float beta, uintptr_t c, int ct, int ldc, long long sc, int batch, int compute);
int gdcb_has_gemm_batched_ex(gdcb_lib *l);
int gdcb_gemm_batched_ex(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha, uintptr_t a,
			 int at, int lda, uintptr_t b, int bt, int ldb, float beta, uintptr_t c, int ct, int ldc, int batch,
			 int compute);

#endif
