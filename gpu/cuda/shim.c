//go:build cgo

// Loader and thin wrappers over the CUDA runtime (see shim.h). Every wrapper
// whose call needs a CUDA context first makes the caller's device current on
// the calling thread: a cgo call runs on one OS thread from start to end, so
// the pair is atomic with respect to the goroutine scheduler. A thread on
// which no device was ever set works on device 0, and the runtime would
// create a context there (about 0.5 GiB, and an error where devices are in
// EXCLUSIVE_PROCESS mode) for a rank that uses another GPU. Only the calls
// that need no context (device count, versions, PCI bus id, error strings)
// go without.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"
#include "shim.h"

static void *sym(void *h, const char *name) { return dlsym(h, name); }

gdcu_lib *gdcu_open(const char *path, char *err, size_t errlen) {
	gdcu_lib *l = gd_dlopen(path, sizeof *l, err, errlen);
	if (!l) return NULL;
#define REQ(field, name) GD_REQ(l, path, err, errlen, field, name)
#define OPT(field, name) GD_OPT(l, field, name)
	REQ(getDeviceCount, "cudaGetDeviceCount");
	REQ(setDevice, "cudaSetDevice");
	REQ(getDevice, "cudaGetDevice");
	REQ(malloc_, "cudaMalloc");
	REQ(free_, "cudaFree");
	REQ(hostAlloc, "cudaHostAlloc");
	REQ(freeHost, "cudaFreeHost");
	REQ(memcpy_, "cudaMemcpy");
	REQ(memcpyAsync, "cudaMemcpyAsync");
	REQ(memset_, "cudaMemset");
	REQ(memsetAsync, "cudaMemsetAsync");
	REQ(streamCreateWithFlags, "cudaStreamCreateWithFlags");
	REQ(streamSynchronize, "cudaStreamSynchronize");
	REQ(streamDestroy, "cudaStreamDestroy");
	REQ(streamWaitEvent, "cudaStreamWaitEvent");
	REQ(eventCreateWithFlags, "cudaEventCreateWithFlags");
	REQ(eventRecord, "cudaEventRecord");
	REQ(eventQuery, "cudaEventQuery");
	REQ(eventSynchronize, "cudaEventSynchronize");
	REQ(eventDestroy, "cudaEventDestroy");
	REQ(pointerGetAttributes, "cudaPointerGetAttributes");
	REQ(getErrorString, "cudaGetErrorString");
	OPT(getErrorName, "cudaGetErrorName");
	OPT(getLastError, "cudaGetLastError");
	OPT(launchHostFunc, "cudaLaunchHostFunc");
	OPT(driverGetVersion, "cudaDriverGetVersion");
	OPT(runtimeGetVersion, "cudaRuntimeGetVersion");
	OPT(deviceGetPCIBusId, "cudaDeviceGetPCIBusId");
	OPT(deviceSynchronize, "cudaDeviceSynchronize");
	OPT(eventElapsedTime, "cudaEventElapsedTime");
#undef REQ
#undef OPT
	return l;
}

int gdcu_driver_present(void) {
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!h) return 0;
	dlclose(h);
	return 1;
}

void *gdcu_sym(gdcu_lib *l, const char *name) { return sym(l->handle, name); }

const char *gdcu_error_string(gdcu_lib *l, int code) {
	const char *s = l->getErrorString(code);
	return s ? s : "unknown error";
}

const char *gdcu_error_name(gdcu_lib *l, int code) {
	if (!l->getErrorName) return "";
	const char *s = l->getErrorName(code);
	return s ? s : "";
}

// A failed call also leaves the runtime's per-thread "last error" set;
// clear it so that it does not leak into unrelated code that checks it.
static int ck(gdcu_lib *l, int e) {
	if (e != gdcu_cudaSuccess && e != gdcu_cudaErrorNotReady && l->getLastError) l->getLastError();
	return e;
}

#define SETDEV(l, dev)                               \
	do {                                         \
		int _e = (l)->setDevice(dev);        \
		if (_e != gdcu_cudaSuccess) return ck(l, _e); \
	} while (0)

int gdcu_device_count(gdcu_lib *l, int *n) {
	*n = 0;
	return ck(l, l->getDeviceCount(n));
}

int gdcu_versions(gdcu_lib *l, int *driver, int *runtime) {
	*driver = 0;
	*runtime = 0;
	if (l->driverGetVersion) {
		int e = l->driverGetVersion(driver);
		if (e) return ck(l, e);
	}
	if (l->runtimeGetVersion) return ck(l, l->runtimeGetVersion(runtime));
	return 0;
}

int gdcu_pci_bus_id(gdcu_lib *l, int dev, char *buf, int len) {
	if (!l->deviceGetPCIBusId) {
		snprintf(buf, len, "?");
		return 0;
	}
	return ck(l, l->deviceGetPCIBusId(buf, len, dev));
}

int gdcu_malloc(gdcu_lib *l, int dev, uintptr_t *out, size_t n) {
	void *p = NULL;
	SETDEV(l, dev);
	int e = l->malloc_(&p, n);
	*out = (uintptr_t)p;
	return ck(l, e);
}

int gdcu_free(gdcu_lib *l, int dev, uintptr_t p) {
	SETDEV(l, dev);
	return ck(l, l->free_((void *)p));
}

