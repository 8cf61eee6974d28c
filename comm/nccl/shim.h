//go:build cgo

// The NCCL entry points gdist calls, re-declared so that the package builds
// without nccl.h, and loaded with dlopen at run time. The NCCL values used
// (ncclResult_t, ncclDataType_t, ncclRedOp_t, sizeof(ncclUniqueId), the
// version encoding) are in one table in abi.go, each with the line of
// nccl.h.in it comes from; the CUDA runtime's prototypes are checked
// against the real headers with gpu/cuda/shim.h's.
//
// Every wrapper returns an ncclResult_t, or GDNC_CUDA_ERROR + a cudaError_t
// when one of the CUDA runtime calls around the NCCL call failed.
#ifndef GDIST_NCCL_SHIM_H
#define GDIST_NCCL_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define GDNC_CUDA_ERROR 100000

/* The CUDA runtime's types in the prototypes of the runtime functions used
   here (see gpu/cuda/shim.h, whose ABI check includes this file too with the
   real types). */
#ifndef GDCU_ERR
#define GDCU_ERR int           /* cudaError_t */
#define GDCU_KIND int          /* enum cudaMemcpyKind */
#define GDCU_STREAM void *     /* cudaStream_t */
#define GDCU_EVENT void *      /* cudaEvent_t */
#define GDCU_ATTRS void        /* struct cudaPointerAttributes */
#define GDCU_HOSTFN void (*)(void *) /* cudaHostFn_t */
#endif

/* NCCL values used by shim.c (from the table in abi.go; TestABITable checks
   that they agree). */
enum {
	gdnc_ncclSystemError = 2,
	gdnc_ncclInvalidUsage = 5,
	gdnc_ncclUint8 = 1,
};

/* cudaMemcpyKind values used by shim.c (asserted by the ABI check). */
enum {
	gdnc_cudaMemcpyHostToDevice = 1,
	gdnc_cudaMemcpyDeviceToHost = 2,
	gdnc_cudaMemcpyDeviceToDevice = 3,
};

typedef struct {
	char internal[128];
} gdnc_uid;

typedef struct gdnc_lib {
	void *handle;
	int (*getVersion)(int *);
	int (*getUniqueId)(gdnc_uid *);
	int (*commInitRank)(void **, int, gdnc_uid, int);
	int (*commAbort)(void *);
	int (*commGetAsyncError)(void *, int *);
	const char *(*getErrorString)(int);
	const char *(*getLastError)(void *); /* optional (2.13+) */
	int (*allReduce)(const void *, void *, size_t, int, int, void *, void *);
	int (*broadcast)(const void *, void *, size_t, int, int, void *, void *);
	int (*reduce)(const void *, void *, size_t, int, int, int, void *, void *);
	int (*allGather)(const void *, void *, size_t, int, void *, void *);
	int (*reduceScatter)(const void *, void *, size_t, int, int, void *, void *);
	int (*send)(const void *, size_t, int, int, void *, void *);
	int (*recv)(void *, size_t, int, int, void *, void *);
	int (*groupStart)(void);
	int (*groupEnd)(void);
	/* from the CUDA runtime that gpu/cuda loaded */
	GDCU_ERR (*setDevice)(int);
	GDCU_ERR (*free_)(void *);
	GDCU_ERR (*eventRecord)(GDCU_EVENT, GDCU_STREAM);
	GDCU_ERR (*streamWaitEvent)(GDCU_STREAM, GDCU_EVENT, unsigned int);
	GDCU_ERR (*memcpyAsync)(void *, const void *, size_t, GDCU_KIND, GDCU_STREAM);
	GDCU_ERR (*launchHostFunc)(GDCU_STREAM, GDCU_HOSTFN, void *); /* optional */
} gdnc_lib;

/* One operation of a grouped launch. kind: 0 send, 1 recv, 2 device copy
   (bytes from src to buf on the stream, before the group), 3 copy from
   pinned host memory src to device buf (before the group), 4 copy from
   device src to pinned host memory buf (after the group). */
typedef struct {
	int kind, peer, dt;
	uintptr_t buf, src;
	size_t count, bytes;
} gdnc_p2p;

gdnc_lib *gdnc_open(const char *path, uintptr_t setDevice, uintptr_t free_, uintptr_t eventRecord,
		    uintptr_t streamWaitEvent, uintptr_t memcpyAsync, uintptr_t launchHostFunc, char *err, size_t errlen);
const char *gdnc_error_string(gdnc_lib *l, int code);
const char *gdnc_last_error(gdnc_lib *l, uintptr_t comm);
int gdnc_version(gdnc_lib *l, int *v);
int gdnc_unique_id(gdnc_lib *l, int dev, char *out128);
int gdnc_init(gdnc_lib *l, int dev, uintptr_t *comm, int n, const char *id128, int rank);
int gdnc_abort(gdnc_lib *l, int dev, uintptr_t comm);
int gdnc_async_error(gdnc_lib *l, uintptr_t comm, int *res);

int gdnc_all_reduce(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		    size_t count, int dt, int op);
int gdnc_broadcast(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		   size_t count, int dt, int root);
int gdnc_reduce(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		size_t count, int dt, int op, int root);
int gdnc_all_gather(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		    size_t sendcount, int dt);
int gdnc_reduce_scatter(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send,
			uintptr_t recv, size_t recvcount, int dt, int op);
int gdnc_group(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, gdnc_p2p *ops, int n);
int gdnc_bitwise(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, size_t bytes,
		 uintptr_t tmp, uintptr_t pinned, int nranks, int op, size_t off, size_t len, uintptr_t out);
int gdnc_no_op(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev);

#endif
