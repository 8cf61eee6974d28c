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

/* The types of the re-declared prototypes. Each is ABI-identical to the real
   one (an enum is passed as an int, a handle as a pointer); the ABI check
   (testdata/abicheck.c, run by TestRealHeaders) defines these macros as the
   real header's types before including this file, so that assigning each
   real function to the field declared here fails to compile if a prototype
   differs. */
#ifndef GDCU_ERR
#define GDCU_ERR int           /* cudaError_t */
#define GDCU_KIND int          /* enum cudaMemcpyKind */
#define GDCU_STREAM void *     /* cudaStream_t */
#define GDCU_EVENT void *      /* cudaEvent_t */
#define GDCU_ATTRS void        /* struct cudaPointerAttributes */
#define GDCU_HOSTFN gdcu_hostfn /* cudaHostFn_t */
#endif

typedef void (*gdcu_hostfn)(void *);

/* The values used, each asserted against the real header by the ABI check. */
enum {
	gdcu_cudaSuccess = 0,
	gdcu_cudaErrorNotReady = 600,
	gdcu_cudaMemcpyHostToHost = 0,
	gdcu_cudaMemcpyHostToDevice = 1,
	gdcu_cudaMemcpyDeviceToHost = 2,
	gdcu_cudaMemcpyDeviceToDevice = 3,
	gdcu_cudaMemcpyDefault = 4,
	gdcu_cudaMemoryTypeUnregistered = 0,
	gdcu_cudaMemoryTypeHost = 1,
	gdcu_cudaMemoryTypeDevice = 2,
	gdcu_cudaMemoryTypeManaged = 3,
	gdcu_cudaStreamDefault = 0,
	gdcu_cudaStreamNonBlocking = 1,
	gdcu_cudaEventDefault = 0,
	gdcu_cudaEventBlockingSync = 1,
	gdcu_cudaEventDisableTiming = 2,
	gdcu_cudaHostAllocDefault = 0,
	gdcu_cudaHostAllocPortable = 1,
};

/* struct cudaPointerAttributes: gdcu_pointer_info passes a zeroed buffer of
   this size and reads the two ints at these offsets. */
#define GDCU_ATTRS_BUF 512
#define GDCU_ATTRS_TYPE_OFF 0
#define GDCU_ATTRS_DEVICE_OFF 4

typedef struct gdcu_lib {
	void *handle;
	GDCU_ERR (*getDeviceCount)(int *);
	GDCU_ERR (*setDevice)(int);
	GDCU_ERR (*getDevice)(int *);
	GDCU_ERR (*malloc_)(void **, size_t);
	GDCU_ERR (*free_)(void *);
	GDCU_ERR (*hostAlloc)(void **, size_t, unsigned int);
	GDCU_ERR (*freeHost)(void *);
	GDCU_ERR (*memcpy_)(void *, const void *, size_t, GDCU_KIND);
	GDCU_ERR (*memcpyAsync)(void *, const void *, size_t, GDCU_KIND, GDCU_STREAM);
	GDCU_ERR (*memset_)(void *, int, size_t);
	GDCU_ERR (*memsetAsync)(void *, int, size_t, GDCU_STREAM);
	GDCU_ERR (*streamCreateWithFlags)(GDCU_STREAM *, unsigned int);
	GDCU_ERR (*streamSynchronize)(GDCU_STREAM);
	GDCU_ERR (*streamDestroy)(GDCU_STREAM);
	GDCU_ERR (*streamWaitEvent)(GDCU_STREAM, GDCU_EVENT, unsigned int);
	GDCU_ERR (*eventCreateWithFlags)(GDCU_EVENT *, unsigned int);
	GDCU_ERR (*eventRecord)(GDCU_EVENT, GDCU_STREAM);
	GDCU_ERR (*eventQuery)(GDCU_EVENT);
	GDCU_ERR (*eventSynchronize)(GDCU_EVENT);
	GDCU_ERR (*eventDestroy)(GDCU_EVENT);
	GDCU_ERR (*pointerGetAttributes)(GDCU_ATTRS *, const void *);
	const char *(*getErrorString)(GDCU_ERR);
	/* optional (NULL when the library lacks them) */
	const char *(*getErrorName)(GDCU_ERR);
	GDCU_ERR (*getLastError)(void);
	GDCU_ERR (*launchHostFunc)(GDCU_STREAM, GDCU_HOSTFN, void *);
	GDCU_ERR (*driverGetVersion)(int *);
	GDCU_ERR (*runtimeGetVersion)(int *);
	GDCU_ERR (*deviceGetPCIBusId)(char *, int, int);
	GDCU_ERR (*deviceSynchronize)(void);
	GDCU_ERR (*eventElapsedTime)(float *, GDCU_EVENT, GDCU_EVENT);
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
int gdcu_host_alloc(gdcu_lib *l, int dev, void **out, size_t n);
int gdcu_free_host(gdcu_lib *l, int dev, void *p);
int gdcu_memcpy(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n, int kind);
int gdcu_memcpy_htod(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n);
int gdcu_memcpy_dtoh(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n);
int gdcu_memset(gdcu_lib *l, int dev, uintptr_t p, int v, size_t n);
int gdcu_pointer_info(gdcu_lib *l, int dev, uintptr_t p, int *type, int *device);

int gdcu_stream_create(gdcu_lib *l, int dev, unsigned int flags, uintptr_t *out);
int gdcu_stream_sync(gdcu_lib *l, int dev, uintptr_t s);
int gdcu_stream_destroy(gdcu_lib *l, int dev, uintptr_t s);
int gdcu_stream_wait_event(gdcu_lib *l, int dev, uintptr_t s, uintptr_t ev);
int gdcu_memcpy_async(gdcu_lib *l, int dev, uintptr_t dst, uintptr_t src, size_t n, int kind, uintptr_t s);
int gdcu_device_sync(gdcu_lib *l, int dev);
int gdcu_memset_async(gdcu_lib *l, int dev, uintptr_t p, int v, size_t n, uintptr_t s);
int gdcu_launch_host_func(gdcu_lib *l, int dev, uintptr_t s, uintptr_t fn, uintptr_t arg);

int gdcu_event_create(gdcu_lib *l, int dev, unsigned int flags, uintptr_t *out);
int gdcu_event_record(gdcu_lib *l, int dev, uintptr_t ev, uintptr_t s);
int gdcu_event_query(gdcu_lib *l, int dev, uintptr_t ev);
int gdcu_event_sync(gdcu_lib *l, int dev, uintptr_t ev);
int gdcu_event_destroy(gdcu_lib *l, int dev, uintptr_t ev);
int gdcu_event_elapsed(gdcu_lib *l, int dev, uintptr_t start, uintptr_t end, float *ms);

#endif
