//go:build cgo

// Loader and launch wrappers for NCCL (see shim.h). Each launch wrapper makes
// the communicator's device current, makes the stream wait for the work
// queued so far on the legacy default stream (ev is a scratch event), and
// enqueues the NCCL call(s) on the stream, all in one cgo call.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"
#include "shim.h"

gdnc_lib *gdnc_open(const char *path, uintptr_t setDevice, uintptr_t free_, uintptr_t eventRecord,
		    uintptr_t streamWaitEvent, uintptr_t memcpyAsync, uintptr_t launchHostFunc, char *err, size_t errlen) {
	gdnc_lib *l = gd_dlopen(path, sizeof *l, err, errlen);
	if (!l) return NULL;
#define REQ(field, name) GD_REQ(l, path, err, errlen, field, name)
	REQ(getVersion, "ncclGetVersion");
	REQ(getUniqueId, "ncclGetUniqueId");
	REQ(commInitRank, "ncclCommInitRank");
	REQ(commAbort, "ncclCommAbort");
	REQ(commGetAsyncError, "ncclCommGetAsyncError");
	REQ(getErrorString, "ncclGetErrorString");
	REQ(allReduce, "ncclAllReduce");
	REQ(broadcast, "ncclBroadcast");
	REQ(reduce, "ncclReduce");
	REQ(allGather, "ncclAllGather");
	REQ(reduceScatter, "ncclReduceScatter");
	REQ(send, "ncclSend");
	REQ(recv, "ncclRecv");
	REQ(groupStart, "ncclGroupStart");
	REQ(groupEnd, "ncclGroupEnd");
#undef REQ
	*(void **)&l->getLastError = dlsym(l->handle, "ncclGetLastError");
	*(void **)&l->setDevice = (void *)setDevice;
	*(void **)&l->free_ = (void *)free_;
	*(void **)&l->eventRecord = (void *)eventRecord;
	*(void **)&l->streamWaitEvent = (void *)streamWaitEvent;
	*(void **)&l->memcpyAsync = (void *)memcpyAsync;
	*(void **)&l->launchHostFunc = (void *)launchHostFunc;
	return l;
}

const char *gdnc_error_string(gdnc_lib *l, int code) {
	const char *s = l->getErrorString(code);
	return s ? s : "unknown result";
}

const char *gdnc_last_error(gdnc_lib *l, uintptr_t comm) {
	if (!l->getLastError) return "";
	const char *s = l->getLastError((void *)comm);
	return s ? s : "";
}

int gdnc_version(gdnc_lib *l, int *v) { return l->getVersion(v); }

#define CUDA(call)                                     \
	do {                                           \
		int _e = (call);                       \
		if (_e) return GDNC_CUDA_ERROR + _e;   \
	} while (0)

/* Makes dev current with its context: cudaSetDevice, then cudaFree(NULL).
   With CUDA 11 cudaSetDevice alone makes no context current (it is made
   lazily by the next runtime call), and NCCL, which looks at the current
   context, would then use device 0 (or the device of a stale context). */
static int use_device(gdnc_lib *l, int dev) {
	CUDA(l->setDevice(dev));
	CUDA(l->free_(NULL));
	return 0;
}

int gdnc_unique_id(gdnc_lib *l, int dev, char *out128) {
	gdnc_uid id;
	memset(&id, 0, sizeof id);
	int r = use_device(l, dev);
	if (r) return r;
	r = l->getUniqueId(&id);
	memcpy(out128, id.internal, sizeof id.internal);
	return r;
}

int gdnc_init(gdnc_lib *l, int dev, uintptr_t *comm, int n, const char *id128, int rank) {
	gdnc_uid id;
	void *c = NULL;
	memcpy(id.internal, id128, sizeof id.internal);
	*comm = 0;
	int r = use_device(l, dev);
	if (r) return r;
	r = l->commInitRank(&c, n, id, rank);
	*comm = (uintptr_t)c;
	return r;
}

int gdnc_abort(gdnc_lib *l, int dev, uintptr_t comm) {
	CUDA(l->setDevice(dev));
	return l->commAbort((void *)comm);
}

int gdnc_async_error(gdnc_lib *l, uintptr_t comm, int *res) {
	*res = 0;
	return l->commGetAsyncError((void *)comm, res);
}

static int prologue(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev) {
	CUDA(l->setDevice(dev));
	CUDA(l->eventRecord((void *)ev, NULL));
	CUDA(l->streamWaitEvent((void *)st, (void *)ev, 0));
	return 0;
}

int gdnc_no_op(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev) { return prologue(l, dev, st, ev); }

int gdnc_all_reduce(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		    size_t count, int dt, int op) {
	int r = prologue(l, dev, st, ev);
	if (r) return r;
	return l->allReduce((const void *)send, (void *)recv, count, dt, op, (void *)comm, (void *)st);
}

