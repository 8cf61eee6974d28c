// abicheck.c: compiled by TestRealHeaders against the real CUDA runtime
// headers (cuda_runtime_api.h, driver_types.h). It proves, at compile time,
// that the prototypes and values gpu/cuda/shim.h and comm/nccl/shim.h
// re-declare are the real ones: each enum value and flag the shims or the Go
// code use, the layout of struct cudaPointerAttributes as gdcu_pointer_info
// reads it, and the type of every function the shims call (each real
// function is assigned to the shim's pointer field, which must not need a
// conversion: the test compiles with -Werror=incompatible-pointer-types).
//
// go_values.h, written by the test, holds the Go constants (GO_*), so that
// those are checked too. With -DGDIST_ABICHECK_SELFTEST one deliberately
// wrong assignment is added: the test expects that build to fail, which shows
// that a wrong prototype is caught.
#include <stddef.h>
#include <cuda_runtime_api.h>

#include "go_values.h"

#define GDCU_ERR cudaError_t
#define GDCU_KIND enum cudaMemcpyKind
#define GDCU_STREAM cudaStream_t
#define GDCU_EVENT cudaEvent_t
#define GDCU_ATTRS struct cudaPointerAttributes
#define GDCU_HOSTFN cudaHostFn_t
#include "shim.h"      /* gpu/cuda */
#include "nccl_shim.h" /* comm/nccl/shim.h */

#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a " == " #b)

/* The ABI of the substituted types: an enum is passed as an int, handles
   as pointers. */
SAME(sizeof(cudaError_t), sizeof(int));
SAME(sizeof(enum cudaMemcpyKind), sizeof(int));
SAME(sizeof(enum cudaMemoryType), sizeof(int));
SAME(sizeof(cudaStream_t), sizeof(void *));
SAME(sizeof(cudaEvent_t), sizeof(void *));

/* cudaError_t */
SAME(cudaSuccess, gdcu_cudaSuccess);
SAME(cudaErrorNotReady, gdcu_cudaErrorNotReady);
/* cudaMemcpyKind: the shims' and Go's (types.go) */
SAME(cudaMemcpyHostToHost, gdcu_cudaMemcpyHostToHost);
SAME(cudaMemcpyHostToDevice, gdcu_cudaMemcpyHostToDevice);
SAME(cudaMemcpyDeviceToHost, gdcu_cudaMemcpyDeviceToHost);
SAME(cudaMemcpyDeviceToDevice, gdcu_cudaMemcpyDeviceToDevice);
SAME(cudaMemcpyDefault, gdcu_cudaMemcpyDefault);
SAME(cudaMemcpyHostToDevice, gdnc_cudaMemcpyHostToDevice);
SAME(cudaMemcpyDeviceToHost, gdnc_cudaMemcpyDeviceToHost);
SAME(cudaMemcpyDeviceToDevice, gdnc_cudaMemcpyDeviceToDevice);
SAME(cudaMemcpyHostToHost, GO_HostToHost);
SAME(cudaMemcpyHostToDevice, GO_HostToDevice);
SAME(cudaMemcpyDeviceToHost, GO_DeviceToHost);
SAME(cudaMemcpyDeviceToDevice, GO_DeviceToDevice);
SAME(cudaMemcpyDefault, GO_CopyDefault);
/* cudaMemoryType: the shim's and Go's */
SAME(cudaMemoryTypeUnregistered, gdcu_cudaMemoryTypeUnregistered);
SAME(cudaMemoryTypeHost, gdcu_cudaMemoryTypeHost);
SAME(cudaMemoryTypeDevice, gdcu_cudaMemoryTypeDevice);
SAME(cudaMemoryTypeManaged, gdcu_cudaMemoryTypeManaged);
SAME(cudaMemoryTypeUnregistered, GO_Unregistered);
SAME(cudaMemoryTypeHost, GO_HostPinned);
SAME(cudaMemoryTypeDevice, GO_DeviceMemory);
SAME(cudaMemoryTypeManaged, GO_Managed);
/* flags */
SAME(cudaStreamDefault, gdcu_cudaStreamDefault);
SAME(cudaStreamNonBlocking, gdcu_cudaStreamNonBlocking);
SAME(cudaEventDefault, gdcu_cudaEventDefault);
SAME(cudaEventBlockingSync, gdcu_cudaEventBlockingSync);
SAME(cudaEventDisableTiming, gdcu_cudaEventDisableTiming);
SAME(cudaHostAllocDefault, gdcu_cudaHostAllocDefault);
SAME(cudaHostAllocPortable, gdcu_cudaHostAllocPortable);
#ifdef cudaEventWaitDefault
SAME(cudaEventWaitDefault, 0); /* the flags shim.c passes to cudaStreamWaitEvent */
#endif

/* struct cudaPointerAttributes, as gdcu_pointer_info reads it. */
SAME(offsetof(struct cudaPointerAttributes, type), GDCU_ATTRS_TYPE_OFF);
SAME(offsetof(struct cudaPointerAttributes, device), GDCU_ATTRS_DEVICE_OFF);
_Static_assert(sizeof(struct cudaPointerAttributes) <= GDCU_ATTRS_BUF, "the buffer holds the struct");

/* Prototypes: every function gdcu_open and gdnc_open load. */
void gdist_abicheck(gdcu_lib *l, gdnc_lib *n);
void gdist_abicheck(gdcu_lib *l, gdnc_lib *n) {
	l->getDeviceCount = cudaGetDeviceCount;
	l->setDevice = cudaSetDevice;
	l->getDevice = cudaGetDevice;
	l->malloc_ = cudaMalloc;
	l->free_ = cudaFree;
	l->hostAlloc = cudaHostAlloc;
	l->freeHost = cudaFreeHost;
	l->memcpy_ = cudaMemcpy;
	l->memcpyAsync = cudaMemcpyAsync;
	l->memset_ = cudaMemset;
	l->memsetAsync = cudaMemsetAsync;
	l->streamCreateWithFlags = cudaStreamCreateWithFlags;
	l->streamSynchronize = cudaStreamSynchronize;
	l->streamDestroy = cudaStreamDestroy;
	l->streamWaitEvent = cudaStreamWaitEvent;
	l->eventCreateWithFlags = cudaEventCreateWithFlags;
	l->eventRecord = cudaEventRecord;
	l->eventQuery = cudaEventQuery;
	l->eventSynchronize = cudaEventSynchronize;
	l->eventDestroy = cudaEventDestroy;
	l->eventElapsedTime = cudaEventElapsedTime;
	l->pointerGetAttributes = cudaPointerGetAttributes;
	l->getErrorString = cudaGetErrorString;
	l->getErrorName = cudaGetErrorName;
	l->getLastError = cudaGetLastError;
	l->launchHostFunc = cudaLaunchHostFunc;
	l->driverGetVersion = cudaDriverGetVersion;
	l->runtimeGetVersion = cudaRuntimeGetVersion;
	l->deviceGetPCIBusId = cudaDeviceGetPCIBusId;
	l->deviceSynchronize = cudaDeviceSynchronize;

	n->setDevice = cudaSetDevice;
	n->free_ = cudaFree;
	n->eventRecord = cudaEventRecord;
	n->streamWaitEvent = cudaStreamWaitEvent;
	n->memcpyAsync = cudaMemcpyAsync;
	n->launchHostFunc = cudaLaunchHostFunc;
#ifdef GDIST_ABICHECK_SELFTEST
	l->memset_ = cudaMemsetAsync; /* wrong on purpose: must not compile */
#endif
}
