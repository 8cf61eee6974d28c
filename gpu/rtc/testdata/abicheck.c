// abicheck.c: compiled by TestRealHeaders against the real nvrtc.h and
// cuda.h. It proves at compile time that shim.h's prototypes and values
// are the real ones: each value the shim uses, and the type of every
// function the shim calls (each real function is assigned to the shim's
// pointer field, which must not need a conversion: the test compiles with
// -Werror=incompatible-pointer-types). With -DGDIST_ABICHECK_SELFTEST one
// deliberately wrong assignment is added, which must fail to compile.
#include <stddef.h>
#include <cuda.h>
#include <nvrtc.h>

#include "go_values.h"

#define GDRT_NVRTC nvrtcResult
#define GDRT_PROG nvrtcProgram
#define GDRT_CURESULT CUresult
#define GDRT_DEVICE CUdevice
#define GDRT_ATTR CUdevice_attribute
#define GDRT_MODULE CUmodule
#define GDRT_FUNCTION CUfunction
#define GDRT_STREAM CUstream
#include "shim.h"

#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a " == " #b)

SAME(sizeof(nvrtcResult), sizeof(int));
SAME(sizeof(CUresult), sizeof(int));
SAME(sizeof(CUdevice), sizeof(int));
SAME(sizeof(CUdevice_attribute), sizeof(int));
SAME(sizeof(nvrtcProgram), sizeof(void *));
SAME(sizeof(CUmodule), sizeof(void *));
SAME(sizeof(CUfunction), sizeof(void *));
SAME(sizeof(CUstream), sizeof(void *));

SAME(NVRTC_SUCCESS, gdrt_NVRTC_SUCCESS);
SAME(CUDA_SUCCESS, gdrt_CUDA_SUCCESS);
SAME(CUDA_ERROR_INVALID_VALUE, gdrt_CUDA_ERROR_INVALID_VALUE);
SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, gdrt_CC_MAJOR);
SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, gdrt_CC_MINOR);

void gdist_abicheck(gdrt_nvrtc *n, gdrt_drv *d) {
	n->version = nvrtcVersion;
	n->create = nvrtcCreateProgram;
	n->compile = nvrtcCompileProgram;
	n->destroy = nvrtcDestroyProgram;
	n->logSize = nvrtcGetProgramLogSize;
	n->log = nvrtcGetProgramLog;
	n->ptxSize = nvrtcGetPTXSize;
	n->ptx = nvrtcGetPTX;
	n->errorString = nvrtcGetErrorString;
	n->cubinSize = nvrtcGetCUBINSize;
	n->cubin = nvrtcGetCUBIN;
	n->numArchs = nvrtcGetNumSupportedArchs;
	n->archs = nvrtcGetSupportedArchs;
	d->init = cuInit;
	d->driverGetVersion = cuDriverGetVersion;
	d->deviceGet = cuDeviceGet;
	d->deviceGetAttribute = cuDeviceGetAttribute;
	d->moduleLoadData = cuModuleLoadData;
	d->moduleUnload = cuModuleUnload;
	d->moduleGetFunction = cuModuleGetFunction;
	d->launchKernel = cuLaunchKernel;
	d->getErrorString = cuGetErrorString;
	d->getErrorName = cuGetErrorName;
#if CUDA_VERSION >= 12040
	d->funcGetParamInfo = cuFuncGetParamInfo;
#endif
#ifdef GDIST_ABICHECK_SELFTEST
	d->moduleLoadData = cuModuleGetFunction; /* must not compile */
#endif
}