int gdcu_host_alloc(gdcu_lib *l, int dev, void **out, size_t n) {
	*out = NULL;
	SETDEV(l, dev);
	return ck(l, l->hostAlloc(out, n, gdcu_cudaHostAllocPortable));
}

int gdcu_free_host(gdcu_lib *l, int dev, void *p) {
	SETDEV(l, dev);
	return ck(l, l->freeHost(p));
}

int gdcu_memcpy(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n, int kind) {
	SETDEV(l, dev);
	return ck(l, l->memcpy_((void *)dst, (const void *)src, n, kind));
}

int gdcu_memcpy_htod(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n) {
	SETDEV(l, dev);
	return ck(l, l->memcpy_((void *)dst, (const void *)src, n, gdcu_cudaMemcpyHostToDevice));
}

int gdcu_memcpy_dtoh(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n) {
	SETDEV(l, dev);
	return ck(l, l->memcpy_((void *)dst, (const void *)src, n, gdcu_cudaMemcpyDeviceToHost));
}

int gdcu_memset(gdcu_lib *l, int dev, uintptr_t p, int v, size_t n) {
	SETDEV(l, dev);
	return ck(l, l->memset_((void *)p, v, n));
}

int gdcu_pointer_info(gdcu_lib *l, int dev, uintptr_t p, int *type, int *device) {
	// Larger than struct cudaPointerAttributes in any release (the ABI
	// check asserts the size and the two offsets).
	union {
		int i[2];
		unsigned char pad[GDCU_ATTRS_BUF];
	} a;
	memset(&a, 0, sizeof a);
	*type = 0;
	*device = 0;
	SETDEV(l, dev);
	int e = l->pointerGetAttributes((void *)&a, (const void *)p);
	memcpy(type, a.pad + GDCU_ATTRS_TYPE_OFF, sizeof *type);
	memcpy(device, a.pad + GDCU_ATTRS_DEVICE_OFF, sizeof *device);
	return ck(l, e);
}

int gdcu_stream_create(gdcu_lib *l, int dev, unsigned int flags, uintptr_t *out) {
	void *s = NULL;
	SETDEV(l, dev);
	int e = l->streamCreateWithFlags(&s, flags);
	*out = (uintptr_t)s;
	return ck(l, e);
}

int gdcu_stream_sync(gdcu_lib *l, int dev, uintptr_t s) {
	SETDEV(l, dev);
	return ck(l, l->streamSynchronize((void *)s));
}

int gdcu_stream_destroy(gdcu_lib *l, int dev, uintptr_t s) {
	SETDEV(l, dev);
	return ck(l, l->streamDestroy((void *)s));
}

int gdcu_stream_wait_event(gdcu_lib *l, int dev, uintptr_t s, uintptr_t ev) {
	SETDEV(l, dev);
	return ck(l, l->streamWaitEvent((void *)s, (void *)ev, 0 /* cudaEventWaitDefault */));
}

int gdcu_memcpy_async(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n, int kind, uintptr_t s) {
	SETDEV(l, dev);
	return ck(l, l->memcpyAsync((void *)dst, (const void *)src, n, kind, (void *)s));
}

int gdcu_device_sync(gdcu_lib *l, int dev) {
	if (!l->deviceSynchronize) return 1; /* cudaErrorInvalidValue: checked in Go first */
	SETDEV(l, dev);
	return ck(l, l->deviceSynchronize());
}

int gdcu_memset_async(gdcu_lib *l, int dev, uintptr_t p, int v, size_t n, uintptr_t s) {
	SETDEV(l, dev);
	return ck(l, l->memsetAsync((void *)p, v, n, (void *)s));
}

int gdcu_launch_host_func(gdcu_lib *l, int dev, uintptr_t s, uintptr_t fn, uintptr_t arg) {
	if (!l->launchHostFunc) return 1; /* cudaErrorInvalidValue: checked in Go first */
	SETDEV(l, dev);
	return ck(l, l->launchHostFunc((void *)s, (gdcu_hostfn)fn, (void *)arg));
}

int gdcu_event_create(gdcu_lib *l, int dev, unsigned int flags, uintptr_t *out) {
	void *ev = NULL;
	SETDEV(l, dev);
	int e = l->eventCreateWithFlags(&ev, flags);
	*out = (uintptr_t)ev;
	return ck(l, e);
}

int gdcu_event_record(gdcu_lib *l, int dev, uintptr_t ev, uintptr_t s) {
	SETDEV(l, dev);
	return ck(l, l->eventRecord((void *)ev, (void *)s));
}

int gdcu_event_query(gdcu_lib *l, int dev, uintptr_t ev) {
	SETDEV(l, dev);
	return ck(l, l->eventQuery((void *)ev));
}

int gdcu_event_sync(gdcu_lib *l, int dev, uintptr_t ev) {
	SETDEV(l, dev);
	return ck(l, l->eventSynchronize((void *)ev));
}

int gdcu_event_destroy(gdcu_lib *l, int dev, uintptr_t ev) {
	SETDEV(l, dev);
	return ck(l, l->eventDestroy((void *)ev));
}

int gdcu_event_elapsed(gdcu_lib *l, int dev, uintptr_t start, uintptr_t end, float *ms) {
	if (!l->eventElapsedTime) return 1; /* cudaErrorInvalidValue: checked in Go first */
	SETDEV(l, dev);
	return ck(l, l->eventElapsedTime(ms, (void *)start, (void *)end));
}
