//go:build cgo

// Loader and thin wrappers over cuBLAS (see shim.h). Every wrapper first
// makes the handle's device current on the calling thread, through the CUDA
// runtime that gpu/cuda loaded: cudaSetDevice, then cudaFree(NULL) (with
// CUDA 11 cudaSetDevice alone makes no context current, and cuBLAS works in
// the current context). A cgo call runs on one OS thread from start to end,
// so the pair is atomic with respect to the goroutine scheduler.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "dl.h"
#include "shim.h"

gdcb_lib *gdcb_open(const char *path, uintptr_t setDevice, uintptr_t free_, char *err, size_t errlen) {
	gdcb_lib *l = gd_dlopen(path, sizeof *l, err, errlen);
	if (!l) return NULL;
#define REQ(field, name) GD_REQ(l, path, err, errlen, field, name)
#define OPT(field, name) GD_OPT(l, field, name)
	REQ(create, "cublasCreate_v2");
	REQ(destroy, "cublasDestroy_v2");
	REQ(setStream, "cublasSetStream_v2");
	REQ(setMathMode, "cublasSetMathMode");
	REQ(sgemm, "cublasSgemm_v2");
	REQ(sgemmStridedBatched, "cublasSgemmStridedBatched");
	REQ(gemmEx, "cublasGemmEx");
	REQ(gemmStridedBatchedEx, "cublasGemmStridedBatchedEx");
	OPT(gemmBatchedEx, "cublasGemmBatchedEx");
	OPT(getProperty, "cublasGetProperty");
	OPT(statusName, "cublasGetStatusName");
	OPT(statusString, "cublasGetStatusString");
#undef REQ
#undef OPT
	*(void **)&l->setDevice = (void *)setDevice;
	*(void **)&l->free_ = (void *)free_;
	return l;
}

int gdcb_version(gdcb_lib *l, int *major, int *minor, int *patch) {
	*major = *minor = *patch = 0;
	if (!l->getProperty) return 0;
	int r = l->getProperty(gdcb_MAJOR_VERSION, major);
	if (!r) r = l->getProperty(gdcb_MINOR_VERSION, minor);
	if (!r) r = l->getProperty(gdcb_PATCH_LEVEL, patch);
	return r;
}

const char *gdcb_status_name(gdcb_lib *l, int s) {
	const char *n = l->statusName ? l->statusName(s) : NULL;
	return n ? n : "";
}

const char *gdcb_status_string(gdcb_lib *l, int s) {
	const char *n = l->statusString ? l->statusString(s) : NULL;
	return n ? n : "";
}

static int use_device(gdcb_lib *l, int dev) {
	int e = l->setDevice(dev);
	if (!e) e = l->free_(NULL);
	return e ? GDCB_CUDA_ERROR + e : 0;
}

int gdcb_create(gdcb_lib *l, int dev, uintptr_t stream, uintptr_t *out) {
	*out = 0;
	int r = use_device(l, dev);
	if (r) return r;
	void *h = NULL;
	if ((r = l->create(&h))) return r;
	if ((r = l->setStream(h, (void *)stream))) {
		l->destroy(h);
		return r;
	}
	*out = (uintptr_t)h;
	return 0;
}

int gdcb_destroy(gdcb_lib *l, int dev, uintptr_t h) {
	int r = use_device(l, dev);
	return r ? r : l->destroy((void *)h);
}

int gdcb_set_math(gdcb_lib *l, int dev, uintptr_t h, int mode) {
	int r = use_device(l, dev);
	return r ? r : l->setMathMode((void *)h, mode);
}

int gdcb_sgemm(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha, uintptr_t a, int lda,
	       uintptr_t b, int ldb, float beta, uintptr_t c, int ldc) {
	int r = use_device(l, dev);
	if (r) return r;
	return l->sgemm((void *)h, ta, tb, m, n, k, &alpha, (const float *)a, lda, (const float *)b, ldb, &beta, (float *)c, ldc);
}

int gdcb_sgemm_strided_batched(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha,
			       uintptr_t a, int lda, long long sa, uintptr_t b, int ldb, long long sb, float beta, uintptr_t c,
			       int ldc, long long sc, int batch) {
	int r = use_device(l, dev);
	if (r) return r;
	return l->sgemmStridedBatched((void *)h, ta, tb, m, n, k, &alpha, (const float *)a, lda, sa, (const float *)b, ldb,
				      sb, &beta, (float *)c, ldc, sc, batch);
}

int gdcb_gemm_ex(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha, uintptr_t a, int at,
		 int lda, uintptr_t b, int bt, int ldb, float beta, uintptr_t c, int ct, int ldc, int compute) {
	int r = use_device(l, dev);
	if (r) return r;
	return l->gemmEx((void *)h, ta, tb, m, n, k, &alpha, (const void *)a, at, lda, (const void *)b, bt, ldb, &beta,
			 (void *)c, ct, ldc, compute, gdcb_GEMM_DEFAULT);
}

int gdcb_gemm_strided_batched_ex(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha,
				 uintptr_t a, int at, int lda, long long sa, uintptr_t b, int bt, int ldb, long long sb,
				 float beta, uintptr_t c, int ct, int ldc, long long sc, int batch, int compute) {
	int r = use_device(l, dev);
	if (r) return r;
	return l->gemmStridedBatchedEx((void *)h, ta, tb, m, n, k, &alpha, (const void *)a, at, lda, sa, (const void *)b, bt,
				       ldb, sb, &beta, (void *)c, ct, ldc, sc, batch, compute, gdcb_GEMM_DEFAULT);
}

int gdcb_has_gemm_batched_ex(gdcb_lib *l) { return l->gemmBatchedEx != NULL; }

int gdcb_gemm_batched_ex(gdcb_lib *l, int dev, uintptr_t h, int ta, int tb, int m, int n, int k, float alpha, uintptr_t a,
			 int at, int lda, uintptr_t b, int bt, int ldb, float beta, uintptr_t c, int ct, int ldc, int batch,
			 int compute) {
	if (!l->gemmBatchedEx) return gdcb_NOT_SUPPORTED;
	int r = use_device(l, dev);
	if (r) return r;
	return l->gemmBatchedEx((void *)h, ta, tb, m, n, k, &alpha, (const void *const *)a, at, lda, (const void *const *)b,
				bt, ldb, &beta, (void *const *)c, ct, ldc, batch, compute, gdcb_GEMM_DEFAULT);
}
