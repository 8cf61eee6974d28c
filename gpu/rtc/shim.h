//go:build cgo

// The few NVRTC and CUDA driver API entry points gdist calls, re-declared
// here so that the package builds without CUDA headers, and loaded with
// dlopen at run time. Enumerations are passed as int, handles as pointers.
// Values used (nvrtc.h, cuda.h):
//
//   nvrtcResult:        NVRTC_SUCCESS = 0; others shown by
//                       nvrtcGetErrorString.
//   CUresult:           CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1;
//                       others shown by cuGetErrorName/String.
//   CUdevice_attribute: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
//                       ..._MINOR = 76.
//
// A CUstream is the CUDA runtime's cudaStream_t (NULL: the legacy default
// stream); the runtime's primary context is the driver's context of a
// device, made current by cudaSetDevice and cudaFree(NULL).
#ifndef GDIST_RTC_SHIM_H
#define GDIST_RTC_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* The types of the re-declared prototypes, ABI-identical to the real ones;
   testdata/abicheck.c (TestRealHeaders) defines them as the real types. */
#ifndef GDRT_NVRTC
#define GDRT_NVRTC int         /* nvrtcResult */
#define GDRT_PROG void *       /* nvrtcProgram */
#define GDRT_CURESULT int      /* CUresult */
#define GDRT_DEVICE int        /* CUdevice */
#define GDRT_ATTR int          /* CUdevice_attribute */
#define GDRT_MODULE void *     /* CUmodule */
#define GDRT_FUNCTION void *   /* CUfunction */
#define GDRT_STREAM void *     /* CUstream */
#endif

enum {
	gdrt_NVRTC_SUCCESS = 0,
	gdrt_CUDA_SUCCESS = 0,
	gdrt_CUDA_ERROR_INVALID_VALUE = 1,
	gdrt_CC_MAJOR = 75,
	gdrt_CC_MINOR = 76,
};

/* A driver wrapper's result: a CUresult, or GDRT_CUDA_ERROR plus the
   cudaError_t of the runtime call that made the device current. */
#define GDRT_CUDA_ERROR (1 << 20)

typedef struct gdrt_nvrtc {
	void *handle;
	GDRT_NVRTC (*version)(int *, int *);
	GDRT_NVRTC (*create)(GDRT_PROG *, const char *, const char *, int, const char *const *, const char *const *);
	GDRT_NVRTC (*compile)(GDRT_PROG, int, const char *const *);
	GDRT_NVRTC (*destroy)(GDRT_PROG *);
	GDRT_NVRTC (*logSize)(GDRT_PROG, size_t *);
	GDRT_NVRTC (*log)(GDRT_PROG, char *);
	GDRT_NVRTC (*ptxSize)(GDRT_PROG, size_t *);
	GDRT_NVRTC (*ptx)(GDRT_PROG, char *);
	const char *(*errorString)(GDRT_NVRTC);
	/* optional (NULL when the library lacks them) */
	GDRT_NVRTC (*cubinSize)(GDRT_PROG, size_t *);  /* CUDA 11.1 */
	GDRT_NVRTC (*cubin)(GDRT_PROG, char *);
	GDRT_NVRTC (*numArchs)(int *);                 /* CUDA 11.2 */
	GDRT_NVRTC (*archs)(int *);
} gdrt_nvrtc;

typedef struct gdrt_drv {
	void *handle;
	GDRT_CURESULT (*init)(unsigned int);
	GDRT_CURESULT (*driverGetVersion)(int *);
	GDRT_CURESULT (*deviceGet)(GDRT_DEVICE *, int);
	GDRT_CURESULT (*deviceGetAttribute)(int *, GDRT_ATTR, GDRT_DEVICE);
	GDRT_CURESULT (*moduleLoadData)(GDRT_MODULE *, const void *);
	GDRT_CURESULT (*moduleUnload)(GDRT_MODULE);
	GDRT_CURESULT (*moduleGetFunction)(GDRT_FUNCTION *, GDRT_MODULE, const char *);
	GDRT_CURESULT (*launchKernel)(GDRT_FUNCTION, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
				      unsigned int, unsigned int, GDRT_STREAM, void **, void **);
	GDRT_CURESULT (*getErrorString)(GDRT_CURESULT, const char **);
	GDRT_CURESULT (*getErrorName)(GDRT_CURESULT, const char **);
	/* optional */
	GDRT_CURESULT (*funcGetParamInfo)(GDRT_FUNCTION, size_t, size_t *, size_t *); /* CUDA 12.4 */
	/* from the CUDA runtime gpu/cuda loaded: make a device current */
	int (*setDevice)(int);
	int (*free_)(void *);
} gdrt_drv;

gdrt_nvrtc *gdrt_nvrtc_open(const char *path, char *err, size_t errlen);
int gdrt_nvrtc_version(gdrt_nvrtc *l, int *major, int *minor);
int gdrt_nvrtc_archs(gdrt_nvrtc *l, int *out, int cap);
const char *gdrt_nvrtc_error(gdrt_nvrtc *l, int code);
int gdrt_compile(gdrt_nvrtc *l, const char *src, const char *name, int nopt, const char **opts, int cubin, int *stage,
		 char **log, char **out, size_t *outlen);

gdrt_drv *gdrt_drv_open(const char *path, uintptr_t setDevice, uintptr_t free_, char *err, size_t errlen);
int gdrt_drv_init(gdrt_drv *l, int *version);
const char *gdrt_drv_error(gdrt_drv *l, int code);
const char *gdrt_drv_error_name(gdrt_drv *l, int code);
int gdrt_arch(gdrt_drv *l, int dev, int *major, int *minor);
int gdrt_module_load(gdrt_drv *l, int dev, const void *image, uintptr_t *mod);
int gdrt_function(gdrt_drv *l, int dev, uintptr_t mod, const char *name, uintptr_t *f);
int gdrt_param_info(gdrt_drv *l, int dev, uintptr_t f, size_t idx, size_t *off, size_t *size);
int gdrt_launch(gdrt_drv *l, int dev, uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		unsigned bz, unsigned shmem, uintptr_t stream, void **params);

#endif
