//go:build cgo

// The few CUDA runtime entry points gdist calls, re-declared here so that the
// package builds without CUDA headers, and loaded with dlopen at run time.
// Enumerations are passed as int (the C ABI of the real enums). Values used
// (from the CUDA runtime API, cuda_runtime_api.h / driver_types.h):
//
//   cudaError_t:       cudaSuccess = 0, cudaErrorNotReady = 600 (an event or
//                      stream still has work pending); others are only shown
//                      through cudaGetErrorString.
//   cudaMemcpyKind:    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1,
//                      cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3,
//                      cudaMemcpyDefault = 4 (inferred from the pointers).
//   cudaMemoryType:    cudaMemoryTypeUnregistered = 0 (plain host memory),
//                      cudaMemoryTypeHost = 1 (pinned), cudaMemoryTypeDevice = 2,
//                      cudaMemoryTypeManaged = 3.
//   stream flags:      cudaStreamDefault = 0 (synchronizes with the legacy
//                      default stream), cudaStreamNonBlocking = 1 (does not).
//   event flags:       cudaEventDefault = 0, cudaEventBlockingSync = 1,
//                      cudaEventDisableTiming = 2.
//   cudaHostAlloc:     cudaHostAllocDefault = 0, cudaHostAllocPortable = 1
//                      (pinned for every CUDA context, not just the current).
//
// struct cudaPointerAttributes (CUDA >= 11) begins with
//   { enum cudaMemoryType type; int device; void *devicePointer; void *hostPointer; ... }
// Later releases may append fields, so callers pass a zeroed buffer larger
// than any version's struct and read the first two ints.
#ifndef GDIST_CUDA_SHIM_H
#define GDIST_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

enum {
	gdcu_cudaSuccess = 0,
	gdcu_cudaErrorNotReady = 600,
};

typedef struct gdcu_lib {
	void *handle;
	int (*getDeviceCount)(int *);
	int (*setDevice)(int);
	int (*getDevice)(int *);
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*hostAlloc)(void **, size_t, unsigned int);
	int (*freeHost)(void *);
	int (*memcpy_)(void *, const void *, size_t, int);
	int (*memcpyAsync)(void *, const void *, size_t, int, void *);
	int (*memset_)(void *, int, size_t);
	int (*memsetAsync)(void *, int, size_t, void *);
	int (*streamCreateWithFlags)(void **, unsigned int);
	int (*streamSynchronize)(void *);
	int (*streamDestroy)(void *);
	int (*streamWaitEvent)(void *, void *, unsigned int);
	int (*eventCreateWithFlags)(void **, unsigned int);
	int (*eventRecord)(void *, void *);
	int (*eventQuery)(void *);
	int (*eventSynchronize)(void *);
	int (*eventDestroy)(void *);
	int (*pointerGetAttributes)(void *, const void *);
	const char *(*getErrorString)(int);
	/* optional (NULL when the library lacks them) */
	const char *(*getErrorName)(int);
	int (*getLastError)(void);
	int (*launchHostFunc)(void *, void (*)(void *), void *);
	int (*driverGetVersion)(int *);
	int (*runtimeGetVersion)(int *);
	int (*deviceGetPCIBusId)(char *, int, int);
	int (*deviceSynchronize)(void);
} gdcu_lib;

gdcu_lib *gdcu_open(const char *path, char *err, size_t errlen);
int gdcu_driver_present(void);
void *gdcu_sym(gdcu_lib *l, const char *name);

const char *gdcu_error_string(gdcu_lib *l, int code);
const char *gdcu_error_name(gdcu_lib *l, int code);

int gdcu_device_count(gdcu_lib *l, int *n);
int gdcu_versions(gdcu_lib *l, int *driver, int *runtime);
int gdcu_pci_bus_id(gdcu_lib *l, int dev, char *buf, int len);

int gdcu_malloc(gdcu_lib *l, int dev, uintptr_t *out, size_t n);
int gdcu_free(gdcu_lib *l, int dev, uintptr_t p);
int gdcu_host_alloc(gdcu_lib *l, void **out, size_t n);
int gdcu_free_host(gdcu_lib *l, void *p);
int gdcu_memcpy(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n, int kind);
int gdcu_memset(gdcu_lib *l, int dev, uintptr_t p, int v, size_t n);
int gdcu_pointer_info(gdcu_lib *l, uintptr_t p, int *type, int *device);

int gdcu_stream_create(gdcu_lib *l, int dev, unsigned int flags, uintptr_t *out);
int gdcu_stream_sync(gdcu_lib *l, int dev, uintptr_t s);
int gdcu_stream_destroy(gdcu_lib *l, int dev, uintptr_t s);
int gdcu_stream_wait_event(gdcu_lib *l, int dev, uintptr_t s, uintptr_t ev);
int gdcu_memcpy_async(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n, int kind, uintptr_t s);
int gdcu_launch_host_func(gdcu_lib *l, int dev, uintptr_t s, uintptr_t fn, uintptr_t arg);

int gdcu_event_create(gdcu_lib *l, int dev, unsigned int flags, uintptr_t *out);
int gdcu_event_record(gdcu_lib *l, int dev, uintptr_t ev, uintptr_t s);
int gdcu_event_query(gdcu_lib *l, uintptr_t ev);
int gdcu_event_sync(gdcu_lib *l, uintptr_t ev);
int gdcu_event_destroy(gdcu_lib *l, uintptr_t ev);

#endif
