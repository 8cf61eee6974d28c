//go:build cgo

// Loaders and thin wrappers over NVRTC and the CUDA driver API (see
// shim.h). Driver calls that need a context first make the device's
// primary context current on the calling thread through the CUDA runtime
// gpu/cuda loaded (cudaSetDevice, then cudaFree(NULL): with CUDA 11
// cudaSetDevice alone makes no context current), in the same C call.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"
#include "shim.h"

gdrt_nvrtc *gdrt_nvrtc_open(const char *path, char *err, size_t errlen) {
	gdrt_nvrtc *l = gd_dlopen(path, sizeof *l, err, errlen);
	if (!l) return NULL;
#define REQ(field, name) GD_REQ(l, path, err, errlen, field, name)
#define OPT(field, name) GD_OPT(l, field, name)
	REQ(version, "nvrtcVersion");
	REQ(create, "nvrtcCreateProgram");
	REQ(compile, "nvrtcCompileProgram");
	REQ(destroy, "nvrtcDestroyProgram");
	REQ(logSize, "nvrtcGetProgramLogSize");
	REQ(log, "nvrtcGetProgramLog");
	REQ(ptxSize, "nvrtcGetPTXSize");
	REQ(ptx, "nvrtcGetPTX");
	REQ(errorString, "nvrtcGetErrorString");
	OPT(cubinSize, "nvrtcGetCUBINSize");
	OPT(cubin, "nvrtcGetCUBIN");
	OPT(numArchs, "nvrtcGetNumSupportedArchs");
	OPT(archs, "nvrtcGetSupportedArchs");
#undef REQ
#undef OPT
	return l;
}

int gdrt_nvrtc_version(gdrt_nvrtc *l, int *major, int *minor) {
	*major = *minor = 0;
	return l->version(major, minor);
}

int gdrt_nvrtc_archs(gdrt_nvrtc *l, int *out, int cap) {
	if (!l->numArchs || !l->archs) return -1;
	int n = 0;
	if (l->numArchs(&n) || n <= 0) return -1;
	int *a = calloc(n, sizeof *a);
	if (!a || l->archs(a)) {
		free(a);
		return -1;
	}
	for (int i = 0; i < n && i < cap; i++) out[i] = a[i];
	free(a);
	return n < cap ? n : cap;
}

const char *gdrt_nvrtc_error(gdrt_nvrtc *l, int code) {
	const char *s = l->errorString(code);
	return s ? s : "unknown NVRTC error";
}

/* Compiles src; *stage says which call failed (0 create, 1 compile, 2
   fetching the result); *log (always, malloc'd) holds NVRTC's log, *out
   (malloc'd) the cubin or the PTX. */
int gdrt_compile(gdrt_nvrtc *l, const char *src, const char *name, int nopt, const char **opts, int cubin, int *stage,
		 char **log, char **out, size_t *outlen) {
	void *prog = NULL;
	*log = NULL;
	*out = NULL;
	*outlen = 0;
	*stage = 0;
	int r = l->create(&prog, src, name, 0, NULL, NULL);
	if (r) return r;
	*stage = 1;
	r = l->compile(prog, nopt, opts);
	size_t n = 0;
	if (!l->logSize(prog, &n) && n > 0) {
		*log = calloc(n + 1, 1);
		if (*log && l->log(prog, *log)) (*log)[0] = 0;
	}
	if (!r) {
		*stage = 2;
		n = 0;
		r = cubin ? l->cubinSize(prog, &n) : l->ptxSize(prog, &n);
		if (!r) {
			*out = malloc(n ? n : 1);
			if (!*out) r = 1; /* NVRTC_ERROR_OUT_OF_MEMORY */
			else r = cubin ? l->cubin(prog, *out) : l->ptx(prog, *out);
			*outlen = n;
		}
	}
	l->destroy(&prog);
	return r;
}

gdrt_drv *gdrt_drv_open(const char *path, uintptr_t setDevice, uintptr_t free_, char *err, size_t errlen) {
	gdrt_drv *l = gd_dlopen(path, sizeof *l, err, errlen);
	if (!l) return NULL;
#define REQ(field, name) GD_REQ(l, path, err, errlen, field, name)
#define OPT(field, name) GD_OPT(l, field, name)
	REQ(init, "cuInit");
	REQ(driverGetVersion, "cuDriverGetVersion");
	REQ(deviceGet, "cuDeviceGet");
	REQ(deviceGetAttribute, "cuDeviceGetAttribute");
	REQ(moduleLoadData, "cuModuleLoadData");
	REQ(moduleUnload, "cuModuleUnload");
	REQ(moduleGetFunction, "cuModuleGetFunction");
	REQ(launchKernel, "cuLaunchKernel");
	REQ(getErrorString, "cuGetErrorString");
	REQ(getErrorName, "cuGetErrorName");
	OPT(funcGetParamInfo, "cuFuncGetParamInfo");
#undef REQ
#undef OPT
	*(void **)&l->setDevice = (void *)setDevice;
	*(void **)&l->free_ = (void *)free_;
	return l;
}

int gdrt_drv_init(gdrt_drv *l, int *version) {
	*version = 0;
	int r = l->init(0);
	if (r) return r;
	return l->driverGetVersion(version);
}

const char *gdrt_drv_error(gdrt_drv *l, int code) {
	const char *s = NULL;
	if (l->getErrorString(code, &s) || !s) return "unknown CUDA driver error";
	return s;
}

const char *gdrt_drv_error_name(gdrt_drv *l, int code) {
	const char *s = NULL;
	if (l->getErrorName(code, &s) || !s) return "";
	return s;
}

static int use_device(gdrt_drv *l, int dev) {
	int e = l->setDevice(dev);
	if (!e) e = l->free_(NULL);
	return e ? GDRT_CUDA_ERROR + e : 0;
}

int gdrt_arch(gdrt_drv *l, int dev, int *major, int *minor) {
	int d = 0;
	*major = *minor = 0;
	int r = l->deviceGet(&d, dev);
	if (!r) r = l->deviceGetAttribute(major, gdrt_CC_MAJOR, d);
	if (!r) r = l->deviceGetAttribute(minor, gdrt_CC_MINOR, d);
	return r;
}

int gdrt_module_load(gdrt_drv *l, int dev, const void *image, uintptr_t *mod) {
	void *m = NULL;
	*mod = 0;
	int r = use_device(l, dev);
	if (r) return r;
	r = l->moduleLoadData(&m, image);
	*mod = (uintptr_t)m;
	return r;
}

int gdrt_function(gdrt_drv *l, int dev, uintptr_t mod, const char *name, uintptr_t *f) {
	void *fn = NULL;
	*f = 0;
	int r = use_device(l, dev);
	if (r) return r;
	r = l->moduleGetFunction(&fn, (void *)mod, name);
	*f = (uintptr_t)fn;
	return r;
}

/* -1: the driver cannot say (older than CUDA 12.4). */
int gdrt_param_info(gdrt_drv *l, int dev, uintptr_t f, size_t idx, size_t *off, size_t *size) {
	if (!l->funcGetParamInfo) return -1;
	int r = use_device(l, dev);
	if (r) return r;
	return l->funcGetParamInfo((void *)f, idx, off, size);
}

int gdrt_launch(gdrt_drv *l, int dev, uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		unsigned bz, unsigned shmem, uintptr_t stream, void **params) {
	int r = use_device(l, dev);
	if (r) return r;
	return l->launchKernel((void *)f, gx, gy, gz, bx, by, bz, shmem, (void *)stream, params, NULL);
}