int gdnc_broadcast(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		   size_t count, int dt, int root) {
	int r = prologue(l, dev, st, ev);
	if (r) return r;
	return l->broadcast((const void *)send, (void *)recv, count, dt, root, (void *)comm, (void *)st);
}

int gdnc_reduce(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		size_t count, int dt, int op, int root) {
	int r = prologue(l, dev, st, ev);
	if (r) return r;
	return l->reduce((const void *)send, (void *)recv, count, dt, op, root, (void *)comm, (void *)st);
}

int gdnc_all_gather(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, uintptr_t recv,
		    size_t sendcount, int dt) {
	int r = prologue(l, dev, st, ev);
	if (r) return r;
	return l->allGather((const void *)send, (void *)recv, sendcount, dt, (void *)comm, (void *)st);
}

int gdnc_reduce_scatter(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send,
			uintptr_t recv, size_t recvcount, int dt, int op) {
	int r = prologue(l, dev, st, ev);
	if (r) return r;
	return l->reduceScatter((const void *)send, (void *)recv, recvcount, dt, op, (void *)comm, (void *)st);
}

int gdnc_group(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, gdnc_p2p *ops, int n) {
	int r = prologue(l, dev, st, ev);
	if (r) return r;
	/* Copies to the device first (they are not NCCL calls, and go on the
	   stream now, ahead of the group's kernel). */
	for (int i = 0; i < n; i++) {
		if ((ops[i].kind == 2 || ops[i].kind == 3) && ops[i].bytes)
			CUDA(l->memcpyAsync((void *)ops[i].buf, (const void *)ops[i].src, ops[i].bytes,
					    ops[i].kind == 2 ? gdnc_cudaMemcpyDeviceToDevice : gdnc_cudaMemcpyHostToDevice,
					    (void *)st));
	}
	int any = 0;
	for (int i = 0; i < n; i++) any |= ops[i].kind == 0 || ops[i].kind == 1;
	if (any) {
		r = l->groupStart();
		if (r) return r;
		for (int i = 0; i < n && !r; i++) {
			if (ops[i].kind == 0)
				r = l->send((const void *)ops[i].buf, ops[i].count, ops[i].dt, ops[i].peer, (void *)comm, (void *)st);
			else if (ops[i].kind == 1)
				r = l->recv((void *)ops[i].buf, ops[i].count, ops[i].dt, ops[i].peer, (void *)comm, (void *)st);
		}
		int e = l->groupEnd();
		if (r || e) return r ? r : e;
	}
	/* Copies to the host last: they see what the group received. */
	for (int i = 0; i < n; i++) {
		if (ops[i].kind == 4 && ops[i].bytes)
			CUDA(l->memcpyAsync((void *)ops[i].buf, (const void *)ops[i].src, ops[i].bytes,
					    gdnc_cudaMemcpyDeviceToHost, (void *)st));
	}
	return 0;
}

/* The host step of a bitwise reduction: n chunks of stride bytes at base;
   the bytes [off, off+len) of every chunk are combined into chunk 0's. */
typedef struct {
	unsigned char *base;
	size_t stride, off, len;
	int n, op;
} gdnc_bw;

static void bitwise_fn(void *p) {
	gdnc_bw *a = p;
	unsigned char *dst = a->base + a->off;
	for (int r = 1; r < a->n; r++) {
		const unsigned char *src = a->base + (size_t)r * a->stride + a->off;
		size_t i = 0;
		if (a->op == 0)
			for (; i < a->len; i++) dst[i] &= src[i];
		else if (a->op == 1)
			for (; i < a->len; i++) dst[i] |= src[i];
		else
			for (; i < a->len; i++) dst[i] ^= src[i];
	}
	free(a);
}

int gdnc_bitwise(gdnc_lib *l, int dev, uintptr_t st, uintptr_t ev, uintptr_t comm, uintptr_t send, size_t bytes,
		 uintptr_t tmp, uintptr_t pinned, int nranks, int op, size_t off, size_t len, uintptr_t out) {
	if (!l->launchHostFunc) return gdnc_ncclInvalidUsage; /* checked in Go first */
	int r = prologue(l, dev, st, ev);
	if (r) return r;
	r = l->allGather((const void *)send, (void *)tmp, bytes, gdnc_ncclUint8, (void *)comm, (void *)st);
	if (r) return r;
	CUDA(l->memcpyAsync((void *)pinned, (const void *)tmp, (size_t)nranks * bytes, gdnc_cudaMemcpyDeviceToHost, (void *)st));
	gdnc_bw *a = malloc(sizeof *a);
	if (!a) return gdnc_ncclSystemError;
	*a = (gdnc_bw){(unsigned char *)pinned, bytes, off, len, nranks, op};
	int e = l->launchHostFunc((void *)st, bitwise_fn, a);
	if (e) {
		free(a);
		return GDNC_CUDA_ERROR + e;
	}
	if (out && len) CUDA(l->memcpyAsync((void *)out, (const void *)(pinned + off), len, gdnc_cudaMemcpyHostToDevice, (void *)st));
	return 0;
}
