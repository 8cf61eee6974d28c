// fakecuda.c: a fake CUDA runtime and a fake NCCL in one shared library, for
// gdist's tests on machines without a GPU (package gpu/cudafake builds it).
// It implements exactly the entry points gdist loads, with the real
// libraries' signatures, enum values and error codes, and it is strict where
// the real ones would crash, corrupt memory or only be slow:
//
//   - "Device" memory lives at addresses from 0xd000000000000000 up, which no
//     host code can dereference; each allocation has its own 64 GiB slot, so
//     every copy is checked against the allocation's bounds, and freed
//     memory is never handed out again. New allocations hold 0xa5 bytes.
//   - Copies are checked against their cudaMemcpyKind; async copies must use
//     pinned host memory (cudaHostAlloc); work queued on a stream must come
//     from its device.
//   - Streams are queues run by one thread each; events complete when their
//     stream reaches them. The legacy default stream of each device is one
//     too: its work waits for the work queued before on the device's
//     blocking streams, and theirs for its. cudaMemcpy follows CUDA's "API
//     synchronization behavior": to the device from pinned memory it is
//     synchronous; from pageable memory it syncs the stream, stages the
//     source before returning and completes later (queued there); device
//     to device and cudaMemset are asynchronous (queued there); to the host
//     it waits for the legacy and blocking streams. cudaMemcpyAsync reads
//     its source when its stream runs it. Non-blocking streams are not
//     ordered with the legacy stream at all. fakecudaStreamDelay,
//     fakecudaNCCLDelay and fakecudaKernelDelay ($FAKE_NCCL_DELAY_MS,
//     $FAKE_CUDA_KERNEL_DELAY_MS) start a stream's work, NCCL's, or every
//     kernel and GEMM late, so that a missing cross-stream wait is caught.
//   - Host waits: fakecudaSpinWaits makes cudaStreamSynchronize and the
//     cudaEventSynchronize of an event without cudaEventBlockingSync spin
//     the calling thread (a core busy for the whole wait), as CUDA's
//     default scheduling does; a blocking-sync event's waits sleep.
//     fakecudaLiveEvents counts the events created and not destroyed.
//   - Faults: fakecudaStickyError (a sticky error, as after a kernel
//     fault), fakecudaMemLimit (device memory per device: out of memory),
//     FAKE_CUDA_DRIVER_VERSION below the runtime's version
//     (cudaErrorInsufficientDriver).
//   - NCCL: communicators of one unique id are ranks of one process
//     (threads or goroutines); collectives match by launch order and the
//     last rank to arrive performs the whole collective; point-to-point
//     messages match in order per (sender, receiver). Mismatched
//     collectives set ncclInvalidUsage as the async error (real NCCL would
//     hang or corrupt). Two ranks of one host on one device are refused
//     ("Duplicate GPU"), as real NCCL does: every rank of the communicator
//     fails once all have joined, unless FAKE_NCCL_ALLOW_SHARED_GPU=1. A
//     rank's host is its NCCL_HOSTID (unset: the machine), so processes
//     with NCCL_HOSTIDs of their own may share a device, as with NCCL.
//   - NCCL across processes (FAKE_NCCL_PROCESSES=1 where ncclGetUniqueId
//     runs): the unique id names a rendezvous file (in $FAKE_NCCL_DIR, else
//     $TMPDIR, else /tmp) that every rank's process maps; the ranks meet
//     there under a robust process-shared mutex (a rank killed while
//     holding it does not wedge the others). A collective copies each
//     rank's input into its slot of the file, stamped with the collective's
//     sequence number; every rank then computes its own output from the
//     slots (inputs up to 64 MiB per rank). Send/recv move the bytes in
//     chunks of up to 1 MiB through one mailbox per (sender, receiver); a
//     send completes when the receiver has taken its last chunk. A killed
//     peer gives no asynchronous error: the others wait until aborted.
//     Duplicate GPUs are detected by physical device number and host.
//   - cuBLAS (GEMMs by a reference loop on the stream), NVRTC (CUDA C++
//     compiled for the host with an emulation of blocks, threads, barriers
//     and warps) and the driver API (modules, launches over the fake's
//     device memory): see their section at the end of this file.
//
// Devices: FAKE_CUDA_VISIBLE_DEVICES=a,b,... shows the process those
// physical devices as devices 0, 1, ... (like CUDA_VISIBLE_DEVICES; it
// overrides FAKE_CUDA_DEVICES).
//
// Environment: FAKE_CUDA_DEVICES (number of devices, default 1; 0 means
// none), FAKE_CUDA_VERBOSE=1 (explain every error on stderr),
// FAKE_NCCL_VERSION (default 21903, i.e. 2.19.3), FAKE_NCCL_INIT_TIMEOUT_MS
// (default 30000), FAKE_NCCL_FAIL_AFTER=k (a communicator created while it
// is set reports ncclRemoteError at its k-th collective, counted from 0, and
// that collective hangs until the communicator is aborted). fakencclVanish
// makes the ranks of a device vanish without an asynchronous error.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

static void warnf(const char *fmt, ...) {
	const char *v = getenv("FAKE_CUDA_VERBOSE");
	if (!v || !*v || *v == '0') return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fakecuda: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ======================== CUDA runtime ======================== */

enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInsufficientDriver = 35,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600,
	cudaErrorIllegalAddress = 700,
};

static __thread int last_error;

/* Devices and contexts, as the real runtime has them: the current device is
   per OS thread, and a thread that never called cudaSetDevice works on
   device 0. A call that needs a context (memory, copies, streams, events,
   pointer attributes, NCCL communicator creation) on such a thread creates
   device 0's primary context: ~0.5 GiB there for a rank that works on
   another device, and a failure where devices are in EXCLUSIVE_PROCESS mode.
   The fake counts those calls (fakecudaContexts), and the tests assert that
   none happens. CUDA 12's cudaSetDevice makes the device's primary context
   current at once; CUDA 11's (FAKE_CUDA_RUNTIME_VERSION < 12000) only at the
   next call that needs a context, so a library that looks at the current
   context right after cudaSetDevice (NCCL) sees the previous one, or none
   (then device 0). */
static __thread int cur_dev = -1; /* -1: cudaSetDevice never called on this thread */
static __thread int ctx_cur = -1; /* device of the thread's current context, -1: none */
static unsigned long long ctx_mask; /* devices with a primary context (atomic) */
static int implicit_ctx;            /* context calls on a thread with no device (atomic) */
static char implicit_call[64];
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;

static int rt_version(void) {
	const char *s = getenv("FAKE_CUDA_RUNTIME_VERSION");
	return s && *s ? atoi(s) : 12010;
}

/* The device a call that needs a context works on (see above). */
static int ctx_dev(const char *call) {
	int d = cur_dev;
	if (d < 0) {
		d = 0;
		__atomic_add_fetch(&implicit_ctx, 1, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&ctx_mu);
		snprintf(implicit_call, sizeof implicit_call, "%s", call);
		pthread_mutex_unlock(&ctx_mu);
		warnf("%s on a thread that never set a device: the real runtime creates a context on device 0 here", call);
	}
	__atomic_or_fetch(&ctx_mask, 1ULL << d, __ATOMIC_SEQ_CST);
	ctx_cur = d;
	return d;
}

/* The device of a call that ctx_dev has already accounted for. */
static int eff_dev(void) { return cur_dev < 0 ? 0 : cur_dev; }

static void drain(int dev, int blocking_only);

/* fakecudaContexts reports which devices have a context (a bit mask) and
   how many context-needing calls ran on a thread with no device set (the
   last one's name in call); fakecudaResetContexts clears both. Not CUDA:
   for the tests (package gpu/cudafake). */
API void fakecudaContexts(unsigned long long *mask, int *implicit, char *call, int len) {
	*mask = __atomic_load_n(&ctx_mask, __ATOMIC_SEQ_CST);
	*implicit = __atomic_load_n(&implicit_ctx, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&ctx_mu);
	snprintf(call, len, "%s", implicit_call);
	pthread_mutex_unlock(&ctx_mu);
}

/* fakecudaHold, queued with cudaLaunchHostFunc, is device work that does
   not finish until fakecudaGate(1) opens the gate (as an NCCL kernel waits
   for a peer); fakecudaGate(0) closes it. Not CUDA: for the tests. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open = 1;

API void fakecudaHold(void *arg) {
	(void)arg;
	pthread_mutex_lock(&gate_mu);
	while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
}

API void fakecudaGate(int open) {
	pthread_mutex_lock(&gate_mu);
	gate_open = open;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

/* fakecudaCopyDelay makes every cudaMemcpy and cudaMemset take ms longer:
   a copy to the host returns that much later (so that a test can run the Go
   garbage collector while C reads host memory), and a copy to the device or
   a memset, queued on the default stream, completes that much later (so
   that a missing synchronization reads stale data). */
static int copy_delay_ms;

API void fakecudaCopyDelay(int ms) { __atomic_store_n(&copy_delay_ms, ms, __ATOMIC_SEQ_CST); }

/* fakecudaSpinWaits(1) makes host waits spin as CUDA's default
   scheduling (cudaDeviceScheduleAuto, a few contexts per core) does:
   cudaStreamSynchronize, and cudaEventSynchronize on an event created
   without cudaEventBlockingSync, poll with the thread running (a core's
   CPU time for the whole wait); a blocking-sync event's waits still sleep
   in a condition variable. Off (0, the default), every wait sleeps. Not
   CUDA: for the tests of who waits how. */
static int spin_waits;

API void fakecudaSpinWaits(int on) { __atomic_store_n(&spin_waits, on, __ATOMIC_SEQ_CST); }

static void wait_a_while(pthread_cond_t *cv, pthread_mutex_t *mu);

/* host_wait waits a while for cv (mu held), spinning when spin (mu
   released meanwhile) as the real runtime's spin-wait does. */
static void host_wait(int spin, pthread_cond_t *cv, pthread_mutex_t *mu) {
	if (!spin || !__atomic_load_n(&spin_waits, __ATOMIC_SEQ_CST)) {
		wait_a_while(cv, mu);
		return;
	}
	pthread_mutex_unlock(mu);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 200000L);
	pthread_mutex_lock(mu);
}

/* fakecudaLiveEvents: the events created and not yet destroyed. */
static int live_events;

API int fakecudaLiveEvents(void) { return __atomic_load_n(&live_events, __ATOMIC_SEQ_CST); }

API void fakecudaResetContexts(void) {
	__atomic_store_n(&ctx_mask, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&implicit_ctx, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&ctx_mu);
	implicit_call[0] = 0;
	pthread_mutex_unlock(&ctx_mu);
}

static int seterr(int e) {
	if (e != cudaSuccess && e != cudaErrorNotReady) last_error = e;
	return e;
}

/* fakecudaStickyError(code) makes the process's CUDA context unusable, as a
   kernel fault (cudaErrorIllegalAddress, 700) does: every later call that
   uses the context returns code, cudaGetLastError cannot clear it, waits
   (synchronizations) return it at once, and NCCL calls fail with
   ncclUnhandledCudaError (also as the asynchronous error).
   fakecudaStickyError(0) repairs the context (for the tests that follow: a
   real process never recovers). Not CUDA: for the tests. */
static int sticky;

API void fakecudaStickyError(int code) { __atomic_store_n(&sticky, code, __ATOMIC_SEQ_CST); }

static int sticky_err(void) { return __atomic_load_n(&sticky, __ATOMIC_SEQ_CST); }

#define STICKY()                                          \
	do {                                              \
		int se_ = sticky_err();                   \
		if (se_) return seterr(se_);              \
	} while (0)

/* Waits on cv (mu held) for at most 10 ms, so that a waiter can notice a
   sticky error. */
static void wait_a_while(pthread_cond_t *cv, pthread_mutex_t *mu) {
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += 10 * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cv, mu, &dl);
}

/* fakecudaMemLimit(bytes) caps the device memory each device may have
   allocated at once (cudaMalloc beyond it fails with
   cudaErrorMemoryAllocation, "out of memory"); 0 removes the cap. Not
   CUDA: for the tests. */
static long long mem_limit;
static long long mem_used[64];

API void fakecudaMemLimit(long long bytes) { __atomic_store_n(&mem_limit, bytes, __ATOMIC_SEQ_CST); }

/* The driver's CUDA version: FAKE_CUDA_DRIVER_VERSION (default 12040). A
   driver older than the runtime (FAKE_CUDA_RUNTIME_VERSION) makes
   cudaGetDeviceCount fail with cudaErrorInsufficientDriver, as a CUDA 13
   runtime does on a CUDA 12 driver. */
static int drv_version(void) {
	const char *s = getenv("FAKE_CUDA_DRIVER_VERSION");
	return s && *s ? atoi(s) : 12040;
}

/* The physical device of visible device d (FAKE_CUDA_VISIBLE_DEVICES). */
static int phys_dev(int d) {
	const char *v = getenv("FAKE_CUDA_VISIBLE_DEVICES");
	if (!v || !*v) return d;
	for (int i = 0; i < d && v; i++) {
		v = strchr(v, ',');
		if (v) v++;
	}
	return v ? atoi(v) : d;
}

static int ndevices(void) {
	const char *v = getenv("FAKE_CUDA_VISIBLE_DEVICES");
	if (v && *v) {
		int n = 1;
		for (; *v; v++) n += *v == ',';
		return n;
	}
	const char *s = getenv("FAKE_CUDA_DEVICES");
	if (!s || !*s) return 1;
	return atoi(s);
}

API int cudaGetDeviceCount(int *n) {
	if (drv_version() < rt_version()) {
		*n = 0;
		return seterr(cudaErrorInsufficientDriver);
	}
	int d = ndevices();
	if (d <= 0) {
		*n = 0;
		return seterr(cudaErrorNoDevice);
	}
	*n = d;
	return cudaSuccess;
}

API int cudaSetDevice(int d) {
	if (d < 0 || d >= ndevices()) {
		warnf("cudaSetDevice(%d): there are %d devices", d, ndevices());
		return seterr(cudaErrorInvalidDevice);
	}
	cur_dev = d;
	if (rt_version() >= 12000) {
		__atomic_or_fetch(&ctx_mask, 1ULL << d, __ATOMIC_SEQ_CST);
		ctx_cur = d;
	} else if (ctx_cur != d) {
		ctx_cur = -1; /* CUDA 11: d's context becomes current lazily */
	}
	return cudaSuccess;
}

API int cudaGetDevice(int *d) {
	*d = cur_dev < 0 ? 0 : cur_dev;
	return cudaSuccess;
}

API int cudaDriverGetVersion(int *v) {
	*v = drv_version();
	return cudaSuccess;
}

API int cudaRuntimeGetVersion(int *v) {
	*v = rt_version();
	return cudaSuccess;
}

API int cudaDeviceGetPCIBusId(char *buf, int len, int dev) {
	if (dev < 0 || dev >= ndevices()) return seterr(cudaErrorInvalidDevice);
	snprintf(buf, len, "0000:%02x:00.0", dev + 1);
	return cudaSuccess;
}

API int cudaGetLastError(void) {
	int e = last_error;
	last_error = 0;
	return sticky_err() ? sticky_err() : e;
}

API const char *cudaGetErrorString(int e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
	case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
	}
	return "unrecognized error code";
}

API const char *cudaGetErrorName(int e) {
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorNoDevice: return "cudaErrorNoDevice";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
	case cudaErrorNotReady: return "cudaErrorNotReady";
	case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
	case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
	}
	return "cudaErrorUnknown";
}

/* ---- memory ---- */

#define DEV_BASE 0xd000000000000000ULL
#define SLOT_BITS 36
#define SLOT_MASK ((1ULL << SLOT_BITS) - 1)

typedef struct {
	unsigned char *mem;
	size_t size;
	int dev, live;
} dalloc;

typedef struct {
	unsigned char *p;
	size_t size;
} halloc;

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static dalloc *slots;
static size_t nslots = 1, capslots; /* slot 0 is never used */
static halloc *pins;
static size_t npins, cappins;

/* fakecudaFreedUses counts the calls (copies, memsets, kernel launches,
   GEMMs, NCCL operations, pointer queries) that named an address in an
   allocation already freed: a use after free, which on a GPU reads or
   writes memory that may belong to another allocation by then. Each is
   also the call's error (cudaErrorInvalidValue, ...), which a caller that
   issues work from a goroutine may drop; the count is for the tests
   (cudafake.FreedUses). Freed slots are never reused, so every such use
   is seen. */
static int freed_uses;

API int fakecudaFreedUses(void) { return __atomic_load_n(&freed_uses, __ATOMIC_SEQ_CST); }

/* 1: [p, p+n) lies in a live device allocation (*host, *dev set);
   0: p is not a fake device address; -1: it is one, but not valid for n bytes. */
static int dev_lookup(uintptr_t p, size_t n, unsigned char **host, int *dev) {
	if (p < DEV_BASE) return 0;
	uint64_t slot = (p - DEV_BASE) >> SLOT_BITS, off = (p - DEV_BASE) & SLOT_MASK;
	int r = -1, freed = 0;
	pthread_mutex_lock(&mem_mu);
	if (slot > 0 && slot < nslots && slots[slot].live && off <= slots[slot].size && n <= slots[slot].size - off) {
		*host = slots[slot].mem + off;
		if (dev) *dev = slots[slot].dev;
		r = 1;
	} else if (slot > 0 && slot < nslots && !slots[slot].live) {
		freed = 1;
	}
	pthread_mutex_unlock(&mem_mu);
	if (freed) {
		__atomic_add_fetch(&freed_uses, 1, __ATOMIC_SEQ_CST);
		warnf("%#lx: in an allocation already freed (use after free)", (unsigned long)p);
	}
	return r;
}

static int pinned_lookup(const void *p, size_t n) {
	const unsigned char *q = p;
	int r = 0;
	pthread_mutex_lock(&mem_mu);
	for (size_t i = 0; i < npins; i++) {
		if (q >= pins[i].p && q <= pins[i].p + pins[i].size && n <= (size_t)(pins[i].p + pins[i].size - q)) {
			r = 1;
			break;
		}
	}
	pthread_mutex_unlock(&mem_mu);
	return r;
}

API int cudaMalloc(void **out, size_t n) {
	int dev = ctx_dev("cudaMalloc");
	*out = NULL;
	STICKY();
	if (n == 0) return cudaSuccess;
	if (n > SLOT_MASK) return seterr(cudaErrorMemoryAllocation);
	long long lim = __atomic_load_n(&mem_limit, __ATOMIC_SEQ_CST);
	if (__atomic_add_fetch(&mem_used[dev & 63], (long long)n, __ATOMIC_SEQ_CST) > lim && lim > 0) {
		__atomic_sub_fetch(&mem_used[dev & 63], (long long)n, __ATOMIC_SEQ_CST);
		warnf("cudaMalloc(%zu) on device %d: over the limit of %lld bytes (fakecudaMemLimit)", n, dev, lim);
		return seterr(cudaErrorMemoryAllocation);
	}
	unsigned char *m = NULL; /* 256-byte aligned, as cudaMalloc's (wmma's loads check 32) */
	if (posix_memalign((void **)&m, 256, n)) m = NULL;
	if (!m) {
		__atomic_sub_fetch(&mem_used[dev & 63], (long long)n, __ATOMIC_SEQ_CST);
		return seterr(cudaErrorMemoryAllocation);
	}
	memset(m, 0xa5, n);
	pthread_mutex_lock(&mem_mu);
	if (nslots == capslots || !slots) {
		size_t c = capslots ? 2 * capslots : 1024;
		dalloc *s = realloc(slots, c * sizeof *s);
		if (!s) {
			pthread_mutex_unlock(&mem_mu);
			free(m);
			return seterr(cudaErrorMemoryAllocation);
		}
		slots = s;
		capslots = c;
	}
	size_t slot = nslots++;
	slots[slot] = (dalloc){m, n, dev, 1};
	pthread_mutex_unlock(&mem_mu);
	*out = (void *)(uintptr_t)(DEV_BASE + ((uint64_t)slot << SLOT_BITS));
	return cudaSuccess;
}

/* cudaFree waits until the device has done all the work queued on it, on
   every stream (the real one synchronizes the device): an NCCL kernel that
   waits for a peer keeps it waiting. */
API int cudaFree(void *p) {
	int dev = ctx_dev("cudaFree");
	STICKY();
	if (!p) return cudaSuccess;
	uintptr_t a = (uintptr_t)p;
	if (a < DEV_BASE || ((a - DEV_BASE) & SLOT_MASK) != 0) {
		warnf("cudaFree(%p): not the start of a device allocation", p);
		return seterr(cudaErrorInvalidValue);
	}
	uint64_t slot = (a - DEV_BASE) >> SLOT_BITS;
	pthread_mutex_lock(&mem_mu);
	if (slot == 0 || slot >= nslots || !slots[slot].live) {
		pthread_mutex_unlock(&mem_mu);
		warnf("cudaFree(%p): not a live allocation (double free?)", p);
		return seterr(cudaErrorInvalidValue);
	}
	pthread_mutex_unlock(&mem_mu);
	drain(dev, 0);
	pthread_mutex_lock(&mem_mu);
	if (!slots[slot].live) {
		pthread_mutex_unlock(&mem_mu);
		warnf("cudaFree(%p): freed twice at once", p);
		return seterr(cudaErrorInvalidValue);
	}
	unsigned char *m = slots[slot].mem;
	slots[slot].live = 0;
	slots[slot].mem = NULL;
	__atomic_sub_fetch(&mem_used[slots[slot].dev & 63], (long long)slots[slot].size, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&mem_mu);
	free(m);
	return cudaSuccess;
}

API int cudaHostAlloc(void **out, size_t n, unsigned int flags) {
	STICKY();
	(void)flags;
	ctx_dev("cudaHostAlloc");
	*out = NULL;
	unsigned char *m = malloc(n ? n : 1);
	if (!m) return seterr(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&mem_mu);
	if (npins == cappins) {
		size_t c = cappins ? 2 * cappins : 256;
		halloc *h = realloc(pins, c * sizeof *h);
		if (!h) {
			pthread_mutex_unlock(&mem_mu);
			free(m);
			return seterr(cudaErrorMemoryAllocation);
		}
		pins = h;
		cappins = c;
	}
	pins[npins++] = (halloc){m, n};
	pthread_mutex_unlock(&mem_mu);
	*out = m;
	return cudaSuccess;
}

API int cudaMallocHost(void **out, size_t n) { return cudaHostAlloc(out, n, 0); }

/* cudaFreeHost, like cudaFree, waits for the device. */
API int cudaFreeHost(void *p) {
	STICKY();
	drain(ctx_dev("cudaFreeHost"), 0);
	pthread_mutex_lock(&mem_mu);
	for (size_t i = 0; i < npins; i++) {
		if (pins[i].p == p) {
			pins[i] = pins[--npins];
			pthread_mutex_unlock(&mem_mu);
			free(p);
			return cudaSuccess;
		}
	}
	pthread_mutex_unlock(&mem_mu);
	warnf("cudaFreeHost(%p): not from cudaHostAlloc", p);
	return seterr(cudaErrorInvalidValue);
}

/* Resolves one side of a copy. want: 1 device, 0 host, -1 either. */
static int side(const char *call, const char *which, uintptr_t p, size_t n, int want, int async, unsigned char **out) {
	unsigned char *h;
	int r = dev_lookup(p, n, &h, NULL);
	if (r < 0) {
		warnf("%s: %s %#lx is not a live device range of %zu bytes", call, which, (unsigned long)p, n);
		return cudaErrorInvalidValue;
	}
	if (r == 1) {
		if (want == 0) {
			warnf("%s: %s %#lx is device memory, but the copy kind says host", call, which, (unsigned long)p);
			return cudaErrorInvalidValue;
		}
		*out = h;
		return cudaSuccess;
	}
	if (want == 1) {
		warnf("%s: %s %#lx is host memory, but the copy kind says device", call, which, (unsigned long)p);
		return cudaErrorInvalidValue;
	}
	if (p == 0) {
		warnf("%s: %s is NULL", call, which);
		return cudaErrorInvalidValue;
	}
	if (async && !pinned_lookup((void *)p, n)) {
		warnf("%s: %s %#lx is pageable host memory; async copies need cudaHostAlloc memory", call, which, (unsigned long)p);
		return cudaErrorInvalidValue;
	}
	*out = (unsigned char *)p;
	return cudaSuccess;
}

static int copy_sides(const char *call, void *dst, const void *src, size_t n, int kind, int async,
		      unsigned char **d, unsigned char **s) {
	int wd, ws;
	switch (kind) {
	case 0: wd = 0; ws = 0; break;
	case 1: wd = 1; ws = 0; break;
	case 2: wd = 0; ws = 1; break;
	case 3: wd = 1; ws = 1; break;
	case 4: wd = -1; ws = -1; break;
	default:
		warnf("%s: bad cudaMemcpyKind %d", call, kind);
		return cudaErrorInvalidValue;
	}
	int e = side(call, "dst", (uintptr_t)dst, n, wd, async, d);
	if (e) return e;
	return side(call, "src", (uintptr_t)src, n, ws, async, s);
}

/* ---- streams and events ---- */

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x45564e54u

typedef struct task {
	struct task *next;
	void (*fn)(void *);
	void *arg;
	int nwait; /* before fn: wait until wait[i] has done want[i] tasks */
	struct stream **wait;
	uint64_t *want;
} task;

typedef struct stream {
	unsigned magic;
	int dev;
	unsigned flags;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	task *head, *tail;
	uint64_t enq, done;
	int stop;
	int delay_ms; /* fakecudaStreamDelay: each task starts this much later */
	struct stream *next;
} stream;

typedef struct event {
	unsigned magic;
	int dev;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t rec, done; /* records so far; the latest record done */
	/* Each record is a generation; a wait is for one generation, which
	   is done when its own mark ran (records on different streams may
	   complete out of order, as in CUDA, where a wait enqueued before a
	   later record refers to the earlier one): every generation up to
	   prefix is done, and those in extra[0:nextra] beyond it. */
	uint64_t prefix;
	uint64_t *extra;
	int nextra, capextra;
	int timing; /* not cudaEventDisableTiming: done_at is kept */
	int blocking; /* cudaEventBlockingSync: waits sleep (fakecudaSpinWaits) */
	double done_at; /* seconds (CLOCK_MONOTONIC) when mark done was reached */
} event;

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static stream *streams;

static int is_legacy(void *s) { return s == NULL || s == (void *)1 || s == (void *)2; }

static void ev_mark(void *a);
static void ev_wait(void *a);

/* fakecudaNCCLDelay: every NCCL collective and send/recv starts this much
   later on its stream (ms); fakecudaKernelDelay: every kernel launch and
   cuBLAS GEMM (the compute streams' work). -1: not set yet, read from
   $FAKE_NCCL_DELAY_MS and $FAKE_CUDA_KERNEL_DELAY_MS at first use (for
   tests that run ranks as processes). */
static int nccl_delay_ms = -1, kernel_delay_ms = -1;

static void delay(int *ms, const char *env) {
	int v = __atomic_load_n(ms, __ATOMIC_SEQ_CST);
	if (v < 0) {
		const char *e = getenv(env);
		v = 0;
		if (e && *e) {
			char *end;
			long x = strtol(e, &end, 10);
			if (*end || x < 0 || x > 1000000) {
				/* refused, not read as 0: a test meant to catch a
				   missing wait would pass without its delay */
				fprintf(stderr, "fakecuda: $%s=\"%s\": want a whole number of milliseconds, 0 to 1000000\n", env, e);
				abort();
			}
			v = (int)x;
		}
		int unset = -1;
		__atomic_compare_exchange_n(ms, &unset, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		v = __atomic_load_n(ms, __ATOMIC_SEQ_CST);
	}
	if (v > 0) usleep((useconds_t)v * 1000);
}

static void *worker(void *a) {
	stream *s = a;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
		if (!s->head) break;
		task *t = s->head;
		s->head = t->next;
		if (!s->head) s->tail = NULL;
		pthread_mutex_unlock(&s->mu);
		for (int i = 0; i < t->nwait; i++) {
			stream *w = t->wait[i];
			pthread_mutex_lock(&w->mu);
			while (w->done < t->want[i]) pthread_cond_wait(&w->cv, &w->mu);
			pthread_mutex_unlock(&w->mu);
		}
		/* fakecudaStreamDelay: the stream's work (not its event marks
		   and waits) starts late, as on a busy GPU, so that another
		   stream that does not wait for it runs ahead */
		int dl = __atomic_load_n(&s->delay_ms, __ATOMIC_SEQ_CST);
		if (dl > 0 && t->fn != ev_mark && t->fn != ev_wait) usleep((useconds_t)dl * 1000);
		t->fn(t->arg);
		free(t->wait);
		free(t->want);
		free(t);
		pthread_mutex_lock(&s->mu);
		s->done++;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int check_stream(const char *call, void *h, stream **out) {
	if (is_legacy(h)) {
		*out = NULL;
		return cudaSuccess;
	}
	stream *s = h;
	if (s->magic != STREAM_MAGIC) {
		warnf("%s: %p is not a live stream", call, h);
		return cudaErrorInvalidResourceHandle;
	}
	*out = s;
	return cudaSuccess;
}

/* Waits until the streams of dev (only the blocking ones if blocking_only)
   have done everything queued so far. */
static void drain(int dev, int blocking_only) {
	stream *list[1024];
	uint64_t want[1024];
	int n = 0;
	pthread_mutex_lock(&streams_mu);
	for (stream *s = streams; s && n < 1024; s = s->next) {
		if (s->dev != dev || (blocking_only && (s->flags & 1))) continue;
		pthread_mutex_lock(&s->mu);
		want[n] = s->enq;
		pthread_mutex_unlock(&s->mu);
		list[n++] = s;
	}
	pthread_mutex_unlock(&streams_mu);
	for (int i = 0; i < n; i++) {
		pthread_mutex_lock(&list[i]->mu);
		while (list[i]->done < want[i] && !sticky_err()) wait_a_while(&list[i]->cv, &list[i]->mu);
		pthread_mutex_unlock(&list[i]->mu);
	}
}

static void *worker(void *a);

/* The legacy default stream of each device, made at its first use: a
   stream like the others, except that its work waits for the work queued
   before it on the device's blocking streams, and theirs for its. */
#define MAXDEV 64
static stream *legacy[MAXDEV];
static pthread_mutex_t legacy_mu = PTHREAD_MUTEX_INITIALIZER;

static stream *legacy_of(int dev) {
	pthread_mutex_lock(&legacy_mu);
	stream *s = legacy[dev];
	if (!s) {
		s = calloc(1, sizeof *s);
		s->magic = STREAM_MAGIC;
		s->dev = dev;
		pthread_mutex_init(&s->mu, NULL);
		pthread_cond_init(&s->cv, NULL);
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &at, worker, s) != 0) abort();
		pthread_attr_destroy(&at);
		pthread_mutex_lock(&streams_mu);
		s->next = streams;
		streams = s;
		pthread_mutex_unlock(&streams_mu);
		legacy[dev] = s;
	}
	pthread_mutex_unlock(&legacy_mu);
	return s;
}

/* Runs fn(arg) in stream order on the stream's thread (NULL: the legacy
   default stream of the current device). Work on the legacy stream first
   waits for the work queued so far on the device's blocking streams, and
   work on a blocking stream for the work queued so far on the legacy
   stream, as the real runtime orders them. */
static void submit(stream *s, void (*fn)(void *), void *arg) {
	task *t = calloc(1, sizeof *t);
	t->fn = fn;
	t->arg = arg;
	if (!s) {
		s = legacy_of(eff_dev());
		int cap = 16;
		t->wait = malloc(cap * sizeof *t->wait);
		t->want = malloc(cap * sizeof *t->want);
		pthread_mutex_lock(&streams_mu);
		for (stream *o = streams; o; o = o->next) {
			if (o == s || o->dev != s->dev || (o->flags & 1)) continue;
			if (t->nwait == cap) {
				cap *= 2;
				t->wait = realloc(t->wait, cap * sizeof *t->wait);
				t->want = realloc(t->want, cap * sizeof *t->want);
			}
			pthread_mutex_lock(&o->mu);
			t->want[t->nwait] = o->enq;
			pthread_mutex_unlock(&o->mu);
			t->wait[t->nwait++] = o;
		}
		pthread_mutex_unlock(&streams_mu);
	} else if (!(s->flags & 1)) {
		stream *l = legacy_of(s->dev);
		t->wait = malloc(sizeof *t->wait);
		t->want = malloc(sizeof *t->want);
		pthread_mutex_lock(&l->mu);
		t->want[0] = l->enq;
		pthread_mutex_unlock(&l->mu);
		t->wait[0] = l;
		t->nwait = 1;
	}
	pthread_mutex_lock(&s->mu);
	if (s->tail)
		s->tail->next = t;
	else
		s->head = t;
	s->tail = t;
	s->enq++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* Accounts for the context of call and checks that s (NULL: the legacy
   stream) is on the current device. */
static int stream_dev_ok(const char *call, stream *s) {
	int d = ctx_dev(call);
	if (s && s->dev != d) {
		warnf("%s: the stream is on device %d but device %d is current", call, s->dev, d);
		return 0;
	}
	return 1;
}

API int cudaStreamCreateWithFlags(void **out, unsigned int flags) {
	STICKY();
	stream *s = calloc(1, sizeof *s);
	if (!s) return seterr(cudaErrorMemoryAllocation);
	s->magic = STREAM_MAGIC;
	s->dev = ctx_dev("cudaStreamCreateWithFlags");
	s->flags = flags;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, worker, s) != 0) {
		pthread_attr_destroy(&at);
		free(s);
		return seterr(cudaErrorMemoryAllocation);
	}
	pthread_attr_destroy(&at);
	pthread_mutex_lock(&streams_mu);
	s->next = streams;
	streams = s;
	pthread_mutex_unlock(&streams_mu);
	*out = s;
	return cudaSuccess;
}

API int cudaStreamCreate(void **out) { return cudaStreamCreateWithFlags(out, 0); }

API int cudaStreamDestroy(void *h) {
	STICKY();
	stream *s;
	ctx_dev("cudaStreamDestroy");
	int e = check_stream("cudaStreamDestroy", h, &s);
	if (e || !s) return seterr(e ? e : cudaErrorInvalidResourceHandle);
	pthread_mutex_lock(&streams_mu);
	for (stream **p = &streams; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	pthread_mutex_unlock(&streams_mu);
	pthread_mutex_lock(&s->mu);
	s->magic = 0; /* the struct is never freed: late users see a dead handle */
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

API int cudaStreamSynchronize(void *h) {
	STICKY();
	stream *s;
	int dev = ctx_dev("cudaStreamSynchronize");
	int e = check_stream("cudaStreamSynchronize", h, &s);
	if (e) return seterr(e);
	if (!s) {
		drain(dev, 1); /* the legacy stream and the blocking ones */
		STICKY();
		return cudaSuccess;
	}
	pthread_mutex_lock(&s->mu);
	uint64_t want = s->enq;
	while (s->done < want && !sticky_err()) host_wait(1, &s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	STICKY();
	return cudaSuccess;
}

API int cudaStreamQuery(void *h) {
	STICKY();
	stream *s;
	ctx_dev("cudaStreamQuery");
	int e = check_stream("cudaStreamQuery", h, &s);
	if (e) return seterr(e);
	if (!s) s = legacy_of(eff_dev());
	pthread_mutex_lock(&s->mu);
	int r = s->done == s->enq ? cudaSuccess : cudaErrorNotReady;
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* fakecudaStreamDelay makes every later task of stream h (NULL: the
   current device's legacy default stream), but its event records and
   waits, start ms later, until called again with 0; fakecudaNCCLDelay
   does so for every NCCL collective and send/recv. Not CUDA: for the
   tests, so that a missing cross-stream wait reads stale or unfinished
   data (gpu/cudafake's StreamDelay, NCCLDelay). */
API int fakecudaStreamDelay(void *h, int ms) {
	stream *s;
	if (check_stream("fakecudaStreamDelay", h, &s)) return cudaErrorInvalidResourceHandle;
	if (!s) s = legacy_of(eff_dev());
	__atomic_store_n(&s->delay_ms, ms, __ATOMIC_SEQ_CST);
	return cudaSuccess;
}

API void fakecudaNCCLDelay(int ms) { __atomic_store_n(&nccl_delay_ms, ms, __ATOMIC_SEQ_CST); }

API void fakecudaKernelDelay(int ms) { __atomic_store_n(&kernel_delay_ms, ms, __ATOMIC_SEQ_CST); }

API int cudaDeviceSynchronize(void) {
	STICKY();
	drain(ctx_dev("cudaDeviceSynchronize"), 0);
	STICKY();
	return cudaSuccess;
}

struct copy_task {
	unsigned char *d;
	const unsigned char *s;
	size_t n;
	int set, v;
	int delay; /* ms (fakecudaCopyDelay) */
	unsigned char *own; /* freed after the copy */
};

static void run_copy(void *a) {
	struct copy_task *c = a;
	if (c->delay > 0) usleep((useconds_t)c->delay * 1000);
	if (c->set)
		memset(c->d, c->v, c->n);
	else
		memmove(c->d, c->s, c->n);
	free(c->own);
	free(c);
}

/* cudaMemcpy follows CUDA's "API synchronization behavior": to the device
   from pinned host memory it is synchronous to the host (queued on the
   legacy default stream, it returns once done, having read the source
   then); from pageable host memory a stream sync comes first, the source
   is staged (read) before the call returns, and the copy to the device
   completes later, asynchronously; device to device is asynchronous (no
   host synchronization). A copy to the host waits for the legacy stream
   and the blocking streams, then copies. fakecudaCopyDelay slows them all:
   staging takes that long before the source is read (as a large buffer's
   staging does: the source must stay valid throughout the call), and a
   copy in stream order completes that much later. */
API int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
	STICKY();
	if (n == 0) return cudaSuccess;
	unsigned char *d, *s, *h;
	int dev = ctx_dev("cudaMemcpy");
	int e = copy_sides("cudaMemcpy", dst, src, n, kind, 0, &d, &s);
	if (e) return seterr(e);
	int delay = __atomic_load_n(&copy_delay_ms, __ATOMIC_SEQ_CST);
	if (dev_lookup((uintptr_t)dst, n, &h, NULL) == 1) {
		struct copy_task *c = calloc(1, sizeof *c);
		*c = (struct copy_task){d, s, n, 0, 0, delay, NULL};
		if (dev_lookup((uintptr_t)src, n, &h, NULL) == 1) { /* device to device */
			submit(NULL, run_copy, c);
			return cudaSuccess;
		}
		if (pinned_lookup(src, n)) { /* synchronous: done when it returns */
			submit(NULL, run_copy, c);
			drain(dev, 1);
			STICKY();
			return cudaSuccess;
		}
		drain(dev, 1); /* pageable: a stream sync, then staging */
		STICKY();
		if (delay > 0) usleep((useconds_t)delay * 1000);
		c->own = malloc(n);
		memcpy(c->own, s, n);
		c->s = c->own;
		submit(NULL, run_copy, c);
		return cudaSuccess;
	}
	drain(dev, 1);
	STICKY();
	if (delay > 0) usleep((useconds_t)delay * 1000);
	memmove(d, s, n);
	return cudaSuccess;
}

API int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *h) {
	STICKY();
	stream *st;
	int e = check_stream("cudaMemcpyAsync", h, &st);
	if (e) return seterr(e);
	if (!stream_dev_ok("cudaMemcpyAsync", st)) return seterr(cudaErrorInvalidResourceHandle);
	if (n == 0) return cudaSuccess;
	unsigned char *d, *s;
	e = copy_sides("cudaMemcpyAsync", dst, src, n, kind, 1, &d, &s);
	if (e) return seterr(e);
	struct copy_task *c = malloc(sizeof *c);
	*c = (struct copy_task){d, s, n, 0, 0, 0, NULL};
	submit(st, run_copy, c);
	return cudaSuccess;
}

API int cudaMemset(void *p, int v, size_t n) {
	STICKY();
	if (n == 0) return cudaSuccess;
	unsigned char *d;
	ctx_dev("cudaMemset");
	int e = side("cudaMemset", "ptr", (uintptr_t)p, n, 1, 0, &d);
	if (e) return seterr(e);
	struct copy_task *c = calloc(1, sizeof *c);
	*c = (struct copy_task){d, NULL, n, 1, v, __atomic_load_n(&copy_delay_ms, __ATOMIC_SEQ_CST), NULL};
	submit(NULL, run_copy, c); /* asynchronous, like cudaMemcpy to the device */
	return cudaSuccess;
}

API int cudaMemsetAsync(void *p, int v, size_t n, void *h) {
	STICKY();
	stream *st;
	int e = check_stream("cudaMemsetAsync", h, &st);
	if (e) return seterr(e);
	if (!stream_dev_ok("cudaMemsetAsync", st)) return seterr(cudaErrorInvalidResourceHandle);
	if (n == 0) return cudaSuccess;
	unsigned char *d;
	e = side("cudaMemsetAsync", "ptr", (uintptr_t)p, n, 1, 1, &d);
	if (e) return seterr(e);
	struct copy_task *c = malloc(sizeof *c);
	*c = (struct copy_task){d, NULL, n, 1, v, 0, NULL};
	submit(st, run_copy, c);
	return cudaSuccess;
}

API int cudaLaunchHostFunc(void *h, void (*fn)(void *), void *arg) {
	STICKY();
	stream *st;
	int e = check_stream("cudaLaunchHostFunc", h, &st);
	if (e) return seterr(e);
	if (!stream_dev_ok("cudaLaunchHostFunc", st)) return seterr(cudaErrorInvalidResourceHandle);
	if (!fn) return seterr(cudaErrorInvalidValue);
	submit(st, fn, arg);
	return cudaSuccess;
}

static int check_event(const char *call, void *h, event **out) {
	event *e = h;
	if (!e || e->magic != EVENT_MAGIC) {
		warnf("%s: %p is not a live event", call, h);
		return cudaErrorInvalidResourceHandle;
	}
	*out = e;
	return cudaSuccess;
}

API int cudaEventCreateWithFlags(void **out, unsigned int flags) {
	STICKY();
	event *e = calloc(1, sizeof *e);
	if (!e) return seterr(cudaErrorMemoryAllocation);
	e->magic = EVENT_MAGIC;
	e->timing = !(flags & 2); /* cudaEventDisableTiming */
	e->blocking = flags & 1;  /* cudaEventBlockingSync */
	__atomic_add_fetch(&live_events, 1, __ATOMIC_SEQ_CST);
	e->dev = ctx_dev("cudaEventCreateWithFlags");
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	*out = e;
	return cudaSuccess;
}

API int cudaEventCreate(void **out) { return cudaEventCreateWithFlags(out, 0); }

struct evmark {
	event *e;
	uint64_t g;
};

/* gen_done: whether generation g of e is done (e->mu held). */
static int gen_done(event *e, uint64_t g) {
	if (g <= e->prefix) return 1;
	for (int i = 0; i < e->nextra; i++)
		if (e->extra[i] == g) return 1;
	return 0;
}

/* gen_mark records that generation g of e is done (e->mu held). */
static void gen_mark(event *e, uint64_t g) {
	if (g <= e->prefix) return;
	if (g == e->prefix + 1) {
		e->prefix = g;
	} else {
		if (e->nextra == e->capextra) {
			e->capextra = e->capextra ? 2 * e->capextra : 8;
			e->extra = realloc(e->extra, e->capextra * sizeof *e->extra);
		}
		e->extra[e->nextra++] = g;
	}
	for (int moved = 1; moved;) { /* fold the extras that now extend the prefix */
		moved = 0;
		for (int i = 0; i < e->nextra; i++) {
			if (e->extra[i] == e->prefix + 1) {
				e->prefix++;
				e->extra[i] = e->extra[--e->nextra];
				moved = 1;
				break;
			}
		}
	}
}

static void ev_mark(void *a) {
	struct evmark *m = a;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	pthread_mutex_lock(&m->e->mu);
	gen_mark(m->e, m->g);
	if (m->g > m->e->done) {
		m->e->done = m->g;
		m->e->done_at = ts.tv_sec + ts.tv_nsec * 1e-9;
	}
	pthread_cond_broadcast(&m->e->cv);
	pthread_mutex_unlock(&m->e->mu);
	free(m);
}

static void ev_wait(void *a) {
	struct evmark *m = a;
	pthread_mutex_lock(&m->e->mu);
	while (!gen_done(m->e, m->g)) pthread_cond_wait(&m->e->cv, &m->e->mu);
	pthread_mutex_unlock(&m->e->mu);
	free(m);
}

API int cudaEventRecord(void *eh, void *sh) {
	STICKY();
	event *e;
	stream *s;
	int r = check_event("cudaEventRecord", eh, &e);
	if (!r) r = check_stream("cudaEventRecord", sh, &s);
	if (r) return seterr(r);
	if (!stream_dev_ok("cudaEventRecord", s)) return seterr(cudaErrorInvalidResourceHandle);
	if (e->dev != eff_dev()) {
		warnf("cudaEventRecord: the event is on device %d but device %d is current", e->dev, eff_dev());
		return seterr(cudaErrorInvalidResourceHandle);
	}
	pthread_mutex_lock(&e->mu);
	uint64_t g = ++e->rec;
	pthread_mutex_unlock(&e->mu);
	struct evmark *m = malloc(sizeof *m);
	*m = (struct evmark){e, g};
	submit(s, ev_mark, m);
	return cudaSuccess;
}

API int cudaEventQuery(void *eh) {
	STICKY();
	event *e;
	ctx_dev("cudaEventQuery");
	int r = check_event("cudaEventQuery", eh, &e);
	if (r) return seterr(r);
	pthread_mutex_lock(&e->mu);
	r = gen_done(e, e->rec) ? cudaSuccess : cudaErrorNotReady;
	pthread_mutex_unlock(&e->mu);
	return r;
}

API int cudaEventSynchronize(void *eh) {
	STICKY();
	event *e;
	ctx_dev("cudaEventSynchronize");
	int r = check_event("cudaEventSynchronize", eh, &e);
	if (r) return seterr(r);
	pthread_mutex_lock(&e->mu);
	uint64_t g = e->rec;
	while (!gen_done(e, g) && !sticky_err()) host_wait(!e->blocking, &e->cv, &e->mu);
	pthread_mutex_unlock(&e->mu);
	STICKY();
	return cudaSuccess;
}

/* The time between two timing events' completions, as the host clock saw
   the fake's queue reach them; both recorded and done, else not ready. */
API int cudaEventElapsedTime(float *ms, void *start, void *end) {
	STICKY();
	event *a, *b;
	ctx_dev("cudaEventElapsedTime");
	int r = check_event("cudaEventElapsedTime", start, &a);
	if (!r) r = check_event("cudaEventElapsedTime", end, &b);
	if (r) return seterr(r);
	if (!ms) return seterr(cudaErrorInvalidValue);
	if (!a->timing || !b->timing) {
		warnf("cudaEventElapsedTime: an event created with cudaEventDisableTiming");
		return seterr(cudaErrorInvalidResourceHandle);
	}
	pthread_mutex_lock(&a->mu);
	uint64_t arec = a->rec, adone = a->done;
	double at = a->done_at;
	pthread_mutex_unlock(&a->mu);
	pthread_mutex_lock(&b->mu);
	uint64_t brec = b->rec, bdone = b->done;
	double bt = b->done_at;
	pthread_mutex_unlock(&b->mu);
	if (!arec || !brec) return seterr(cudaErrorInvalidResourceHandle);
	if (adone < arec || bdone < brec) return cudaErrorNotReady;
	*ms = (float)((bt - at) * 1e3);
	return cudaSuccess;
}

API int cudaEventDestroy(void *eh) {
	event *e;
	ctx_dev("cudaEventDestroy");
	int r = check_event("cudaEventDestroy", eh, &e);
	if (r) return seterr(r);
	e->magic = 0; /* never freed: queued marks may still point at it */
	__atomic_sub_fetch(&live_events, 1, __ATOMIC_SEQ_CST);
	return cudaSuccess;
}

API int cudaStreamWaitEvent(void *sh, void *eh, unsigned int flags) {
	STICKY();
	(void)flags;
	event *e;
	stream *s;
	int r = check_event("cudaStreamWaitEvent", eh, &e);
	if (!r) r = check_stream("cudaStreamWaitEvent", sh, &s);
	if (r) return seterr(r);
	if (!stream_dev_ok("cudaStreamWaitEvent", s)) return seterr(cudaErrorInvalidResourceHandle);
	pthread_mutex_lock(&e->mu);
	uint64_t g = e->rec;
	pthread_mutex_unlock(&e->mu);
	struct evmark *m = malloc(sizeof *m);
	*m = (struct evmark){e, g};
	submit(s, ev_wait, m);
	return cudaSuccess;
}

struct attrs {
	int type;
	int device;
	void *devicePointer;
	void *hostPointer;
};

API int cudaPointerGetAttributes(void *a, const void *p) {
	STICKY();
	struct attrs *at = a;
	int cur = ctx_dev("cudaPointerGetAttributes");
	memset(at, 0, sizeof *at);
	unsigned char *h;
	int dev;
	if (dev_lookup((uintptr_t)p, 0, &h, &dev) == 1) {
		at->type = 2;
		at->device = dev;
		at->devicePointer = (void *)p;
		return cudaSuccess;
	}
	if (pinned_lookup(p, 0)) {
		at->type = 1;
		at->device = cur;
		at->devicePointer = at->hostPointer = (void *)p;
		return cudaSuccess;
	}
	at->type = 0;
	at->device = -2;
	return cudaSuccess;
}

/* ======================== NCCL ======================== */

typedef struct {
	char internal[128];
} ncclUniqueId;

enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
};

/* ncclDataType_t */
enum { tInt8 = 0, tUint8 = 1, tInt32 = 2, tUint32 = 3, tInt64 = 4, tUint64 = 5, tFloat16 = 6, tFloat32 = 7, tFloat64 = 8, tBfloat16 = 9 };
/* ncclRedOp_t */
enum { oSum = 0, oProd = 1, oMax = 2, oMin = 3, oAvg = 4 };

static size_t dt_size(int d) {
	switch (d) {
	case tInt8: case tUint8: return 1;
	case tFloat16: case tBfloat16: return 2;
	case tInt32: case tUint32: case tFloat32: return 4;
	case tInt64: case tUint64: case tFloat64: return 8;
	}
	return 0;
}

#define MAXR 64
#define COMM_MAGIC 0x4e43434cu

enum { T_ALLREDUCE = 1, T_BCAST, T_REDUCE, T_ALLGATHER, T_REDSCAT };

static const char *tname(int t) {
	switch (t) {
	case T_ALLREDUCE: return "ncclAllReduce";
	case T_BCAST: return "ncclBroadcast";
	case T_REDUCE: return "ncclReduce";
	case T_ALLGATHER: return "ncclAllGather";
	case T_REDSCAT: return "ncclReduceScatter";
	}
	return "?";
}

typedef struct clique clique;

typedef struct ncclComm {
	unsigned magic;
	clique *cl;
	int rank, n, dev;
	uint64_t seq; /* collectives launched so far */
	int aborted, destroyed;
	int async_err; /* atomic */
	int pending;   /* stream tasks in flight (atomic) */
	long fail_after;
	char lasterr[512];
	char hostid[64]; /* NCCL_HOSTID when it joined ("": the machine's own) */
	int coll_conn;   /* its first collective was launched (connected) */
	unsigned char p2p_conn[MAXR]; /* per peer: bit 1 send, bit 2 recv connected */
	struct xhdr *x; /* cross-process rendezvous (NULL: ranks of one process) */
} ncclComm;

typedef struct coll {
	int type;
	const unsigned char *send;
	unsigned char *recv;
	size_t count;
	int dt, op, root;
	ncclComm *comm;
	stream *st;
	uint64_t seq;
} coll;

typedef struct msg {
	struct msg *next;
	const unsigned char *buf;
	size_t bytes;
	int done;
} msg;

struct clique {
	unsigned char id[128];
	int n, joined, complete;
	ncclComm *ranks[MAXR];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	clique *next;
	uint64_t cur;
	int posted;
	coll *slot[MAXR];
	msg *qh[MAXR][MAXR], *qt[MAXR][MAXR];
	int coll_arrived;                /* ranks that launched a collective */
	unsigned char parr[MAXR][MAXR]; /* [from][to]: bit 1 the send, bit 2 the recv launched */
};

static pthread_mutex_t cliques_mu = PTHREAD_MUTEX_INITIALIZER;
static clique *joining;
static int comm_inits; /* ncclCommInitRank calls that made a communicator (atomic) */
static unsigned long long vanished; /* devices whose ranks vanished (atomic bit mask) */

/* fakencclVanish(dev) makes the ranks on device dev vanish as a process
   that dies does over NVLink, P2P or shared memory: their kernels, pending
   and later, never run, and no communicator gets an asynchronous error, so
   the peers' kernels wait for them until they are aborted.
   fakencclVanish(-1) brings every device back. Not NCCL: for the tests. */
API void fakencclVanish(int dev) {
	if (dev < 0)
		__atomic_store_n(&vanished, 0, __ATOMIC_SEQ_CST);
	else
		__atomic_or_fetch(&vanished, 1ULL << dev, __ATOMIC_SEQ_CST);
}

static int is_vanished(int dev) { return (__atomic_load_n(&vanished, __ATOMIC_SEQ_CST) >> dev) & 1; }

/* fakencclCommInits is the number of communicators ncclCommInitRank made
   (one per rank and communicator; each costs real NCCL time and GPU
   memory); fakencclResetCommInits clears it. Not NCCL: for the tests. */
API int fakencclCommInits(void) { return __atomic_load_n(&comm_inits, __ATOMIC_SEQ_CST); }
API void fakencclResetCommInits(void) { __atomic_store_n(&comm_inits, 0, __ATOMIC_SEQ_CST); }
static __thread char tl_lasterr[512];

static void set_last(ncclComm *c, const char *fmt, ...) {
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	snprintf(tl_lasterr, sizeof tl_lasterr, "%s", buf);
	if (c) snprintf(c->lasterr, sizeof c->lasterr, "%s", buf);
	warnf("nccl: %s", buf);
}

API int ncclGetVersion(int *v) {
	const char *s = getenv("FAKE_NCCL_VERSION");
	*v = s && *s ? atoi(s) : 21903;
	return ncclSuccess;
}

API const char *ncclGetErrorString(int r) {
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	}
	return "unknown result code";
}

API const char *ncclGetLastError(ncclComm *c) {
	if (c && c->magic == COMM_MAGIC) return c->lasterr;
	return tl_lasterr;
}

#define XPREFIX "fakenccl-x:"
static int x_uniqueid(ncclUniqueId *id, uint64_t k);
static int x_init(ncclComm **out, int n, const char *path, int rank, int dev);

API int ncclGetUniqueId(ncclUniqueId *id) {
	static uint64_t counter;
	uint64_t k = __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
	const char *xp = getenv("FAKE_NCCL_PROCESSES");
	if (xp && *xp == '1') return x_uniqueid(id, k);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	memset(id, 0, sizeof *id);
	snprintf(id->internal, sizeof id->internal, "fakenccl:%d:%llu:%lld.%09ld", (int)getpid(),
		 (unsigned long long)k, (long long)ts.tv_sec, ts.tv_nsec);
	return ncclSuccess;
}

static int check_comm(const char *call, ncclComm *c) {
	if (!c || c->magic != COMM_MAGIC || c->destroyed) {
		set_last(NULL, "%s: %p is not a live communicator", call, (void *)c);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

/* The device of a new communicator: that of the thread's current context.
   With CUDA 11, cudaSetDevice alone leaves none current, so NCCL takes
   device 0: a caller makes the context current first (cudaFree(NULL) after
   cudaSetDevice). */
static int init_dev(void) {
	if (rt_version() >= 12000 || cur_dev < 0) return ctx_dev("ncclCommInitRank");
	if (ctx_cur >= 0) {
		if (ctx_cur != cur_dev)
			warnf("ncclCommInitRank: CUDA 11: device %d is set but device %d's context is current; NCCL uses %d",
			      cur_dev, ctx_cur, ctx_cur);
		return ctx_cur;
	}
	__atomic_add_fetch(&implicit_ctx, 1, __ATOMIC_SEQ_CST);
	__atomic_or_fetch(&ctx_mask, 1ULL, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&ctx_mu);
	snprintf(implicit_call, sizeof implicit_call, "ncclCommInitRank (CUDA 11: no context current)");
	pthread_mutex_unlock(&ctx_mu);
	warnf("ncclCommInitRank: CUDA 11: device %d is set but no context is current; NCCL uses device 0", cur_dev);
	ctx_cur = 0;
	return 0;
}

/* The host identity NCCL compares to find the ranks of one host: its
   NCCL_HOSTID, else the machine's (here ""). Ranks of one host on one GPU
   are refused, ranks that pose as hosts of their own are not. */
static void host_id(char *buf, size_t len) {
	const char *h = getenv("NCCL_HOSTID");
	snprintf(buf, len, "%s", h ? h : "");
}

static int runtime_connect(void);

static int shared_gpu_ok(void) {
	const char *s = getenv("FAKE_NCCL_ALLOW_SHARED_GPU");
	return s && *s == '1';
}

API int ncclCommInitRank(ncclComm **out, int n, ncclUniqueId id, int rank) {
	*out = NULL;
	int dev = init_dev();
	if (n < 1 || n > MAXR || rank < 0 || rank >= n) {
		set_last(NULL, "ncclCommInitRank: rank %d of %d (at most %d ranks)", rank, n, MAXR);
		return ncclInvalidArgument;
	}
	if (strncmp(id.internal, XPREFIX, strlen(XPREFIX)) == 0) {
		char path[128];
		snprintf(path, sizeof path, "%s", id.internal + strlen(XPREFIX));
		return x_init(out, n, path, rank, dev);
	}
	pthread_mutex_lock(&cliques_mu);
	clique *cl = joining;
	while (cl && memcmp(cl->id, id.internal, sizeof cl->id) != 0) cl = cl->next;
	if (!cl) {
		cl = calloc(1, sizeof *cl);
		if (!cl) {
			pthread_mutex_unlock(&cliques_mu);
			return ncclSystemError;
		}
		memcpy(cl->id, id.internal, sizeof cl->id);
		cl->n = n;
		pthread_mutex_init(&cl->mu, NULL);
		pthread_cond_init(&cl->cv, NULL);
		cl->next = joining;
		joining = cl;
	}
	pthread_mutex_lock(&cl->mu);
	if (cl->n != n) {
		pthread_mutex_unlock(&cl->mu);
		pthread_mutex_unlock(&cliques_mu);
		set_last(NULL, "ncclCommInitRank: rank %d says %d ranks, others said %d", rank, n, cl->n);
		return ncclInvalidArgument;
	}
	if (cl->ranks[rank]) {
		pthread_mutex_unlock(&cl->mu);
		pthread_mutex_unlock(&cliques_mu);
		set_last(NULL, "ncclCommInitRank: rank %d joined twice", rank);
		return ncclInvalidUsage;
	}
	ncclComm *c = calloc(1, sizeof *c);
	c->magic = COMM_MAGIC;
	c->cl = cl;
	c->rank = rank;
	c->n = n;
	c->dev = dev;
	host_id(c->hostid, sizeof c->hostid);
	c->coll_conn = !runtime_connect();
	const char *fa = getenv("FAKE_NCCL_FAIL_AFTER");
	c->fail_after = fa && *fa ? atol(fa) : -1;
	cl->ranks[rank] = c;
	cl->joined++;
	if (cl->joined == n) {
		for (clique **p = &joining; *p; p = &(*p)->next) {
			if (*p == cl) {
				*p = cl->next;
				break;
			}
		}
		cl->complete = 1;
		pthread_cond_broadcast(&cl->cv);
	}
	pthread_mutex_unlock(&cliques_mu);
	const char *ts = getenv("FAKE_NCCL_INIT_TIMEOUT_MS");
	long ms = ts && *ts ? atol(ts) : 30000;
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	while (!cl->complete) {
		if (pthread_cond_timedwait(&cl->cv, &cl->mu, &dl) == ETIMEDOUT && !cl->complete) {
			cl->ranks[rank] = NULL;
			cl->joined--;
			pthread_mutex_unlock(&cl->mu);
			set_last(NULL, "ncclCommInitRank: rank %d timed out after %ld ms waiting for the other ranks", rank, ms);
			c->magic = 0;
			return ncclSystemError;
		}
	}
	/* Like NCCL, every rank sees every rank's host and device once all
	   joined: all the ranks that share a GPU fail. */
	for (int r = 0; r < n && !shared_gpu_ok(); r++) {
		ncclComm *o = cl->ranks[r];
		if (r != rank && o->dev == dev && strcmp(o->hostid, c->hostid) == 0) {
			pthread_mutex_unlock(&cl->mu);
			set_last(NULL, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", rank, r, dev);
			c->magic = 0; /* never freed: the clique points at it */
			return ncclInvalidUsage;
		}
	}
	pthread_mutex_unlock(&cl->mu);
	__atomic_add_fetch(&comm_inits, 1, __ATOMIC_SEQ_CST);
	*out = c;
	return ncclSuccess;
}

API int ncclCommAbort(ncclComm *c) {
	int r = check_comm("ncclCommAbort", c);
	if (r) return r;
	pthread_mutex_lock(&c->cl->mu);
	c->aborted = 1;
	c->destroyed = 1;
	pthread_cond_broadcast(&c->cl->cv);
	pthread_mutex_unlock(&c->cl->mu);
	c->magic = 0; /* never freed: stream tasks may still point at it */
	return ncclSuccess;
}

API int ncclCommDestroy(ncclComm *c) {
	int r = check_comm("ncclCommDestroy", c);
	if (r) return r;
	for (int i = 0; i < 30000 && __atomic_load_n(&c->pending, __ATOMIC_SEQ_CST) > 0; i++) usleep(1000);
	return ncclCommAbort(c);
}

static int nccl_sticky(ncclComm *c, const char *call);

API int ncclCommGetAsyncError(ncclComm *c, int *res) {
	int r = check_comm("ncclCommGetAsyncError", c);
	if (r) return r;
	*res = __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
	if (!*res && sticky_err()) *res = nccl_sticky(c, "ncclCommGetAsyncError");
	return ncclSuccess;
}

API int ncclCommCount(ncclComm *c, int *n) {
	int r = check_comm("ncclCommCount", c);
	if (!r) *n = c->n;
	return r;
}

API int ncclCommCuDevice(ncclComm *c, int *d) {
	int r = check_comm("ncclCommCuDevice", c);
	if (!r) *d = c->dev;
	return r;
}

API int ncclCommUserRank(ncclComm *c, int *rank) {
	int r = check_comm("ncclCommUserRank", c);
	if (!r) *rank = c->rank;
	return r;
}

/* ---- reductions ---- */

static float h2f(uint16_t h) {
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
	if (e == 0x1f)
		f = s | 0x7f800000u | (m << 13);
	else if (e == 0) {
		if (m == 0)
			f = s;
		else {
			e = 127 - 15 + 1;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			m &= 0x3ff;
			f = s | (e << 23) | (m << 13);
		}
	} else
		f = s | ((e + 127 - 15) << 23) | (m << 13);
	float out;
	memcpy(&out, &f, 4);
	return out;
}

static uint16_t f2h(float x) {
	uint32_t b;
	memcpy(&b, &x, 4);
	uint16_t sign = (b >> 16) & 0x8000;
	int32_t exp = (b >> 23) & 0xff;
	uint32_t man = b & 0x7fffff;
	if (exp == 0xff) return man ? (sign | 0x7e00) : (sign | 0x7c00);
	if (exp - 127 > 15) return sign | 0x7c00;
	if (exp - 127 >= -14) {
		uint32_t v = ((uint32_t)(exp - 127 + 15) << 10) | (man >> 13);
		uint32_t rest = man & 0x1fff;
		if (rest > 0x1000 || (rest == 0x1000 && (v & 1))) v++;
		return (uint16_t)(sign | v);
	}
	if (exp - 127 >= -25) {
		man |= 0x800000;
		uint32_t shift = (uint32_t)(-14 - (exp - 127)) + 13;
		uint32_t v = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rest > half || (rest == half && (v & 1))) v++;
		return (uint16_t)(sign | v);
	}
	return sign;
}

static float b2f(uint16_t b) {
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f2b(float x) {
	uint32_t b;
	memcpy(&b, &x, 4);
	if ((b & 0x7fffffff) > 0x7f800000) return (uint16_t)((b >> 16) | 0x40);
	b += 0x7fff + ((b >> 16) & 1);
	return (uint16_t)(b >> 16);
}

#define INT_REDUCE(T, UT)                                                              \
	for (size_t i = 0; i < cnt; i++) {                                             \
		T acc, v;                                                              \
		memcpy(&acc, src[0] + i * sizeof(T), sizeof(T));                       \
		for (int r = 1; r < n; r++) {                                          \
			memcpy(&v, src[r] + i * sizeof(T), sizeof(T));                 \
			switch (op) {                                                  \
			case oSum: case oAvg: acc = (T)((UT)acc + (UT)v); break;       \
			case oProd: acc = (T)((UT)acc * (UT)v); break;                 \
			case oMax: if (v > acc) acc = v; break;                        \
			case oMin: if (v < acc) acc = v; break;                        \
			}                                                              \
		}                                                                      \
		if (op == oAvg) acc = (T)(acc / (T)n);                                 \
		memcpy(dst + i * sizeof(T), &acc, sizeof(T));                          \
	}

/* Floats: ncclAvg multiplies each input by fl(1/n) (rounded to the type)
   and sums the products, as real NCCL does (a pre-multiplied sum), which
   differs in the last bits from fl(sum)/n. 16-bit types accumulate in
   float and are rounded once at the end. */
#define FLT_REDUCE(T, ACC, LOAD, STORE)                                                \
	do {                                                                           \
	ACC scale = LOAD(STORE((ACC)1 / (ACC)n));                                      \
	for (size_t i = 0; i < cnt; i++) {                                             \
		T raw;                                                                 \
		memcpy(&raw, src[0] + i * sizeof(T), sizeof(T));                       \
		ACC acc = LOAD(raw);                                                   \
		if (op == oAvg) acc = LOAD(STORE(acc * scale));                        \
		for (int r = 1; r < n; r++) {                                          \
			memcpy(&raw, src[r] + i * sizeof(T), sizeof(T));               \
			ACC v = LOAD(raw);                                             \
			switch (op) {                                                  \
			case oSum: acc = acc + v; break;                               \
			case oAvg: acc = acc + LOAD(STORE(v * scale)); break;          \
			case oProd: acc = acc * v; break;                              \
			case oMax: if (v > acc) acc = v; break;                        \
			case oMin: if (v < acc) acc = v; break;                        \
			}                                                              \
		}                                                                      \
		raw = STORE(acc);                                                      \
		memcpy(dst + i * sizeof(T), &raw, sizeof(T));                          \
	}                                                                              \
	} while (0);

#define ID(x) (x)

static void reduce(unsigned char *dst, const unsigned char **src, int n, size_t cnt, int dt, int op) {
	switch (dt) {
	case tInt8: INT_REDUCE(int8_t, unsigned) break;
	case tUint8: INT_REDUCE(uint8_t, unsigned) break;
	case tInt32: INT_REDUCE(int32_t, uint32_t) break;
	case tUint32: INT_REDUCE(uint32_t, uint32_t) break;
	case tInt64: INT_REDUCE(int64_t, uint64_t) break;
	case tUint64: INT_REDUCE(uint64_t, uint64_t) break;
	case tFloat32: FLT_REDUCE(float, float, ID, ID) break;
	case tFloat64: FLT_REDUCE(double, double, ID, ID) break;
	case tFloat16: FLT_REDUCE(uint16_t, float, h2f, f2h) break;
	case tBfloat16: FLT_REDUCE(uint16_t, float, b2f, f2b) break;
	}
}

/* ---- collectives ---- */

static int is_reduction(int t) { return t == T_ALLREDUCE || t == T_REDUCE || t == T_REDSCAT; }
static int is_rooted(int t) { return t == T_BCAST || t == T_REDUCE; }

static void describe(char *buf, size_t len, coll *k) {
	snprintf(buf, len, "%s(count %zu, datatype %d, op %d, root %d)", tname(k->type), k->count, k->dt,
		 is_reduction(k->type) ? k->op : -1, is_rooted(k->type) ? k->root : -1);
}

/* Performs the collective whose every rank has posted (cl->mu held). */
static void exec_coll(clique *cl) {
	int n = cl->n;
	coll *k0 = cl->slot[0];
	for (int r = 1; r < n; r++) {
		coll *k = cl->slot[r];
		if (k->type != k0->type || k->count != k0->count || k->dt != k0->dt ||
		    (is_reduction(k->type) && k->op != k0->op) || (is_rooted(k->type) && k->root != k0->root)) {
			char a[160], b[160];
			describe(a, sizeof a, k0);
			describe(b, sizeof b, k);
			for (int q = 0; q < n; q++) {
				ncclComm *c = cl->slot[q]->comm;
				__atomic_store_n(&c->async_err, ncclInvalidUsage, __ATOMIC_SEQ_CST);
				set_last(c, "collective #%llu does not match: rank 0 called %s, rank %d called %s",
					 (unsigned long long)k0->seq, a, r, b);
			}
			return;
		}
	}
	size_t es = dt_size(k0->dt), cnt = k0->count, bytes = cnt * es;
	const unsigned char *src[MAXR];
	for (int r = 0; r < n; r++) src[r] = cl->slot[r]->send;
	unsigned char *tmp;
	switch (k0->type) {
	case T_ALLREDUCE:
		if (!bytes) return;
		tmp = malloc(bytes);
		reduce(tmp, src, n, cnt, k0->dt, k0->op);
		for (int r = 0; r < n; r++) memcpy(cl->slot[r]->recv, tmp, bytes);
		free(tmp);
		return;
	case T_BCAST:
		if (!bytes) return;
		tmp = malloc(bytes);
		memcpy(tmp, src[k0->root], bytes);
		for (int r = 0; r < n; r++) memcpy(cl->slot[r]->recv, tmp, bytes);
		free(tmp);
		return;
	case T_REDUCE:
		if (!bytes) return;
		tmp = malloc(bytes);
		reduce(tmp, src, n, cnt, k0->dt, k0->op);
		memcpy(cl->slot[k0->root]->recv, tmp, bytes);
		free(tmp);
		return;
	case T_ALLGATHER:
		if (!bytes) return;
		tmp = malloc(n * bytes);
		for (int r = 0; r < n; r++) memcpy(tmp + r * bytes, src[r], bytes);
		for (int r = 0; r < n; r++) memcpy(cl->slot[r]->recv, tmp, n * bytes);
		free(tmp);
		return;
	case T_REDSCAT:
		if (!bytes) return;
		tmp = malloc(n * bytes);
		reduce(tmp, src, n, n * cnt, k0->dt, k0->op);
		for (int r = 0; r < n; r++) memcpy(cl->slot[r]->recv, tmp + r * bytes, bytes);
		free(tmp);
		return;
	}
}

static void x_coll(coll *k);

static void run_coll(void *a) {
	coll *k = a;
	ncclComm *c = k->comm;
	clique *cl = c->cl;
	delay(&nccl_delay_ms, "FAKE_NCCL_DELAY_MS");
	pthread_mutex_lock(&cl->mu);
	if (is_vanished(c->dev)) {
		while (!c->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
		goto out;
	}
	if (c->fail_after >= 0 && k->seq >= (uint64_t)c->fail_after) {
		__atomic_store_n(&c->async_err, ncclRemoteError, __ATOMIC_SEQ_CST);
		snprintf(c->lasterr, sizeof c->lasterr, "injected remote error at collective #%llu", (unsigned long long)k->seq);
		while (!c->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
		goto out;
	}
	if (c->x) {
		pthread_mutex_unlock(&cl->mu);
		x_coll(k);
		pthread_mutex_lock(&cl->mu);
		goto out;
	}
	while (cl->cur != k->seq && !c->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
	if (c->aborted) goto out;
	cl->slot[c->rank] = k;
	cl->posted++;
	if (cl->posted == cl->n) {
		exec_coll(cl);
		cl->posted = 0;
		memset(cl->slot, 0, sizeof cl->slot);
		cl->cur++;
		pthread_cond_broadcast(&cl->cv);
	} else {
		while (cl->cur == k->seq && !c->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
		if (cl->cur == k->seq) { /* aborted before the others came */
			cl->slot[c->rank] = NULL;
			cl->posted--;
		}
	}
out:
	pthread_mutex_unlock(&cl->mu);
	__atomic_sub_fetch(&c->pending, 1, __ATOMIC_SEQ_CST);
	free(k);
}

/* ---- groups and point-to-point ---- */

typedef struct p2pent {
	int send, peer;
	unsigned char *buf;
	size_t bytes;
	msg m;
} p2pent;

typedef struct p2pgroup {
	ncclComm *comm;
	int nops;
	p2pent ops[];
} p2pgroup;

typedef struct gop {
	coll *k; /* a collective, or NULL for p2p */
	int send, peer;
	unsigned char *buf;
	size_t bytes;
	ncclComm *comm;
	stream *st;
} gop;


/* ---- ranks as processes (FAKE_NCCL_PROCESSES=1) ----
   The rendezvous file: a header, then XMAXR collective input slots of
   XCOLL_CAP bytes, then an XMAXR x XMAXR grid of mailboxes of XBOX_CAP
   bytes. The file is sparse: only the bytes moved take memory. */
#define XMAXR 8
#define XCOLL_CAP ((size_t)64 << 20)
#define XBOX_CAP ((size_t)1 << 20)
#define XHDR 65536
#define XSIZE (XHDR + XMAXR * XCOLL_CAP + XMAXR * XMAXR * XBOX_CAP)

typedef struct xhdr {
	pthread_mutex_t mu; /* robust, process-shared */
	int n, joined, present[XMAXR], pdev[XMAXR];
	char hostid[XMAXR][64];
	int coll_arrived;                  /* as in a clique */
	unsigned char parr[XMAXR][XMAXR];
	uint64_t cur; /* the collective being run */
	int posted, done;
	struct { int type; size_t count; int dt, op, root; } k[XMAXR];
	struct { int full; size_t bytes, total; } box[XMAXR][XMAXR];
} xhdr;

static void xlock(xhdr *h) {
	if (pthread_mutex_lock(&h->mu) == EOWNERDEAD) pthread_mutex_consistent(&h->mu);
}

static void xunlock(xhdr *h) { pthread_mutex_unlock(&h->mu); }

/* xnap sleeps between polls of the shared state (h->mu released), from
   20 us up to 1 ms. */
static void xnap(xhdr *h, int *i) {
	xunlock(h);
	usleep(*i < 50 ? 20 : 1000);
	(*i)++;
	xlock(h);
}

static unsigned char *xslot(xhdr *h, int r) { return (unsigned char *)h + XHDR + r * XCOLL_CAP; }
static unsigned char *xbox(xhdr *h, int from, int to) {
	return (unsigned char *)h + XHDR + XMAXR * XCOLL_CAP + (from * XMAXR + to) * XBOX_CAP;
}

static int x_uniqueid(ncclUniqueId *id, uint64_t k) {
	const char *dir = getenv("FAKE_NCCL_DIR");
	if (!dir || !*dir) dir = getenv("TMPDIR");
	if (!dir || !*dir) dir = "/tmp";
	char path[128];
	int w = snprintf(path, sizeof path, "%s/fakenccl-%d-%llu", dir, (int)getpid(), (unsigned long long)k);
	if (w < 0 || (size_t)w + strlen(XPREFIX) >= sizeof id->internal) {
		set_last(NULL, "ncclGetUniqueId: fake: rendezvous path in %s too long", dir);
		return ncclInvalidArgument;
	}
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || ftruncate(fd, XSIZE) != 0) {
		set_last(NULL, "ncclGetUniqueId: fake: %s: %s", path, strerror(errno));
		if (fd >= 0) close(fd);
		return ncclSystemError;
	}
	xhdr *h = mmap(NULL, XHDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED) {
		set_last(NULL, "ncclGetUniqueId: fake: mmap %s: %s", path, strerror(errno));
		return ncclSystemError;
	}
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&h->mu, &a);
	pthread_mutexattr_destroy(&a);
	munmap(h, XHDR);
	memset(id, 0, sizeof *id);
	snprintf(id->internal, sizeof id->internal, "%s%s", XPREFIX, path);
	return ncclSuccess;
}

static long init_timeout_ms(void) {
	const char *ts = getenv("FAKE_NCCL_INIT_TIMEOUT_MS");
	return ts && *ts ? atol(ts) : 30000;
}

static long now_ms(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static int x_init(ncclComm **out, int n, const char *path, int rank, int dev) {
	if (n > XMAXR) {
		set_last(NULL, "ncclCommInitRank: fake: at most %d ranks across processes, not %d", XMAXR, n);
		return ncclInvalidArgument;
	}
	int fd = open(path, O_RDWR);
	if (fd < 0) {
		set_last(NULL, "ncclCommInitRank: fake: rank %d: rendezvous %s: %s", rank, path, strerror(errno));
		return ncclSystemError;
	}
	xhdr *h = mmap(NULL, XSIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED) {
		set_last(NULL, "ncclCommInitRank: fake: mmap %s: %s", path, strerror(errno));
		return ncclSystemError;
	}
	int pd = phys_dev(dev);
	char hid[64];
	host_id(hid, sizeof hid);
	xlock(h);
	int err = ncclSuccess;
	if (h->n && h->n != n) {
		set_last(NULL, "ncclCommInitRank: rank %d says %d ranks, others said %d", rank, n, h->n);
		err = ncclInvalidArgument;
	} else if (h->present[rank]) {
		set_last(NULL, "ncclCommInitRank: rank %d joined twice", rank);
		err = ncclInvalidUsage;
	}
	if (err) {
		xunlock(h);
		munmap(h, XSIZE);
		return err;
	}
	h->n = n;
	h->present[rank] = 1;
	h->pdev[rank] = pd;
	memcpy(h->hostid[rank], hid, sizeof hid);
	h->joined++;
	long ms = init_timeout_ms(), end = now_ms() + ms;
	for (int i = 0; h->joined < n;) {
		if (now_ms() > end) {
			h->present[rank] = 0;
			h->joined--;
			xunlock(h);
			munmap(h, XSIZE);
			set_last(NULL, "ncclCommInitRank: rank %d timed out after %ld ms waiting for the other ranks", rank, ms);
			return ncclSystemError;
		}
		xnap(h, &i);
	}
	/* Every rank sees every rank's host and device: all the ranks that
	   share a GPU fail, as with NCCL. */
	for (int r = 0; r < n && !shared_gpu_ok(); r++) {
		if (r != rank && h->pdev[r] == pd && strcmp(h->hostid[r], hid) == 0) {
			xunlock(h);
			munmap(h, XSIZE);
			set_last(NULL, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", rank, r, pd);
			return ncclInvalidUsage;
		}
	}
	xunlock(h);
	unlink(path); /* every rank has it mapped */
	ncclComm *c = calloc(1, sizeof *c);
	clique *cl = calloc(1, sizeof *cl); /* local: for abort's wake-ups */
	pthread_mutex_init(&cl->mu, NULL);
	pthread_cond_init(&cl->cv, NULL);
	cl->n = n;
	c->magic = COMM_MAGIC;
	c->cl = cl;
	c->x = h;
	c->rank = rank;
	c->n = n;
	c->dev = dev;
	c->coll_conn = !runtime_connect();
	const char *fa = getenv("FAKE_NCCL_FAIL_AFTER");
	c->fail_after = fa && *fa ? atol(fa) : -1;
	__atomic_add_fetch(&comm_inits, 1, __ATOMIC_SEQ_CST);
	*out = c;
	return ncclSuccess;
}

static int x_aborted(ncclComm *c) { return __atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST); }

static size_t coll_in_bytes(int type, size_t count, size_t es, int n) { return type == T_REDSCAT ? n * count * es : count * es; }

/* One collective of a cross-process communicator (on its stream's thread). */
static void x_coll(coll *k) {
	ncclComm *c = k->comm;
	xhdr *h = c->x;
	int n = c->n, me = c->rank, i = 0;
	size_t es = dt_size(k->dt), bytes = k->count * es, in = coll_in_bytes(k->type, k->count, es, n);
	xlock(h);
	while (h->cur != k->seq && !x_aborted(c)) xnap(h, &i);
	if (x_aborted(c)) goto out;
	xunlock(h);
	/* Nobody reads this slot until every rank has posted this collective. */
	if (k->send && (k->type != T_BCAST || me == k->root)) memcpy(xslot(h, me), k->send, in);
	xlock(h);
	h->k[me].type = k->type;
	h->k[me].count = k->count;
	h->k[me].dt = k->dt;
	h->k[me].op = k->op;
	h->k[me].root = k->root;
	h->posted++;
	while (h->posted < n && !x_aborted(c)) xnap(h, &i);
	if (x_aborted(c)) goto out;
	xunlock(h);
	int bad = -1;
	for (int r = 0; r < n; r++) {
		if (h->k[r].type != k->type || h->k[r].count != k->count || h->k[r].dt != k->dt ||
		    (is_reduction(k->type) && h->k[r].op != k->op) || (is_rooted(k->type) && h->k[r].root != k->root))
			bad = r;
	}
	if (bad >= 0) {
		__atomic_store_n(&c->async_err, ncclInvalidUsage, __ATOMIC_SEQ_CST);
		set_last(c, "collective #%llu does not match: rank %d called %s, rank %d called type %d count %zu",
			 (unsigned long long)k->seq, me, tname(k->type), bad, h->k[bad].type, h->k[bad].count);
	} else if (bytes) {
		const unsigned char *src[XMAXR];
		for (int r = 0; r < n; r++) src[r] = xslot(h, r);
		switch (k->type) {
		case T_ALLREDUCE: reduce(k->recv, src, n, k->count, k->dt, k->op); break;
		case T_REDUCE:
			if (me == k->root) reduce(k->recv, src, n, k->count, k->dt, k->op);
			break;
		case T_BCAST: memcpy(k->recv, src[k->root], bytes); break;
		case T_ALLGATHER:
			for (int r = 0; r < n; r++) memcpy(k->recv + r * bytes, src[r], bytes);
			break;
		case T_REDSCAT:
			for (int r = 0; r < n; r++) src[r] += me * bytes;
			reduce(k->recv, src, n, k->count, k->dt, k->op);
			break;
		}
	}
	xlock(h);
	if (++h->done == n) {
		h->posted = h->done = 0;
		h->cur++;
	}
out:
	xunlock(h);
}

/* One group of sends and receives of a cross-process communicator: each
   send moves through the (me, peer) mailbox in chunks, in order per peer,
   and completes when the receiver has taken its last chunk. */
static void x_p2p(ncclComm *c, p2pent *ops, int nops) {
	xhdr *h = c->x;
	int me = c->rank, left = nops, i = 0;
	size_t *off = calloc(nops ? nops : 1, sizeof *off);
	int *st = calloc(nops ? nops : 1, sizeof *st); /* 0 moving, 1 sent all (send), 2 finished */
	xlock(h);
	while (left && !x_aborted(c)) {
		int moved = 0;
		for (int j = 0; j < nops; j++) {
			p2pent *o = &ops[j];
			if (st[j] == 2) continue;
			int first = 1;
			for (int q = 0; q < j; q++)
				if (st[q] != 2 && ops[q].send == o->send && ops[q].peer == o->peer) first = 0;
			if (!first) continue;
			if (o->send) {
				typeof(h->box[0][0]) *b = &h->box[me][o->peer];
				if (st[j] == 1) {
					if (!b->full) {
						st[j] = 2;
						left--;
						moved = 1;
					}
					continue;
				}
				if (b->full) continue;
				size_t ch = o->bytes - off[j] < XBOX_CAP ? o->bytes - off[j] : XBOX_CAP;
				if (ch) memcpy(xbox(h, me, o->peer), o->buf + off[j], ch);
				off[j] += ch;
				b->bytes = ch;
				b->total = o->bytes;
				b->full = 1;
				if (off[j] == o->bytes) st[j] = 1;
				moved = 1;
			} else {
				typeof(h->box[0][0]) *b = &h->box[o->peer][me];
				if (!b->full) continue;
				if (b->total != o->bytes) {
					__atomic_store_n(&c->async_err, ncclInvalidUsage, __ATOMIC_SEQ_CST);
					set_last(c, "ncclRecv of %zu bytes from rank %d matched an ncclSend of %zu bytes", o->bytes,
						 o->peer, b->total);
					off[j] = o->bytes;
				} else {
					if (b->bytes) memcpy(o->buf + off[j], xbox(h, o->peer, me), b->bytes);
					off[j] += b->bytes;
				}
				b->full = 0;
				moved = 1;
				if (off[j] >= o->bytes) {
					st[j] = 2;
					left--;
				}
			}
		}
		if (moved)
			i = 0;
		else
			xnap(h, &i);
	}
	xunlock(h);
	free(off);
	free(st);
}

static __thread gop *gops;
static __thread int ngops, capgops, gdepth;

static void unlink_msg(clique *cl, int from, int to, msg *m) {
	msg **p = &cl->qh[from][to];
	msg *prev = NULL;
	while (*p && *p != m) {
		prev = *p;
		p = &(*p)->next;
	}
	if (!*p) return;
	*p = m->next;
	if (cl->qt[from][to] == m) cl->qt[from][to] = prev;
}

static void run_p2p(void *a) {
	p2pgroup *g = a;
	ncclComm *c = g->comm;
	clique *cl = c->cl;
	int me = c->rank;
	delay(&nccl_delay_ms, "FAKE_NCCL_DELAY_MS");
	pthread_mutex_lock(&cl->mu);
	if (is_vanished(c->dev)) {
		while (!c->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
		g->nops = 0;
	}
	if (c->x) {
		pthread_mutex_unlock(&cl->mu);
		x_p2p(c, g->ops, g->nops);
		pthread_mutex_lock(&cl->mu);
		g->nops = 0;
	}
	for (int i = 0; i < g->nops; i++) {
		p2pent *o = &g->ops[i];
		if (!o->send) continue;
		o->m = (msg){NULL, o->buf, o->bytes, 0};
		if (cl->qt[me][o->peer])
			cl->qt[me][o->peer]->next = &o->m;
		else
			cl->qh[me][o->peer] = &o->m;
		cl->qt[me][o->peer] = &o->m;
	}
	pthread_cond_broadcast(&cl->cv);
	for (int i = 0; i < g->nops && !c->aborted; i++) {
		p2pent *o = &g->ops[i];
		if (o->send) continue;
		msg *m;
		while (!(m = cl->qh[o->peer][me]) && !c->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
		if (!m) break;
		cl->qh[o->peer][me] = m->next;
		if (!m->next) cl->qt[o->peer][me] = NULL;
		if (m->bytes != o->bytes) {
			__atomic_store_n(&c->async_err, ncclInvalidUsage, __ATOMIC_SEQ_CST);
			set_last(c, "ncclRecv of %zu bytes from rank %d matched an ncclSend of %zu bytes", o->bytes, o->peer, m->bytes);
		} else if (o->bytes) {
			memcpy(o->buf, m->buf, o->bytes);
		}
		m->done = 1;
		pthread_cond_broadcast(&cl->cv);
	}
	for (int i = 0; i < g->nops; i++) {
		p2pent *o = &g->ops[i];
		if (!o->send) continue;
		while (!o->m.done && !c->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
		if (!o->m.done) unlink_msg(cl, me, o->peer, &o->m);
	}
	pthread_mutex_unlock(&cl->mu);
	__atomic_sub_fetch(&c->pending, 1, __ATOMIC_SEQ_CST);
	free(g);
}

static int push_gop(gop g) {
	if (ngops == capgops) {
		int c = capgops ? 2 * capgops : 64;
		gop *p = realloc(gops, c * sizeof *p);
		if (!p) return ncclSystemError;
		gops = p;
		capgops = c;
	}
	gops[ngops++] = g;
	return ncclSuccess;
}

static void launch_coll_now(coll *k) {
	k->seq = k->comm->seq++;
	__atomic_add_fetch(&k->comm->pending, 1, __ATOMIC_SEQ_CST);
	submit(k->st, run_coll, k);
}

/* Connections. NCCL connects on demand: the first send/recv between two
   ranks blocks in ncclGroupEnd (or ncclSend/ncclRecv outside a group)
   until the peer launches its side, and, since NCCL 2.22, the first
   collective of a communicator until the other ranks launch theirs (unless
   NCCL_RUNTIME_CONNECT=0, with which ncclCommInitRank connects); an
   ncclCommAbort from another thread ends the wait. The fake does the same
   for every version: arrive marks what this group launches first, then
   connected waits for the peers. */
static int runtime_connect(void) {
	const char *v = getenv("NCCL_RUNTIME_CONNECT");
	return !(v && *v == '0');
}

static void arrive(ncclComm *c, int coll, int send, int peer) {
	int me = c->rank;
	if (c->x) {
		xhdr *h = c->x;
		xlock(h);
		if (coll)
			h->coll_arrived++;
		else if (send)
			h->parr[me][peer] |= 1;
		else
			h->parr[peer][me] |= 2;
		xunlock(h);
		return;
	}
	clique *cl = c->cl;
	pthread_mutex_lock(&cl->mu);
	if (coll)
		cl->coll_arrived++;
	else if (send)
		cl->parr[me][peer] |= 1;
	else
		cl->parr[peer][me] |= 2;
	pthread_cond_broadcast(&cl->cv);
	pthread_mutex_unlock(&cl->mu);
}

/* 1 once connected, 0 if aborted first. */
static int connected(ncclComm *c, int coll, int send, int peer) {
	int me = c->rank, from = send ? me : peer, to = send ? peer : me, ok;
	if (c->x) {
		xhdr *h = c->x;
		int i = 0;
		xlock(h);
		while (!(ok = coll ? h->coll_arrived >= c->n : h->parr[from][to] == 3) && !x_aborted(c)) xnap(h, &i);
		xunlock(h);
		return ok;
	}
	clique *cl = c->cl;
	pthread_mutex_lock(&cl->mu);
	while (!(ok = coll ? cl->coll_arrived >= c->n : cl->parr[from][to] == 3) && !c->aborted)
		pthread_cond_wait(&cl->cv, &cl->mu);
	pthread_mutex_unlock(&cl->mu);
	return ok;
}

/* Connects what the group's operations need first (see above). */
static int connect_group(void) {
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < ngops; i++) {
			gop *g = &gops[i];
			ncclComm *c = g->k ? g->k->comm : g->comm;
			int coll = g->k != NULL, send = g->send, peer = g->peer;
			if (coll ? c->coll_conn : (c->p2p_conn[peer] & (send ? 1 : 2))) continue;
			if (pass == 0) {
				int seen = 0; /* once per communicator and pair in the group */
				for (int j = 0; j < i; j++) {
					gop *o = &gops[j];
					ncclComm *oc = o->k ? o->k->comm : o->comm;
					if (oc == c && (coll ? o->k != NULL : !o->k && o->send == send && o->peer == peer)) seen = 1;
				}
				if (!seen) arrive(c, coll, send, peer);
				continue;
			}
			if (!connected(c, coll, send, peer)) {
				if (coll)
					set_last(c, "ncclGroupEnd: the communicator was aborted while connecting for its first collective");
				else
					set_last(c, "ncclGroupEnd: the communicator was aborted while connecting to rank %d", peer);
				return ncclInternalError;
			}
			if (coll)
				c->coll_conn = 1;
			else
				c->p2p_conn[peer] |= send ? 1 : 2;
		}
	}
	return ncclSuccess;
}

/* Drops the operations of a group that failed to connect. */
static void drop_group(void) {
	for (int i = 0; i < ngops; i++) free(gops[i].k);
	ngops = 0;
}

static int flush_group(void) {
	int err = connect_group();
	if (err) {
		drop_group();
		return err;
	}
	for (int i = 0; i < ngops; i++) {
		if (gops[i].k) {
			launch_coll_now(gops[i].k);
			gops[i].k = NULL;
			gops[i].comm = NULL;
		}
	}
	for (int i = 0; i < ngops; i++) {
		ncclComm *c = gops[i].comm;
		if (!c) continue;
		int n = 0;
		for (int j = i; j < ngops; j++)
			if (gops[j].comm == c) n++;
		p2pgroup *g = malloc(sizeof *g + n * sizeof(p2pent));
		g->comm = c;
		g->nops = 0;
		stream *st = gops[i].st;
		for (int j = i; j < ngops; j++) {
			if (gops[j].comm != c) continue;
			if (gops[j].st != st) {
				set_last(c, "ncclGroupEnd: operations of one communicator on different streams");
				err = ncclInvalidUsage;
			}
			g->ops[g->nops++] = (p2pent){gops[j].send, gops[j].peer, gops[j].buf, gops[j].bytes, {0}};
			gops[j].comm = NULL;
		}
		__atomic_add_fetch(&c->pending, 1, __ATOMIC_SEQ_CST);
		submit(st, run_p2p, g);
	}
	ngops = 0;
	return err;
}

API int ncclGroupStart(void) {
	gdepth++;
	return ncclSuccess;
}

API int ncclGroupEnd(void) {
	if (gdepth == 0) {
		set_last(NULL, "ncclGroupEnd without ncclGroupStart");
		return ncclInvalidUsage;
	}
	if (--gdepth > 0) return ncclSuccess;
	return flush_group();
}

/* Resolves a buffer of a launch: a live device range on the comm's device. */
static int nbuf(ncclComm *c, const char *call, const char *which, const void *p, size_t bytes, unsigned char **out) {
	*out = NULL;
	if (bytes == 0) return ncclSuccess;
	unsigned char *h;
	int dev;
	if (dev_lookup((uintptr_t)p, bytes, &h, &dev) != 1) {
		set_last(c, "%s: %s %p is not a valid device buffer of %zu bytes", call, which, p, bytes);
		return ncclInvalidArgument;
	}
	if (dev != c->dev) {
		set_last(c, "%s: %s is on device %d, the communicator on device %d", call, which, dev, c->dev);
		return ncclInvalidArgument;
	}
	*out = h;
	return ncclSuccess;
}

static int nstream(ncclComm *c, const char *call, void *h, stream **out) {
	if (check_stream(call, h, out)) {
		set_last(c, "%s: %p is not a live stream", call, h);
		return ncclInvalidArgument;
	}
	if (*out && (*out)->dev != c->dev) {
		set_last(c, "%s: the stream is on device %d, the communicator on device %d", call, (*out)->dev, c->dev);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

/* NCCL's result when the CUDA context has a sticky error. */
static int nccl_sticky(ncclComm *c, const char *call) {
	int e = sticky_err();
	if (!e) return ncclSuccess;
	set_last(c, "%s: Cuda failure %d '%s'", call, e, cudaGetErrorString(e));
	return ncclUnhandledCudaError;
}

static int launch_coll(int type, const void *sendbuff, void *recvbuff, size_t count, int dt, int op, int root,
		       ncclComm *c, void *sh) {
	const char *call = tname(type);
	int r = check_comm(call, c);
	if (r) return r;
	if ((r = nccl_sticky(c, call))) return r;
	size_t es = dt_size(dt);
	if (!es) {
		set_last(c, "%s: bad datatype %d", call, dt);
		return ncclInvalidArgument;
	}
	if (is_reduction(type) && (op < oSum || op > oAvg)) {
		set_last(c, "%s: bad reduction op %d", call, op);
		return ncclInvalidArgument;
	}
	if (is_rooted(type) && (root < 0 || root >= c->n)) {
		set_last(c, "%s: root %d of %d ranks", call, root, c->n);
		return ncclInvalidArgument;
	}
	size_t in = count * es, outb = count * es;
	int read = 1, write = 1;
	switch (type) {
	case T_BCAST: read = c->rank == root; break;
	case T_REDUCE: write = c->rank == root; break;
	case T_ALLGATHER: outb = c->n * count * es; break;
	case T_REDSCAT: in = c->n * count * es; break;
	}
	if (c->x && in > XCOLL_CAP) {
		set_last(c, "%s: fake: %zu input bytes, more than the %zu a cross-process collective takes", call, in, XCOLL_CAP);
		return ncclInvalidArgument;
	}
	coll *k = calloc(1, sizeof *k);
	k->type = type;
	k->count = count;
	k->dt = dt;
	k->op = op;
	k->root = root;
	k->comm = c;
	unsigned char *s = NULL, *d = NULL;
	if ((r = nstream(c, call, sh, &k->st)) || (read && (r = nbuf(c, call, "sendbuff", sendbuff, in, &s))) ||
	    (write && (r = nbuf(c, call, "recvbuff", recvbuff, outb, &d)))) {
		free(k);
		return r;
	}
	k->send = s;
	k->recv = d;
	if (gdepth > 0) return push_gop((gop){k, 0, 0, NULL, 0, c, k->st});
	gdepth++;
	r = push_gop((gop){k, 0, 0, NULL, 0, c, k->st});
	gdepth--;
	int e = flush_group();
	return r ? r : e;
}

API int ncclAllReduce(const void *s, void *r, size_t count, int dt, int op, ncclComm *c, void *st) {
	return launch_coll(T_ALLREDUCE, s, r, count, dt, op, 0, c, st);
}

API int ncclBroadcast(const void *s, void *r, size_t count, int dt, int root, ncclComm *c, void *st) {
	return launch_coll(T_BCAST, s, r, count, dt, 0, root, c, st);
}

API int ncclReduce(const void *s, void *r, size_t count, int dt, int op, int root, ncclComm *c, void *st) {
	return launch_coll(T_REDUCE, s, r, count, dt, op, root, c, st);
}

API int ncclAllGather(const void *s, void *r, size_t sendcount, int dt, ncclComm *c, void *st) {
	return launch_coll(T_ALLGATHER, s, r, sendcount, dt, 0, 0, c, st);
}

API int ncclReduceScatter(const void *s, void *r, size_t recvcount, int dt, int op, ncclComm *c, void *st) {
	return launch_coll(T_REDSCAT, s, r, recvcount, dt, op, 0, c, st);
}

static int launch_p2p(int send, const void *buf, size_t count, int dt, int peer, ncclComm *c, void *sh) {
	const char *call = send ? "ncclSend" : "ncclRecv";
	int r = check_comm(call, c);
	if (r) return r;
	if ((r = nccl_sticky(c, call))) return r;
	size_t es = dt_size(dt);
	if (!es) {
		set_last(c, "%s: bad datatype %d", call, dt);
		return ncclInvalidArgument;
	}
	if (peer < 0 || peer >= c->n) {
		set_last(c, "%s: peer %d of %d ranks", call, peer, c->n);
		return ncclInvalidArgument;
	}
	stream *st;
	unsigned char *b;
	if ((r = nstream(c, call, sh, &st)) || (r = nbuf(c, call, "buffer", buf, count * es, &b))) return r;
	gop g = {NULL, send, peer, b, count * es, c, st};
	if (gdepth > 0) return push_gop(g);
	gdepth++;
	r = push_gop(g);
	gdepth--;
	int e = flush_group();
	return r ? r : e;
}

API int ncclSend(const void *buf, size_t count, int dt, int peer, ncclComm *c, void *st) {
	return launch_p2p(1, buf, count, dt, peer, c, st);
}

API int ncclRecv(void *buf, size_t count, int dt, int peer, ncclComm *c, void *st) {
	return launch_p2p(0, buf, count, dt, peer, c, st);
}

/* ================= cuBLAS, NVRTC and the driver API (gpu/cublas, gpu/rtc) =================

   cuBLAS: handles (cublasCreate_v2, ...SetStream_v2, ...SetMathMode), and
   cublasSgemm_v2, cublasSgemmStridedBatched (strides of 0 or more; the
   products' C matrices must not overlap), cublasGemmEx and
   cublasGemmStridedBatchedEx (fp32, fp16 or bf16 inputs), and
   cublasGemmBatchedEx (arrays of device pointers, read in stream order)
   computed by a
   reference loop on the handle's stream, over the fake's device memory
   (the products of a batch one after another): every matrix is checked
   against its allocation's bounds and device, the arguments as cuBLAS
   checks them (CUBLAS_STATUS_INVALID_VALUE), C is not read when beta is 0,
   each element is one float sum over k in order (no fused multiply-add),
   and the inputs are rounded to TF32 when the handle's math mode
   (CUBLAS_TF32_TENSOR_OP_MATH) or the compute type asks for it (to bf16 or
   fp16 for CUBLAS_COMPUTE_32F_FAST_16BF/16F). A matrix out of its
   allocation fails the call with CUBLAS_STATUS_INVALID_VALUE (a GPU would
   fault later).

   NVRTC: nvrtcCompileProgram compiles the CUDA C++ for the host: it
   prepends an emulation header (fk_kernel_h below: __global__, __shared__,
   blockIdx/threadIdx/blockDim/gridDim, __syncthreads(_count/_and/_or),
   warp shuffles, votes and __syncwarp, atomics, the device math functions
   mapped to libm; and, first on the include path, its own mma.h,
   cuda_bf16.h and cuda_fp16.h: fk_headers below), finds the extern "C"
   __global__ functions, and runs the
   host's C++ compiler ($FAKE_NVRTC_CXX, else $CXX, else g++) into a shared
   library, cached by the hash of what it compiles in $FAKE_NVRTC_CACHE
   (else $XDG_CACHE_HOME or ~/.cache, under gdist/fakenvrtc). The "cubin"
   (nvrtcGetCUBIN, for an sm_XY architecture) is that library behind a
   magic header; the "PTX" (nvrtcGetPTX) is the same in hex text. Compiler
   errors are the program log. Unknown options fail with
   NVRTC_ERROR_INVALID_OPTION, as NVRTC's do.

   Driver API: cuInit, cuDeviceGet(Attribute) (compute capability from
   FAKE_CUDA_CC, default 9.0), cuModuleLoadData (loads the library; a real
   cubin or PTX is CUDA_ERROR_INVALID_IMAGE), cuModuleGetFunction,
   cuFuncGetParamInfo and cuLaunchKernel, which checks the launch as CUDA
   does (block of at most 1024 threads, dimensions, stream and module on the
   current device), copies the parameters at once, translates every pointer
   parameter from a device address to the fake's memory (a pointer that is
   neither device memory of the current device nor pinned host memory fails
   the launch: a GPU would fault) and runs the kernel in stream order. One
   kernel runs at a time in the process. A block's threads run one after
   another on the stream's thread; when the source synchronizes threads,
   each thread is a fiber with its own 256 KiB stack that yields at each
   barrier, and the block goes on when every live thread arrived (threads
   that returned count as arrived; threads waiting at different barriers
   fail the launch). Blocks run one after another, so blocks never run
   concurrently. Not modelled: warps as lockstep groups (a warp's lanes
   only meet at shuffles, votes and __syncwarp: code that relies on
   implicit lockstep fails here, as it may on Volta and later), partial
   masks (every live lane of the warp takes part), memory ordering between
   blocks, out-of-bounds accesses inside a kernel (not caught: run the GPU
   tests under compute-sanitizer), shared memory's initial contents (static
   __shared__ keeps its values between blocks; dynamic shared memory is
   filled with 0xff bytes), __constant__ memory set from the host, textures
   and vector loads beyond float2/float4/int2/int4, templates as kernels,
   and timing. */

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

/* The emulation header the fake NVRTC puts before a kernel's source (see
   above). */
static const char fk_kernel_h[] =
	"// The fake NVRTC's CUDA emulation: prepended to a kernel's CUDA C++, which\n"
	"// is then compiled for the host. A block's threads run one after another\n"
	"// on the stream's thread; where the source synchronizes threads\n"
	"// (__syncthreads*, __syncwarp, shuffles, votes), each thread is a fiber\n"
	"// (its own stack) that yields at every barrier, and the block resumes\n"
	"// once every live thread reached it. Blocks run one after another.\n"
	"#include <math.h>\n"
	"#include <stdint.h>\n"
	"#include <stddef.h>\n"
	"#include <stdio.h>\n"
	"#include <stdlib.h>\n"
	"#include <string.h>\n"
	"#include <sys/mman.h>\n"
	"#include <utility>\n"
	"#include <type_traits>\n"
	"\n"
	"#define GDIST_FAKE_CUDA 1\n"
	"#define __global__\n"
	"#define __device__\n"
	"#define __host__\n"
	"#define __forceinline__ inline __attribute__((always_inline))\n"
	"#define __noinline__ __attribute__((noinline))\n"
	"#define __restrict__ __restrict\n"
	"#define __launch_bounds__(...)\n"
	"#define __align__(n) __attribute__((aligned(n)))\n"
	"#define __shared__ static\n"
	"#define __constant__ static const\n"
	"\n"
	"struct uint3 { unsigned int x, y, z; };\n"
	"struct dim3 { unsigned int x, y, z; };\n"
	"struct __align__(8) int2 { int x, y; };\n"
	"struct __align__(16) int4 { int x, y, z, w; };\n"
	"struct __align__(8) float2 { float x, y; };\n"
	"struct __align__(16) float4 { float x, y, z, w; };\n"
	"static inline int2 make_int2(int x, int y) { return {x, y}; }\n"
	"static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }\n"
	"static inline float2 make_float2(float x, float y) { return {x, y}; }\n"
	"static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }\n"
	"\n"
	"extern \"C\" {\n"
	"uint3 threadIdx, blockIdx;\n"
	"dim3 blockDim, gridDim;\n"
	"void *gdfk_dyn_smem;\n"
	"}\n"
	"static const int warpSize = 32;\n"
	"\n"
	"/* math: the host's libm for the device's functions */\n"
	"#define __expf(x) expf(x)\n"
	"#define __logf(x) logf(x)\n"
	"#define __log2f(x) log2f(x)\n"
	"#define __sinf(x) sinf(x)\n"
	"#define __cosf(x) cosf(x)\n"
	"#define __tanf(x) tanf(x)\n"
	"#define __powf(a, b) powf(a, b)\n"
	"static inline float __fdividef(float a, float b) { return a / b; }\n"
	"static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }\n"
	"static inline double rsqrt(double x) { return 1.0 / sqrt(x); }\n"
	"static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }\n"
	"static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }\n"
	"static inline float __fadd_rn(float a, float b) { return a + b; }\n"
	"static inline float __fsub_rn(float a, float b) { return a - b; }\n"
	"static inline float __fmul_rn(float a, float b) { return a * b; }\n"
	"static inline float __fdiv_rn(float a, float b) { return a / b; }\n"
	"static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }\n"
	"static inline double __dadd_rn(double a, double b) { return a + b; }\n"
	"static inline double __dmul_rn(double a, double b) { return a * b; }\n"
	"static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
	"static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }\n"
	"static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }\n"
	"static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }\n"
	"static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }\n"
	"static inline int __float2int_rz(float x) { return (int)x; }\n"
	"static inline int __popc(unsigned x) { return __builtin_popcount(x); }\n"
	"static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }\n"
	"static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }\n"
	"static inline int __ffs(int x) { return __builtin_ffs(x); }\n"
	"#define GDFK_MINMAX(T, A, B)                                      \\\n"
	"	static inline T min(A a, B b) { return (T)a < (T)b ? (T)a : (T)b; } \\\n"
	"	static inline T max(A a, B b) { return (T)a > (T)b ? (T)a : (T)b; }\n"
	"GDFK_MINMAX(int, int, int)\n"
	"GDFK_MINMAX(unsigned, unsigned, unsigned)\n"
	"GDFK_MINMAX(unsigned, int, unsigned)\n"
	"GDFK_MINMAX(unsigned, unsigned, int)\n"
	"GDFK_MINMAX(long long, long long, long long)\n"
	"GDFK_MINMAX(unsigned long long, unsigned long long, unsigned long long)\n"
	"static inline float min(float a, float b) { return fminf(a, b); }\n"
	"static inline float max(float a, float b) { return fmaxf(a, b); }\n"
	"static inline double min(double a, double b) { return fmin(a, b); }\n"
	"static inline double max(double a, double b) { return fmax(a, b); }\n"
	"template <class T> static inline T __ldg(const T *p) { return *p; }\n"
	"static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n"
	"static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n"
	"\n"
	"/* atomics: a kernel runs alone, its threads one at a time, and no thread\n"
	"   yields inside one, so plain read-modify-writes are atomic here */\n"
	"#define GDFK_ATOMIC(NAME, T, EXPR) \\\n"
	"	static inline T NAME(T *p, T v) { T o = *p; *p = (EXPR); return o; }\n"
	"#define GDFK_ATOMICS(T)                         \\\n"
	"	GDFK_ATOMIC(atomicAdd, T, o + v)        \\\n"
	"	GDFK_ATOMIC(atomicExch, T, v)\n"
	"GDFK_ATOMICS(int)\n"
	"GDFK_ATOMICS(unsigned)\n"
	"GDFK_ATOMICS(unsigned long long)\n"
	"GDFK_ATOMICS(float)\n"
	"GDFK_ATOMICS(double)\n"
	"#define GDFK_IATOMICS(T)                               \\\n"
	"	GDFK_ATOMIC(atomicSub, T, o - v)               \\\n"
	"	GDFK_ATOMIC(atomicMax, T, o > v ? o : v)       \\\n"
	"	GDFK_ATOMIC(atomicMin, T, o < v ? o : v)       \\\n"
	"	GDFK_ATOMIC(atomicAnd, T, o & v)               \\\n"
	"	GDFK_ATOMIC(atomicOr, T, o | v)                \\\n"
	"	GDFK_ATOMIC(atomicXor, T, o ^ v)               \\\n"
	"	static inline T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }\n"
	"GDFK_IATOMICS(int)\n"
	"GDFK_IATOMICS(unsigned)\n"
	"GDFK_IATOMICS(unsigned long long)\n"
	"static inline unsigned atomicInc(unsigned *p, unsigned v) { unsigned o = *p; *p = o >= v ? 0 : o + 1; return o; }\n"
	"static inline unsigned atomicDec(unsigned *p, unsigned v) { unsigned o = *p; *p = (o == 0 || o > v) ? v : o - 1; return o; }\n"
	"\n"
	"namespace gdfk {\n"
	"/* What the fake driver reads of a kernel: its parameters' sizes, which of\n"
	"   them are pointers (translated from device addresses), and a call. */\n"
	"struct desc {\n"
	"	const char *name;\n"
	"	int nparams;\n"
	"	const size_t *sizes;\n"
	"	const unsigned char *ptrs;\n"
	"	void (*thunk)(void **);\n"
	"	void (*block)(void **, int); /* a block's threads one after another (no fibers) */\n"
	"};\n"
	"\n"
	"template <class T> static inline T arg(void *p) { T v; memcpy((void *)&v, p, sizeof(T)); return v; }\n"
	"template <class F> struct fn;\n"
	"template <class... A> struct fn<void (*)(A...)> {\n"
	"	static const int n = sizeof...(A);\n"
	"	static const size_t *sizes() { static const size_t s[] = {sizeof(A)..., 0}; return s; }\n"
	"	static const unsigned char *ptrs() { static const unsigned char p[] = {(unsigned char)std::is_pointer<A>::value..., 0}; return p; }\n"
	"	template <void (*F)(A...), size_t... I> static void call(void **a, std::index_sequence<I...>) { F(arg<A>(a[I])...); }\n"
	"	template <void (*F)(A...)> static void thunk(void **a) { call<F>(a, std::index_sequence_for<A...>{}); }\n"
	"	/* The threads of a block in order, the kernel inlined, its parameters\n"
	"	   read once and threadIdx counted up (as set_idx computes it). */\n"
	"	template <void (*F)(A...)> static void loop(int n, A... v);\n"
	"	template <void (*F)(A...), size_t... I> static void unpack(void **a, int n, std::index_sequence<I...>) { loop<F>(n, arg<A>(a[I])...); }\n"
	"	template <void (*F)(A...)> static void block(void **a, int n) { unpack<F>(a, n, std::index_sequence_for<A...>{}); }\n"
	"};\n"
	"\n"
	"enum { READY, BAR, WARP, DONE, FAILED };\n"
	"static const size_t STACK = 256 * 1024;\n"
	"#ifndef GDFK_FIBERS\n"
	"#define GDFK_FIBERS 0\n"
	"#endif\n"
	"static int nthreads, cur, fibers = GDFK_FIBERS;\n"
	"static void **args;\n"
	"static void (*thunk)(void **);\n"
	"static unsigned char *state;\n"
	"static unsigned char *stacks;\n"
	"static size_t stacks_len;\n"
	"static int bar_count, bar_result, bar_waiting;\n"
	"static uint64_t *xch[2];\n"
	"static unsigned *warp_gen, *warp_part;\n"
	"static const char *fail;\n"
	"\n"
	"template <class... A> template <void (*F)(A...)> void fn<void (*)(A...)>::loop(int n, A... v) {\n"
	"	unsigned bx = blockDim.x, by = blockDim.y, x = 0, y = 0, z = 0;\n"
	"	for (int t = 0; t < n; t++) {\n"
	"		cur = t;\n"
	"		threadIdx = uint3{x, y, z};\n"
	"		F(v...);\n"
	"		if (++x == bx) {\n"
	"			x = 0;\n"
	"			if (++y == by) {\n"
	"				y = 0;\n"
	"				z++;\n"
	"			}\n"
	"		}\n"
	"	}\n"
	"}\n"
	"\n"
	"static void set_idx(int t) {\n"
	"	threadIdx.x = t % blockDim.x;\n"
	"	threadIdx.y = (t / blockDim.x) % blockDim.y;\n"
	"	threadIdx.z = t / (blockDim.x * blockDim.y);\n"
	"}\n"
	"\n"
	"#if defined(__x86_64__) && !defined(GDFK_UCONTEXT)\n"
	"/* Saves the callee-saved registers on this stack, stores its pointer in\n"
	"   *save and resumes the stack at to. The floating-point control words\n"
	"   (MXCSR, x87) are not switched: kernels never change them, so every\n"
	"   fiber runs with the stream thread's, as a fiber-free kernel does. */\n"
	"extern \"C\" void gdfk_switch(void **save, void *to);\n"
	"__asm__(\".text\\n.p2align 4\\n.globl gdfk_switch\\n.hidden gdfk_switch\\n.type gdfk_switch,@function\\n\"\n"
	"	\"gdfk_switch:\\n\"\n"
	"	\"\\tpushq %rbp\\n\\tpushq %rbx\\n\\tpushq %r12\\n\\tpushq %r13\\n\\tpushq %r14\\n\\tpushq %r15\\n\"\n"
	"	\"\\tmovq %rsp, (%rdi)\\n\\tmovq %rsi, %rsp\\n\"\n"
	"	\"\\tpopq %r15\\n\\tpopq %r14\\n\\tpopq %r13\\n\\tpopq %r12\\n\\tpopq %rbx\\n\\tpopq %rbp\\n\"\n"
	"	\"\\tret\\n.size gdfk_switch, .-gdfk_switch\\n\");\n"
	"static void **sps;\n"
	"static void *sched_sp;\n"
	"static void entry(void);\n"
	"static void fiber_init(int t) {\n"
	"	uint64_t *top = (uint64_t *)(stacks + (size_t)(t + 1) * STACK);\n"
	"	top[-1] = 0;\n"
	"	top[-2] = (uint64_t)(uintptr_t)&entry;\n"
	"	for (int i = 3; i <= 8; i++) top[-i] = 0;\n"
	"	sps[t] = top - 8;\n"
	"}\n"
	"static void fiber_enter(int t) { gdfk_switch(&sched_sp, sps[t]); }\n"
	"/* A thread that stops (at a barrier or done) passes on to the next ready\n"
	"   thread of the scheduler's pass itself, not through the scheduler (one\n"
	"   switch instead of two): the same threads in the same order, since a\n"
	"   thread changes no state but its own. The last returns to the scheduler. */\n"
	"static void set_idx(int t);\n"
	"static void fiber_yield(void) {\n"
	"	int from = cur;\n"
	"	for (int t = from + 1; t < nthreads; t++)\n"
	"		if (state[t] == READY) {\n"
	"			cur = t;\n"
	"			set_idx(t);\n"
	"			gdfk_switch(&sps[from], sps[t]);\n"
	"			return;\n"
	"		}\n"
	"	gdfk_switch(&sps[from], sched_sp);\n"
	"}\n"
	"static int fibers_alloc(int n) {\n"
	"	void **p = (void **)realloc(sps, n * sizeof *sps);\n"
	"	if (!p) return -1;\n"
	"	sps = p;\n"
	"	return 0;\n"
	"}\n"
	"#else\n"
	"#include <ucontext.h>\n"
	"static ucontext_t *ctxs, sched_ctx;\n"
	"static void entry(void);\n"
	"static void fiber_init(int t) {\n"
	"	getcontext(&ctxs[t]);\n"
	"	ctxs[t].uc_stack.ss_sp = stacks + (size_t)t * STACK + 4096;\n"
	"	ctxs[t].uc_stack.ss_size = STACK - 4096;\n"
	"	ctxs[t].uc_link = &sched_ctx;\n"
	"	makecontext(&ctxs[t], entry, 0);\n"
	"}\n"
	"static void fiber_enter(int t) { swapcontext(&sched_ctx, &ctxs[t]); }\n"
	"static void fiber_yield(void) { swapcontext(&ctxs[cur], &sched_ctx); }\n"
	"static int fibers_alloc(int n) {\n"
	"	ucontext_t *p = (ucontext_t *)realloc(ctxs, n * sizeof *ctxs);\n"
	"	if (!p) return -1;\n"
	"	ctxs = p;\n"
	"	return 0;\n"
	"}\n"
	"#endif\n"
	"\n"
	"static void entry(void) {\n"
	"	thunk(args);\n"
	"	state[cur] = DONE;\n"
	"	fiber_yield();\n"
	"	abort(); /* a finished thread is never resumed */\n"
	"}\n"
	"\n"
	"static void need_fibers(const char *what) {\n"
	"	if (fibers) return;\n"
	"	fprintf(stderr, \"fake CUDA: %s in a kernel compiled without fibers\\n\", what);\n"
	"	abort();\n"
	"}\n"
	"\n"
	"/* Fails the launch with msg (the block stops: its threads are not\n"
	"   resumed), as a fault does on a GPU. */\n"
	"__attribute__((noreturn)) static void trap(const char *msg) {\n"
	"	need_fibers(msg);\n"
	"	if (!fail) fail = msg; /* the block's first failure */\n"
	"	state[cur] = FAILED;\n"
	"	fiber_yield();\n"
	"	abort(); /* a failed thread is never resumed */\n"
	"}\n"
	"\n"
	"/* Block barrier: returns how many threads passed p != 0. */\n"
	"static int barrier(int p) {\n"
	"	need_fibers(\"__syncthreads\");\n"
	"	bar_count += p;\n"
	"	state[cur] = BAR;\n"
	"	fiber_yield();\n"
	"	return bar_result;\n"
	"}\n"
	"\n"
	"/* Warp barrier: writes v (8 bytes at most) into the exchange slot of this\n"
	"   round and returns the slots of the round once every live lane of the\n"
	"   warp arrived. */\n"
	"static const uint64_t *warp_sync(const void *v, size_t size, unsigned *part) {\n"
	"	need_fibers(\"a warp operation\");\n"
	"	int w = cur >> 5;\n"
	"	int g = warp_gen[w] & 1;\n"
	"	if (v) memcpy(&xch[g][cur], v, size);\n"
	"	state[cur] = WARP;\n"
	"	fiber_yield();\n"
	"	if (part) *part = warp_part[2 * w + g];\n"
	"	return xch[g] + (w << 5);\n"
	"}\n"
	"\n"
	"static int run_block(void) {\n"
	"	for (int t = 0; t < nthreads; t++) {\n"
	"		state[t] = READY;\n"
	"		fiber_init(t);\n"
	"	}\n"
	"	int nwarps = (nthreads + 31) / 32;\n"
	"	for (;;) {\n"
	"		for (int t = 0; t < nthreads; t++) {\n"
	"			if (state[t] != READY) continue;\n"
	"			cur = t;\n"
	"			set_idx(t);\n"
	"			fiber_enter(t);\n"
	"		}\n"
	"		int done = 0, bar = 0;\n"
	"		for (int t = 0; t < nthreads; t++) {\n"
	"			if (state[t] == FAILED) return -1; /* fail says why */\n"
	"			done += state[t] == DONE;\n"
	"			bar += state[t] == BAR;\n"
	"		}\n"
	"		if (done == nthreads) return 0;\n"
	"		int released = 0;\n"
	"		for (int w = 0; w < nwarps; w++) {\n"
	"			int live = 0, waiting = 0;\n"
	"			unsigned mask = 0;\n"
	"			for (int t = w * 32; t < w * 32 + 32 && t < nthreads; t++) {\n"
	"				live += state[t] != DONE;\n"
	"				if (state[t] == WARP) {\n"
	"					waiting++;\n"
	"					mask |= 1u << (t & 31);\n"
	"				}\n"
	"			}\n"
	"			if (waiting && waiting == live) {\n"
	"				warp_part[2 * w + (warp_gen[w] & 1)] = mask;\n"
	"				warp_gen[w]++;\n"
	"				for (int t = w * 32; t < w * 32 + 32 && t < nthreads; t++)\n"
	"					if (state[t] == WARP) state[t] = READY;\n"
	"				released = 1;\n"
	"			}\n"
	"		}\n"
	"		if (released) continue;\n"
	"		if (bar == nthreads - done) {\n"
	"			bar_result = bar_count;\n"
	"			bar_waiting = bar;\n"
	"			bar_count = 0;\n"
	"			for (int t = 0; t < nthreads; t++)\n"
	"				if (state[t] == BAR) state[t] = READY;\n"
	"			continue;\n"
	"		}\n"
	"		fail = \"threads of one block wait at different barriers (__syncthreads and a warp operation): a divergent barrier\";\n"
	"		return -1;\n"
	"	}\n"
	"}\n"
	"} // namespace gdfk\n"
	"\n"
	"static inline void __syncthreads(void) { gdfk::barrier(0); }\n"
	"static inline int __syncthreads_count(int p) { return gdfk::barrier(p != 0); }\n"
	"static inline int __syncthreads_and(int p) { return gdfk::barrier(p != 0) == gdfk::bar_waiting; }\n"
	"static inline int __syncthreads_or(int p) { return gdfk::barrier(p != 0) != 0; }\n"
	"static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; gdfk::warp_sync(0, 0, 0); }\n"
	"static inline unsigned __activemask(void) {\n"
	"	unsigned m = 0;\n"
	"	int w = gdfk::cur >> 5;\n"
	"	for (int t = w * 32; t < w * 32 + 32 && t < gdfk::nthreads; t++)\n"
	"		if (gdfk::state[t] != gdfk::DONE) m |= 1u << (t & 31);\n"
	"	return m;\n"
	"}\n"
	"static inline unsigned __ballot_sync(unsigned mask, int p) {\n"
	"	unsigned part, out = 0;\n"
	"	uint64_t v = p != 0;\n"
	"	const uint64_t *s = gdfk::warp_sync(&v, sizeof v, &part);\n"
	"	for (int l = 0; l < 32; l++)\n"
	"		if ((part >> l & 1) && s[l]) out |= 1u << l;\n"
	"	return out & mask;\n"
	"}\n"
	"static inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }\n"
	"static inline int __all_sync(unsigned mask, int p) {\n"
	"	unsigned part;\n"
	"	uint64_t v = p != 0;\n"
	"	const uint64_t *s = gdfk::warp_sync(&v, sizeof v, &part);\n"
	"	for (int l = 0; l < 32; l++)\n"
	"		if ((part >> l & 1) && (mask >> l & 1) && !s[l]) return 0;\n"
	"	return 1;\n"
	"}\n"
	"template <class T> static inline T gdfk_shfl(T v, int kind, int x, int width) {\n"
	"	static_assert(sizeof(T) <= 8, \"shuffles of at most 8 bytes\");\n"
	"	const uint64_t *s = gdfk::warp_sync(&v, sizeof v, 0);\n"
	"	int lane = gdfk::cur & 31, base = lane - lane % width, src;\n"
	"	switch (kind) {\n"
	"	case 0: src = base + (x % width); break;         /* __shfl_sync */\n"
	"	case 1: src = lane - x; if (src < base) return v; break; /* up */\n"
	"	case 2: src = lane + x; if (src >= base + width) return v; break; /* down */\n"
	"	default: src = lane ^ x; if (src >= base + width) return v; break; /* xor */\n"
	"	}\n"
	"	if ((gdfk::cur & ~31) + src >= gdfk::nthreads) return v;\n"
	"	T out;\n"
	"	memcpy((void *)&out, &s[src], sizeof out);\n"
	"	return out;\n"
	"}\n"
	"template <class T> static inline T __shfl_sync(unsigned m, T v, int l, int w = 32) { (void)m; return gdfk_shfl(v, 0, l, w); }\n"
	"template <class T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { (void)m; return gdfk_shfl(v, 1, (int)d, w); }\n"
	"template <class T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { (void)m; return gdfk_shfl(v, 2, (int)d, w); }\n"
	"template <class T> static inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) { (void)m; return gdfk_shfl(v, 3, x, w); }\n"
	"\n"
	"/* Runs a launch: every block, one after another. */\n"
	"extern \"C\" __attribute__((visibility(\"default\"))) int gdfk_run(const gdfk::desc *d, const unsigned *grid,\n"
	"		const unsigned *block, size_t shmem, void **a, char *err, size_t errlen) {\n"
	"	using namespace gdfk;\n"
	"	static unsigned char *dyn;\n"
	"	static size_t dyn_len;\n"
	"	gridDim = dim3{grid[0], grid[1], grid[2]};\n"
	"	blockDim = dim3{block[0], block[1], block[2]};\n"
	"	nthreads = (int)(block[0] * block[1] * block[2]);\n"
	"	args = a;\n"
	"	thunk = d->thunk;\n"
	"	fail = 0;\n"
	"	if (shmem > dyn_len) {\n"
	"		free(dyn);\n"
	"		dyn = (unsigned char *)aligned_alloc(128, (shmem + 127) & ~(size_t)127); /* aligned as a GPU's */\n"
	"		dyn_len = dyn ? shmem : 0;\n"
	"		if (!dyn) {\n"
	"			snprintf(err, errlen, \"out of memory for %zu bytes of shared memory\", shmem);\n"
	"			return -1;\n"
	"		}\n"
	"	}\n"
	"	gdfk_dyn_smem = dyn;\n"
	"	if (fibers) {\n"
	"		size_t need = (size_t)nthreads * STACK;\n"
	"		if (need > stacks_len) {\n"
	"			if (stacks) munmap(stacks, stacks_len);\n"
	"			stacks = (unsigned char *)mmap(0, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);\n"
	"			if (stacks == MAP_FAILED) {\n"
	"				stacks = 0;\n"
	"				stacks_len = 0;\n"
	"				snprintf(err, errlen, \"cannot map %zu bytes of thread stacks\", need);\n"
	"				return -1;\n"
	"			}\n"
	"			stacks_len = need;\n"
	"			for (int t = 0; t < nthreads; t++) mprotect(stacks + (size_t)t * STACK, 4096, PROT_NONE); /* guard */\n"
	"			free(state);\n"
	"			free(xch[0]);\n"
	"			free(xch[1]);\n"
	"			free(warp_gen);\n"
	"			free(warp_part);\n"
	"			int nw = (nthreads + 31) / 32;\n"
	"			state = (unsigned char *)calloc(nthreads, 1);\n"
	"			xch[0] = (uint64_t *)calloc(nw * 32, 8);\n"
	"			xch[1] = (uint64_t *)calloc(nw * 32, 8);\n"
	"			warp_gen = (unsigned *)calloc(nw, sizeof *warp_gen);\n"
	"			warp_part = (unsigned *)calloc(2 * nw, sizeof *warp_part);\n"
	"			if (!state || !xch[0] || !xch[1] || !warp_gen || !warp_part || fibers_alloc(nthreads)) {\n"
	"				snprintf(err, errlen, \"out of memory for %d threads\", nthreads);\n"
	"				return -1;\n"
	"			}\n"
	"		}\n"
	"	}\n"
	"	for (unsigned z = 0; z < grid[2]; z++)\n"
	"		for (unsigned y = 0; y < grid[1]; y++)\n"
	"			for (unsigned x = 0; x < grid[0]; x++) {\n"
	"				blockIdx = uint3{x, y, z};\n"
	"				if (shmem) memset(dyn, 0xff, shmem); /* uninitialized: NaNs */\n"
	"				if (!fibers) {\n"
	"					d->block(a, nthreads);\n"
	"					continue;\n"
	"				}\n"
	"				if (run_block()) {\n"
	"					snprintf(err, errlen, \"%s: block (%u,%u,%u): %s\", d->name, x, y, z, fail);\n"
	"					return -1;\n"
	"				}\n"
	"			}\n"
	"	return 0;\n"
	"}\n"
	"\n"
	"#define GDFK_KERNEL(K)                                                                                \\\n"
	"	extern \"C\" __attribute__((visibility(\"default\"))) const gdfk::desc *gdfk_kernel_##K(void) {    \\\n"
	"		typedef gdfk::fn<decltype(&K)> F;                                                      \\\n"
	"		static const gdfk::desc d = {#K, F::n, F::sizes(), F::ptrs(), &F::thunk<&K>, &F::block<&K>}; \\\n"
	"		return &d;                                                                             \\\n"
	"	}\n"
	"\n";

/* The headers the fake NVRTC puts first on a kernel's include path (in
   its build directory, before the -I options): its emulations of CUDA's
   mma.h (nvcuda::wmma), cuda_bf16.h and cuda_fp16.h (gpu/rtc's package
   comment says what they model). */
static const char fk_fp16_h[] =
	"// The fake NVRTC's cuda_fp16.h: __half as 16 bits with the conversions to\n"
	"// and from float (float to half rounds to nearest even, overflow to\n"
	"// infinity, subnormals kept; a NaN stays a NaN). Arithmetic on half values\n"
	"// is not emulated: the operators between two __half are deleted.\n"
	"#ifndef GDFK_CUDA_FP16_H\n"
	"#define GDFK_CUDA_FP16_H\n"
	"static inline unsigned short gdfk_f2h(float f) {\n"
	"	unsigned u;\n"
	"	memcpy(&u, &f, 4);\n"
	"	unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;\n"
	"	if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
	"	if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* 65520 and up: infinity */\n"
	"	if (a >= 0x38800000u) { /* a normal half: rebias, round to nearest even */\n"
	"		unsigned r = a - 0x38000000u;\n"
	"		r += 0xfffu + ((r >> 13) & 1u);\n"
	"		return (unsigned short)(sign | (r >> 13));\n"
	"	}\n"
	"	float af;\n"
	"	memcpy(&af, &a, 4);\n"
	"	return (unsigned short)(sign | (unsigned)nearbyintf(af * 16777216.0f)); /* in units of 2^-24 */\n"
	"}\n"
	"static inline float gdfk_h2f(unsigned short h) {\n"
	"	unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;\n"
	"	if (e == 0) {\n"
	"		float v = (float)m * (1.0f / 16777216.0f);\n"
	"		return sign ? -v : v;\n"
	"	}\n"
	"	u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));\n"
	"	float f;\n"
	"	memcpy(&f, &u, 4);\n"
	"	return f;\n"
	"}\n"
	"struct __align__(2) __half {\n"
	"	unsigned short __x;\n"
	"	__half() = default;\n"
	"	__half(float f) : __x(gdfk_f2h(f)) {}\n"
	"	operator float() const { return gdfk_h2f(__x); }\n"
	"};\n"
	"typedef __half half;\n"
	"#ifndef GDFK_DELETE_OPS\n"
	"#define GDFK_DELETE_OPS(T)                 \\\n"
	"	T operator+(const T &, const T &) = delete; \\\n"
	"	T operator-(const T &, const T &) = delete; \\\n"
	"	T operator*(const T &, const T &) = delete; \\\n"
	"	T operator/(const T &, const T &) = delete;\n"
	"#endif\n"
	"GDFK_DELETE_OPS(__half)\n"
	"static inline __half __float2half(float f) { return __half(f); }\n"
	"static inline __half __float2half_rn(float f) { return __half(f); }\n"
	"static inline float __half2float(__half h) { return gdfk_h2f(h.__x); }\n"
	"static inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }\n"
	"static inline unsigned short __half_as_ushort(__half h) { return h.__x; }\n"
	"#endif\n";

static const char fk_bf16_h[] =
	"// The fake NVRTC's cuda_bf16.h: __nv_bfloat16 as 16 bits with the\n"
	"// conversions to and from float (float to bf16 rounds to nearest even; a\n"
	"// NaN stays a NaN). Arithmetic on bf16 values is not emulated: the\n"
	"// operators between two __nv_bfloat16 are deleted, so a kernel that uses\n"
	"// them fails to compile here rather than compute something else.\n"
	"#ifndef GDFK_CUDA_BF16_H\n"
	"#define GDFK_CUDA_BF16_H\n"
	"static inline unsigned short gdfk_f2bf(float f) {\n"
	"	unsigned u;\n"
	"	memcpy(&u, &f, 4);\n"
	"	if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);\n"
	"	u += 0x7fffu + ((u >> 16) & 1u);\n"
	"	return (unsigned short)(u >> 16);\n"
	"}\n"
	"static inline float gdfk_bf2f(unsigned short h) {\n"
	"	unsigned u = (unsigned)h << 16;\n"
	"	float f;\n"
	"	memcpy(&f, &u, 4);\n"
	"	return f;\n"
	"}\n"
	"struct __align__(2) __nv_bfloat16 {\n"
	"	unsigned short __x;\n"
	"	__nv_bfloat16() = default;\n"
	"	__nv_bfloat16(float f) : __x(gdfk_f2bf(f)) {}\n"
	"	operator float() const { return gdfk_bf2f(__x); }\n"
	"};\n"
	"typedef __nv_bfloat16 nv_bfloat16;\n"
	"#define GDFK_DELETE_OPS(T)                 \\\n"
	"	T operator+(const T &, const T &) = delete; \\\n"
	"	T operator-(const T &, const T &) = delete; \\\n"
	"	T operator*(const T &, const T &) = delete; \\\n"
	"	T operator/(const T &, const T &) = delete;\n"
	"GDFK_DELETE_OPS(__nv_bfloat16)\n"
	"static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }\n"
	"static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }\n"
	"static inline float __bfloat162float(__nv_bfloat16 h) { return gdfk_bf2f(h.__x); }\n"
	"static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }\n"
	"static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }\n"
	"#endif\n";

static const char fk_mma_h[] =
	"// The fake NVRTC's mma.h: nvcuda::wmma's fragments and warp matrix\n"
	"// functions for the shapes m16n16k16, m32n8k16 and m8n32k16 with __half\n"
	"// or __nv_bfloat16 matrix_a and matrix_b and float accumulators.\n"
	"//\n"
	"// A fragment holds num_elements = rows x cols / 32 elements in each lane:\n"
	"// element i of lane l is element p = 32 i + l of the matrix in row-major\n"
	"// order (row p / cols, column p % cols). CUDA leaves this layout\n"
	"// unspecified; a GPU's differs, so a kernel that depends on it fails here\n"
	"// or there.\n"
	"//\n"
	"// load_matrix_sync, store_matrix_sync and mma_sync are warp-collective:\n"
	"// every lane of the warp (32 threads, none returned) must call the same\n"
	"// function with the same arguments at the same point, or the launch fails\n"
	"// naming the call, the warp and the lanes. The pointer must be 32-byte\n"
	"// aligned and ldm a multiple of 16 bytes, as CUDA requires. mma_sync\n"
	"// computes each element of D in fp32 as\n"
	"//   d = c; for k = 0 .. K-1: d = d + a[i][k] * b[k][j]\n"
	"// each product exact (bf16 and half inputs are read exactly and their\n"
	"// products fit a float), each sum rounded to nearest even, in that order;\n"
	"// a GPU's tensor cores sum in an order (and with a rounding) they do not\n"
	"// specify. fill_fragment fills the lane's own elements (no sync).\n"
	"#ifndef GDFK_MMA_H\n"
	"#define GDFK_MMA_H\n"
	"#include <stdarg.h>\n"
	"#include <cuda_fp16.h>\n"
	"#include <cuda_bf16.h>\n"
	"\n"
	"namespace nvcuda {\n"
	"namespace wmma {\n"
	"struct row_major;\n"
	"struct col_major;\n"
	"struct matrix_a;\n"
	"struct matrix_b;\n"
	"struct accumulator;\n"
	"enum layout_t { mem_row_major, mem_col_major };\n"
	"\n"
	"namespace gdfk_wmma {\n"
	"template <class Use, int M, int N, int K> struct dims;\n"
	"template <int M, int N, int K> struct dims<matrix_a, M, N, K> { enum { R = M, C = K }; };\n"
	"template <int M, int N, int K> struct dims<matrix_b, M, N, K> { enum { R = K, C = N }; };\n"
	"template <int M, int N, int K> struct dims<accumulator, M, N, K> { enum { R = M, C = N }; };\n"
	"template <int M, int N, int K> struct shape {\n"
	"	static const bool ok = K == 16 && ((M == 16 && N == 16) || (M == 32 && N == 8) || (M == 8 && N == 32));\n"
	"};\n"
	"template <class T> struct input { static const bool ok = std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value; };\n"
	"template <class L> struct layout { static const bool ok = std::is_same<L, row_major>::value || std::is_same<L, col_major>::value; };\n"
	"\n"
	"/* Each warp's matrices of an mma_sync, two rounds' worth (as the shuffles'\n"
	"   exchange slots): A (M x K), B (K x N) and C (M x N), as floats. */\n"
	"enum { MAXE = 512 };\n"
	"static float bufs[32][2][3][MAXE];\n"
	"\n"
	"static char msg[512];\n"
	"static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));\n"
	"static void fail(const char *fmt, ...) {\n"
	"	if (!gdfk::fail) { /* the block's first failure is the one told */\n"
	"		va_list ap;\n"
	"		va_start(ap, fmt);\n"
	"		vsnprintf(msg, sizeof msg, fmt, ap);\n"
	"		va_end(ap);\n"
	"	}\n"
	"	gdfk::trap(msg);\n"
	"}\n"
	"\n"
	"static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ULL; }\n"
	"\n"
	"/* The warp meets: every one of its 32 lanes must arrive with the same key\n"
	"   (the call and its arguments; the round's number mixed in, so that a lane\n"
	"   at another warp operation, which leaves its slot as it was, is seen). */\n"
	"static void collective(const char *call, uint64_t key) {\n"
	"	int w = gdfk::cur >> 5, lane = gdfk::cur & 31;\n"
	"	if (w * 32 + 32 > gdfk::nthreads)\n"
	"		fail(\"wmma::%s in warp %d, of %d threads: the warp matrix functions need full warps of 32 threads (a block of \"\n"
	"		     \"%d threads)\", call, w, gdfk::nthreads - w * 32, gdfk::nthreads);\n"
	"	key = mix(key, gdfk::warp_gen[w]);\n"
	"	unsigned part;\n"
	"	const uint64_t *s = gdfk::warp_sync(&key, sizeof key, &part);\n"
	"	if (part != 0xffffffffu)\n"
	"		fail(\"wmma::%s: lanes 0x%08x of warp %d did not call it (they returned or took another branch): it is \"\n"
	"		     \"warp-collective, all 32 lanes must call it together (a divergent call)\", call, ~part, w);\n"
	"	for (int l = 0; l < 32; l++)\n"
	"		if (s[l] != key)\n"
	"			fail(\"wmma::%s (lane %d of warp %d): lane %d is not making the same call (it made another warp matrix \"\n"
	"			     \"call or warp operation, or passed other arguments: pointer, ldm, layout, fragment type): a \"\n"
	"			     \"divergent call; all 32 lanes must make the same call together\", call, lane, w, l);\n"
	"}\n"
	"\n"
	"template <class T> static void check_ptr(const char *call, const T *p, unsigned ldm) {\n"
	"	if ((uintptr_t)p % 32)\n"
	"		fail(\"wmma::%s: the pointer is %u bytes past a 32-byte boundary: it must be 256-bit aligned\", call,\n"
	"		     (unsigned)((uintptr_t)p % 32));\n"
	"	if (ldm * sizeof(T) % 16)\n"
	"		fail(\"wmma::%s: ldm %u (elements of %u bytes) is not a multiple of 16 bytes\", call, ldm, (unsigned)sizeof(T));\n"
	"}\n"
	"} // namespace gdfk_wmma\n"
	"\n"
	"template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {\n"
	"	static_assert(gdfk_wmma::shape<M, N, K>::ok, \"the fake's wmma has the shapes m16n16k16, m32n8k16 and m8n32k16\");\n"
	"	static_assert(!std::is_same<Use, accumulator>::value || std::is_same<T, float>::value,\n"
	"		      \"the fake's wmma has float accumulators only\");\n"
	"	static_assert(std::is_same<Use, accumulator>::value || gdfk_wmma::input<T>::ok,\n"
	"		      \"the fake's wmma has __half and __nv_bfloat16 matrix_a and matrix_b\");\n"
	"	static_assert(std::is_same<Use, accumulator>::value ? std::is_void<Layout>::value : gdfk_wmma::layout<Layout>::ok,\n"
	"		      \"matrix_a and matrix_b take row_major or col_major; an accumulator no layout\");\n"
	"\n"
	"      public:\n"
	"	enum { rows = gdfk_wmma::dims<Use, M, N, K>::R, cols = gdfk_wmma::dims<Use, M, N, K>::C };\n"
	"	enum { num_elements = rows * cols / 32 };\n"
	"	typedef T element_type;\n"
	"	typedef T storage_element_type;\n"
	"	T x[num_elements];\n"
	"};\n"
	"\n"
	"template <class Use, int M, int N, int K, class T, class L, class V>\n"
	"static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v) {\n"
	"	for (int i = 0; i < fragment<Use, M, N, K, T, L>::num_elements; i++) f.x[i] = T(v);\n"
	"}\n"
	"\n"
	"namespace gdfk_wmma {\n"
	"/* Where element i of this lane's fragment lies in memory, ldm apart in the\n"
	"   major dimension. */\n"
	"template <class F> static inline size_t at(int i, unsigned ldm, bool row) {\n"
	"	int p = 32 * i + (gdfk::cur & 31), r = p / F::cols, c = p % F::cols;\n"
	"	return row ? (size_t)r * ldm + c : (size_t)c * ldm + r;\n"
	"}\n"
	"template <class F> static inline uint64_t key(int call, const void *p, unsigned ldm, int layout) {\n"
	"	uint64_t h = mix(mix(mix(mix(1469598103934665603ULL, call), (uintptr_t)p), ldm), layout);\n"
	"	return mix(mix(mix(h, F::rows), F::cols), sizeof(typename F::element_type) * 2 + std::is_same<typename F::element_type, __half>::value);\n"
	"}\n"
	"} // namespace gdfk_wmma\n"
	"\n"
	"template <class Use, int M, int N, int K, class T, class L>\n"
	"static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {\n"
	"	typedef fragment<Use, M, N, K, T, L> F;\n"
	"	static_assert(!std::is_same<Use, accumulator>::value, \"an accumulator's load_matrix_sync takes a layout_t\");\n"
	"	bool row = std::is_same<L, row_major>::value;\n"
	"	gdfk_wmma::collective(\"load_matrix_sync\", gdfk_wmma::key<F>(1, p, ldm, row));\n"
	"	gdfk_wmma::check_ptr(\"load_matrix_sync\", p, ldm);\n"
	"	for (int i = 0; i < F::num_elements; i++) f.x[i] = p[gdfk_wmma::at<F>(i, ldm, row)];\n"
	"}\n"
	"\n"
	"template <int M, int N, int K>\n"
	"static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t l) {\n"
	"	typedef fragment<accumulator, M, N, K, float> F;\n"
	"	gdfk_wmma::collective(\"load_matrix_sync\", gdfk_wmma::key<F>(2, p, ldm, l));\n"
	"	gdfk_wmma::check_ptr(\"load_matrix_sync\", p, ldm);\n"
	"	for (int i = 0; i < F::num_elements; i++) f.x[i] = p[gdfk_wmma::at<F>(i, ldm, l == mem_row_major)];\n"
	"}\n"
	"\n"
	"template <int M, int N, int K>\n"
	"static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {\n"
	"	typedef fragment<accumulator, M, N, K, float> F;\n"
	"	gdfk_wmma::collective(\"store_matrix_sync\", gdfk_wmma::key<F>(3, p, ldm, l));\n"
	"	gdfk_wmma::check_ptr(\"store_matrix_sync\", p, ldm);\n"
	"	for (int i = 0; i < F::num_elements; i++) p[gdfk_wmma::at<F>(i, ldm, l == mem_row_major)] = f.x[i];\n"
	"}\n"
	"\n"
	"/* D = A B + C: the lanes put their elements of A, B and C in the warp's\n"
	"   buffers of this round, meet, and each computes its own elements of D. */\n"
	"template <int M, int N, int K, class T, class LA, class LB>\n"
	"static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,\n"
	"			    const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c,\n"
	"			    bool satf = false) {\n"
	"	typedef fragment<matrix_a, M, N, K, T, LA> FA;\n"
	"	typedef fragment<matrix_b, M, N, K, T, LB> FB;\n"
	"	typedef fragment<accumulator, M, N, K, float> FC;\n"
	"	int w = gdfk::cur >> 5, lane = gdfk::cur & 31;\n"
	"	float(*buf)[gdfk_wmma::MAXE] = gdfk_wmma::bufs[w & 31][gdfk::warp_gen[w] & 1];\n"
	"	for (int i = 0; i < FA::num_elements; i++) buf[0][32 * i + lane] = (float)a.x[i];\n"
	"	for (int i = 0; i < FB::num_elements; i++) buf[1][32 * i + lane] = (float)b.x[i];\n"
	"	for (int i = 0; i < FC::num_elements; i++) buf[2][32 * i + lane] = c.x[i];\n"
	"	gdfk_wmma::collective(\"mma_sync\", gdfk_wmma::key<FA>(4, 0, M * 10000 + N * 100 + K, satf) ^ gdfk_wmma::key<FB>(5, 0, 0, 0));\n"
	"	if (satf) gdfk_wmma::fail(\"wmma::mma_sync: satf (saturation to finite values) is not emulated\");\n"
	"	const float *A = buf[0], *B = buf[1], *C = buf[2];\n"
	"	for (int i = 0; i < FC::num_elements; i++) {\n"
	"		int p = 32 * i + lane, r = p / N, j = p % N;\n"
	"		float s = C[p];\n"
	"		for (int k = 0; k < K; k++) s = s + A[r * K + k] * B[k * N + j];\n"
	"		d.x[i] = s;\n"
	"	}\n"
	"}\n"
	"} // namespace wmma\n"
	"} // namespace nvcuda\n"
	"#endif\n";

static const struct {
	const char *name, *text;
} fk_headers[] = {{"mma.h", fk_mma_h}, {"cuda_bf16.h", fk_bf16_h}, {"cuda_fp16.h", fk_fp16_h}};
#define FK_NHEADERS (int)(sizeof fk_headers / sizeof *fk_headers)

/* ---- cuBLAS ---- */

enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

#define BLAS_MAGIC 0x424c4153u

typedef struct fk_blas {
	unsigned magic;
	int dev;
	void *stream; /* NULL: the legacy default stream */
	int math;
} fk_blas;

API const char *cublasGetStatusName(int s) {
	switch (s) {
	case 0: return "CUBLAS_STATUS_SUCCESS";
	case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
	case 7: return "CUBLAS_STATUS_INVALID_VALUE";
	case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
	case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
	case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
	case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
	case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
	case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
	}
	return "CUBLAS_STATUS_UNKNOWN";
}

API const char *cublasGetStatusString(int s) {
	switch (s) {
	case 0: return "success";
	case 1: return "the library was not initialized";
	case 3: return "the resource allocation failed";
	case 7: return "an invalid numeric value was used as an argument";
	case 8: return "an absent device architectural feature is required";
	case 11: return "an access to GPU memory space failed";
	case 13: return "the GPU program failed to execute";
	case 14: return "an internal operation failed";
	case 15: return "the functionality requested is not supported";
	case 16: return "an error was detected when checking the current licensing";
	}
	return "unknown error";
}

/* libraryPropertyType: MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2; the
   fake's cuBLAS has the runtime's version. */
API int cublasGetProperty(int type, int *v) {
	int r = rt_version();
	switch (type) {
	case 0: *v = r / 1000; return CUBLAS_STATUS_SUCCESS;
	case 1: *v = r % 1000 / 10; return CUBLAS_STATUS_SUCCESS;
	case 2: *v = 0; return CUBLAS_STATUS_SUCCESS;
	}
	return CUBLAS_STATUS_INVALID_VALUE;
}

/* The handle, used with its device current (as cuBLAS requires). */
static int blas_check(const char *call, fk_blas *h) {
	if (!h || h->magic != BLAS_MAGIC) {
		warnf("%s: %p is not a live cuBLAS handle", call, (void *)h);
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	int d = ctx_dev(call);
	if (d != h->dev) {
		warnf("%s: the handle is on device %d but device %d is current", call, h->dev, d);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (sticky_err()) return CUBLAS_STATUS_EXECUTION_FAILED;
	return CUBLAS_STATUS_SUCCESS;
}

API int cublasCreate_v2(fk_blas **out) {
	*out = NULL;
	int d = ctx_dev("cublasCreate_v2");
	if (sticky_err()) return CUBLAS_STATUS_NOT_INITIALIZED;
	fk_blas *h = calloc(1, sizeof *h);
	if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
	h->magic = BLAS_MAGIC;
	h->dev = d;
	*out = h;
	return CUBLAS_STATUS_SUCCESS;
}

API int cublasDestroy_v2(fk_blas *h) {
	int r = blas_check("cublasDestroy_v2", h);
	if (r && r != CUBLAS_STATUS_EXECUTION_FAILED) return r;
	h->magic = 0; /* never freed: queued work may still point at it */
	return CUBLAS_STATUS_SUCCESS;
}

API int cublasSetStream_v2(fk_blas *h, void *s) {
	int r = blas_check("cublasSetStream_v2", h);
	if (r) return r;
	stream *st;
	if (check_stream("cublasSetStream_v2", s, &st)) return CUBLAS_STATUS_INVALID_VALUE;
	if (st && st->dev != h->dev) {
		warnf("cublasSetStream_v2: the stream is on device %d, the handle on %d", st->dev, h->dev);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}

API int cublasGetStream_v2(fk_blas *h, void **s) {
	int r = blas_check("cublasGetStream_v2", h);
	if (r) return r;
	*s = h->stream;
	return CUBLAS_STATUS_SUCCESS;
}

API int cublasSetMathMode(fk_blas *h, int mode) {
	int r = blas_check("cublasSetMathMode", h);
	if (r) return r;
	int base = mode & 0xf;
	if (base > 3 || (mode & ~0x1f)) return CUBLAS_STATUS_INVALID_VALUE;
	h->math = mode;
	return CUBLAS_STATUS_SUCCESS;
}

API int cublasGetMathMode(fk_blas *h, int *mode) {
	int r = blas_check("cublasGetMathMode", h);
	if (r) return r;
	*mode = h->math;
	return CUBLAS_STATUS_SUCCESS;
}

enum { FK_R32F = 0, FK_R16F = 2, FK_R16BF = 14 };

static size_t fk_dt_size(int t) { return t == FK_R32F ? 4 : (t == FK_R16F || t == FK_R16BF) ? 2 : 0; }

static float fk_load(const unsigned char *p, size_t i, int t) {
	uint16_t u;
	float f;
	switch (t) {
	case FK_R32F: memcpy(&f, p + 4 * i, 4); return f;
	case FK_R16F: memcpy(&u, p + 2 * i, 2); return h2f(u);
	default: memcpy(&u, p + 2 * i, 2); return b2f(u);
	}
}

static void fk_store(unsigned char *p, size_t i, int t, float f) {
	uint16_t u;
	switch (t) {
	case FK_R32F: memcpy(p + 4 * i, &f, 4); return;
	case FK_R16F: u = f2h(f); memcpy(p + 2 * i, &u, 2); return;
	default: u = f2b(f); memcpy(p + 2 * i, &u, 2); return;
	}
}

/* TF32: 10 bits of mantissa, rounded to nearest (ties away), as
   cvt.rna.tf32.f32 does. */
static float fk_tf32(float x) {
	uint32_t b;
	memcpy(&b, &x, 4);
	if ((b & 0x7f800000u) != 0x7f800000u) b = (b + 0x1000u) & 0xffffe000u;
	memcpy(&x, &b, 4);
	return x;
}

enum { ROUND_NONE, ROUND_TF32, ROUND_BF16, ROUND_F16 };

struct gemm_task {
	int ta, tb, m, n, k, lda, ldb, ldc, at, bt, ct, round;
	float alpha, beta;
	const unsigned char *a, *b;
	unsigned char *c;
	int batch;               /* products (1 unless strided batched) */
	long long sa, sb, sc;    /* elements between two products' matrices */
};

static float fk_round(float x, int r) {
	switch (r) {
	case ROUND_TF32: return fk_tf32(x);
	case ROUND_BF16: return b2f(f2b(x));
	case ROUND_F16: return h2f(f2h(x));
	}
	return x;
}

/* C[i,j] = alpha acc (+ beta C[i,j]). */
__attribute__((optimize("fp-contract=off"))) static inline void gemm_store(struct gemm_task *g, int i, int j, float acc) {
	size_t ic = (size_t)i + (size_t)j * g->ldc;
	float v = g->alpha * acc;
	if (g->beta != 0) {
		float old = g->beta * fk_load(g->c, ic, g->ct);
		v = v + old;
	}
	fk_store(g->c, ic, g->ct, v);
}

/* The reference loop: each element of C one float sum over k in order.
   run_gemm1 computes the same bits faster; fakecublasReferenceGemm(1)
   makes the fake use this one instead (TestGemmBitsMatchReference). */
__attribute__((optimize("fp-contract=off"))) static void run_gemm1_ref(struct gemm_task *g) {
	for (int j = 0; j < g->n; j++) {
		for (int i = 0; i < g->m; i++) {
			float acc = 0;
			for (int p = 0; p < g->k; p++) {
				size_t ia = g->ta ? (size_t)p + (size_t)i * g->lda : (size_t)i + (size_t)p * g->lda;
				size_t ib = g->tb ? (size_t)j + (size_t)p * g->ldb : (size_t)p + (size_t)j * g->ldb;
				float x = fk_round(fk_load(g->a, ia, g->at), g->round);
				float y = fk_round(fk_load(g->b, ib, g->bt), g->round);
				float prod = x * y;
				acc = acc + prod;
			}
			gemm_store(g, i, j, acc);
		}
	}
}

static volatile int gemm_reference;
API void fakecublasReferenceGemm(int on) { gemm_reference = on; }

/* run_gemm1: the reference loop's arithmetic, element for element: each
   C[i,j] is still acc = acc + x*y for p = 0, 1, ... k-1 from acc = 0 (a
   product then a sum, each rounded to float; no fused multiply-add), but
   the inputs are converted (and rounded) once into packed float panels,
   and 8 rows x 4 columns of C are summed side by side, each lane its own
   sum in the same order (SSE lanes round as the scalar unit does). */
typedef float gemm_v4 __attribute__((vector_size(16)));

__attribute__((optimize("fp-contract=off"))) static void run_gemm1(struct gemm_task *g) {
	int m = g->m, n = g->n, k = g->k;
	if (gemm_reference || k == 0) {
		run_gemm1_ref(g);
		return;
	}
	size_t mp = ((size_t)m + 7) & ~(size_t)7; /* rows padded to 8 */
	float *ap = aligned_alloc(32, (mp * (size_t)k * sizeof(float) + 31) & ~(size_t)31);
	float *bp = malloc((size_t)k * (size_t)n * sizeof(float));
	if (!ap || !bp) { /* the slow loop needs no memory */
		free(ap);
		free(bp);
		run_gemm1_ref(g);
		return;
	}
	/* ap[p*mp + i] = A(i, p); bp[j*k + p] = B(p, j), rounded as asked. */
	for (int p = 0; p < k; p++) {
		float *row = ap + (size_t)p * mp;
		for (int i = 0; i < m; i++) {
			size_t ia = g->ta ? (size_t)p + (size_t)i * g->lda : (size_t)i + (size_t)p * g->lda;
			row[i] = fk_round(fk_load(g->a, ia, g->at), g->round);
		}
		for (size_t i = m; i < mp; i++) row[i] = 0;
	}
	for (int j = 0; j < n; j++)
		for (int p = 0; p < k; p++) {
			size_t ib = g->tb ? (size_t)j + (size_t)p * g->ldb : (size_t)p + (size_t)j * g->ldb;
			bp[(size_t)j * k + p] = fk_round(fk_load(g->b, ib, g->bt), g->round);
		}
	int j = 0;
	for (; j + 4 <= n; j += 4) {
		const float *b0 = bp + (size_t)j * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
		for (size_t i = 0; i < mp; i += 8) {
			gemm_v4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
			const float *a = ap + i;
			for (int p = 0; p < k; p++, a += mp) {
				gemm_v4 x0, x1;
				memcpy(&x0, a, 16);
				memcpy(&x1, a + 4, 16);
				gemm_v4 y0 = {b0[p], b0[p], b0[p], b0[p]}, y1 = {b1[p], b1[p], b1[p], b1[p]};
				gemm_v4 y2 = {b2[p], b2[p], b2[p], b2[p]}, y3 = {b3[p], b3[p], b3[p], b3[p]};
				c00 = c00 + x0 * y0;
				c01 = c01 + x1 * y0;
				c10 = c10 + x0 * y1;
				c11 = c11 + x1 * y1;
				c20 = c20 + x0 * y2;
				c21 = c21 + x1 * y2;
				c30 = c30 + x0 * y3;
				c31 = c31 + x1 * y3;
			}
			float out[4][8];
			memcpy(out[0], &c00, 16), memcpy(out[0] + 4, &c01, 16);
			memcpy(out[1], &c10, 16), memcpy(out[1] + 4, &c11, 16);
			memcpy(out[2], &c20, 16), memcpy(out[2] + 4, &c21, 16);
			memcpy(out[3], &c30, 16), memcpy(out[3] + 4, &c31, 16);
			for (int q = 0; q < 4; q++)
				for (size_t r = 0; r < 8 && i + r < (size_t)m; r++) gemm_store(g, (int)(i + r), j + q, out[q][r]);
		}
	}
	for (; j < n; j++) {
		const float *b0 = bp + (size_t)j * k;
		for (size_t i = 0; i < mp; i += 8) {
			gemm_v4 c0 = {0}, c1 = {0};
			const float *a = ap + i;
			for (int p = 0; p < k; p++, a += mp) {
				gemm_v4 x0, x1;
				memcpy(&x0, a, 16);
				memcpy(&x1, a + 4, 16);
				gemm_v4 y = {b0[p], b0[p], b0[p], b0[p]};
				c0 = c0 + x0 * y;
				c1 = c1 + x1 * y;
			}
			float out[8];
			memcpy(out, &c0, 16), memcpy(out + 4, &c1, 16);
			for (size_t r = 0; r < 8 && i + r < (size_t)m; r++) gemm_store(g, (int)(i + r), j, out[r]);
		}
	}
	free(ap);
	free(bp);
}

static void run_gemm(void *arg) {
	struct gemm_task *g = arg;
	delay(&kernel_delay_ms, "FAKE_CUDA_KERNEL_DELAY_MS");
	const unsigned char *a = g->a, *b = g->b;
	unsigned char *c = g->c;
	for (int i = 0; i < g->batch; i++) {
		g->a = a ? a + (size_t)(i * g->sa) * fk_dt_size(g->at) : NULL;
		g->b = b ? b + (size_t)(i * g->sb) * fk_dt_size(g->bt) : NULL;
		g->c = c + (size_t)(i * g->sc) * fk_dt_size(g->ct);
		run_gemm1(g);
	}
	free(g);
}

/* Resolves a column-major rows x cols matrix with leading dimension ld at
   device address p on dev (with batch > 1, the batch matrices stride
   elements apart: all of them). */
static int gemm_matrix_batch(const char *call, const char *which, const void *p, int rows, int cols, int ld, int t,
			     int dev, int batch, long long stride, unsigned char **out) {
	*out = NULL;
	if (rows == 0 || cols == 0 || batch == 0) return 0;
	size_t bytes = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows + (size_t)(batch - 1) * (size_t)stride) * fk_dt_size(t);
	unsigned char *h;
	int d;
	if (dev_lookup((uintptr_t)p, bytes, &h, &d) != 1) {
		warnf("%s: %s (%d x %d, ld %d) at %p is not within a live device allocation", call, which, rows, cols, ld, p);
		return -1;
	}
	if (d != dev) {
		warnf("%s: %s is memory of device %d, the handle's device is %d", call, which, d, dev);
		return -1;
	}
	*out = h;
	return 0;
}

static int gemm_matrix(const char *call, const char *which, const void *p, int rows, int cols, int ld, int t, int dev,
		       unsigned char **out) {
	return gemm_matrix_batch(call, which, p, rows, cols, ld, t, dev, 1, 0, out);
}

/* gemm_batched queues batch products, the matrices of product i at A + i
   sa, B + i sb, C + i sc (elements): cublasSgemmStridedBatched's
   contract; gemm is the one product of cublasSgemm_v2 and cublasGemmEx. */
static int gemm_batched(const char *call, fk_blas *h, int ta, int tb, int m, int n, int k, float alpha, const void *A,
			int at, int lda, long long sa, const void *B, int bt, int ldb, long long sb, float beta, void *C,
			int ct, int ldc, long long sc, int batch, int round) {
	int r = blas_check(call, h);
	if (r) return r;
	if (ta < 0 || ta > 2 || tb < 0 || tb > 2 || m < 0 || n < 0 || k < 0 || batch < 0) {
		warnf("%s: bad operation or size (transa %d, transb %d, m %d, n %d, k %d, batch %d)", call, ta, tb, m, n, k, batch);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (sa < 0 || sb < 0 || sc < 0) {
		warnf("%s: negative strides (A %lld, B %lld, C %lld) are not supported by the fake", call, sa, sb, sc);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (batch > 1 && m > 0 && n > 0 && sc < (long long)(n - 1) * ldc + m) {
		warnf("%s: the products' C matrices overlap (stride %lld, each %d x %d, ldc %d)", call, sc, m, n, ldc);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
	if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1)) {
		warnf("%s: leading dimensions lda %d, ldb %d, ldc %d too small for A %dx%d, B %dx%d, C %dx%d", call, lda, ldb, ldc, ar,
		      ac, br, bc, m, n);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
	struct gemm_task *g = calloc(1, sizeof *g);
	if (!g) return CUBLAS_STATUS_ALLOC_FAILED;
	*g = (struct gemm_task){ta != 0, tb != 0, m, n, alpha == 0 ? 0 : k, lda, ldb, ldc, at, bt, ct, round, alpha, beta, NULL, NULL, NULL,
				batch, sa, sb, sc};
	unsigned char *pa, *pb;
	if ((g->k && (gemm_matrix_batch(call, "A", A, ar, ac, lda, at, h->dev, batch, sa, &pa) ||
		      gemm_matrix_batch(call, "B", B, br, bc, ldb, bt, h->dev, batch, sb, &pb))) ||
	    gemm_matrix_batch(call, "C", C, m, n, ldc, ct, h->dev, batch, sc, &g->c)) {
		free(g);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (g->k) {
		g->a = pa;
		g->b = pb;
	}
	stream *st = NULL;
	if (check_stream(call, h->stream, &st)) {
		free(g);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	submit(st, run_gemm, g);
	return CUBLAS_STATUS_SUCCESS;
}

static int gemm(const char *call, fk_blas *h, int ta, int tb, int m, int n, int k, float alpha, const void *A, int at,
		int lda, const void *B, int bt, int ldb, float beta, void *C, int ct, int ldc, int round) {
	return gemm_batched(call, h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, round);
}

API int cublasSgemm_v2(fk_blas *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
		       const float *B, int ldb, const float *beta, float *C, int ldc) {
	int tf32 = h && h->magic == BLAS_MAGIC && (h->math & 0xf) == 3;
	return gemm("cublasSgemm_v2", h, ta, tb, m, n, k, *alpha, A, FK_R32F, lda, B, FK_R32F, ldb, *beta, C, FK_R32F, ldc,
		    tf32 ? ROUND_TF32 : ROUND_NONE);
}

API int cublasSgemmStridedBatched(fk_blas *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A,
				  int lda, long long sa, const float *B, int ldb, long long sb, const float *beta, float *C,
				  int ldc, long long sc, int batch) {
	int tf32 = h && h->magic == BLAS_MAGIC && (h->math & 0xf) == 3;
	return gemm_batched("cublasSgemmStridedBatched", h, ta, tb, m, n, k, *alpha, A, FK_R32F, lda, sa, B, FK_R32F, ldb, sb,
			    *beta, C, FK_R32F, ldc, sc, batch, tf32 ? ROUND_TF32 : ROUND_NONE);
}

/* ex_round is the input rounding of the *Ex products' compute type and
   math mode (TF32 for 68 only in the handle's TF32 mode) into *round, or
   CUBLAS_STATUS_NOT_SUPPORTED, warned, for a compute type or types A, B,
   C the fake does not do. */
static int ex_round(const char *call, fk_blas *h, int at, int bt, int ct, int compute, int *round) {
	*round = ROUND_NONE;
	switch (compute) {
	case 68: *round = h && h->magic == BLAS_MAGIC && (h->math & 0xf) == 3 && at == FK_R32F ? ROUND_TF32 : ROUND_NONE; break;
	case 69: break;
	case 74: *round = at == FK_R32F ? ROUND_F16 : ROUND_NONE; break;
	case 75: *round = at == FK_R32F ? ROUND_BF16 : ROUND_NONE; break;
	case 77: *round = at == FK_R32F ? ROUND_TF32 : ROUND_NONE; break;
	default:
		warnf("%s: compute type %d is not supported by the fake", call, compute);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (!fk_dt_size(at) || at != bt || (ct != FK_R32F && ct != at)) {
		warnf("%s: types A %d, B %d, C %d are not supported", call, at, bt, ct);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	return 0;
}

/* cublasComputeType_t: 32F 68, 32F_PEDANTIC 69, 32F_FAST_16F 74,
   32F_FAST_16BF 75, 32F_FAST_TF32 77; alpha and beta are floats.
   gemm_ex is cublasGemmEx and cublasGemmStridedBatchedEx (batch 1 and
   strides 0 for the former): the input rounding the compute type and
   math mode ask for, the types checked. */
static int gemm_ex(const char *call, fk_blas *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
		   int at, int lda, long long sa, const void *B, int bt, int ldb, long long sb, const void *beta, void *C,
		   int ct, int ldc, long long sc, int batch, int compute) {
	int round;
	int rs = ex_round(call, h, at, bt, ct, compute, &round);
	if (rs) return rs;
	float al, be;
	memcpy(&al, alpha, 4);
	memcpy(&be, beta, 4);
	return gemm_batched(call, h, ta, tb, m, n, k, al, A, at, lda, sa, B, bt, ldb, sb, be, C, ct, ldc, sc, batch, round);
}

API int cublasGemmEx(fk_blas *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
		     const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
	(void)algo;
	return gemm_ex("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, compute);
}

API int cublasGemmStridedBatchedEx(fk_blas *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at,
				   int lda, long long sa, const void *B, int bt, int ldb, long long sb, const void *beta,
				   void *C, int ct, int ldc, long long sc, int batch, int compute, int algo) {
	(void)algo;
	return gemm_ex("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct,
		       ldc, sc, batch, compute);
}

/* cublasGemmBatchedEx: the matrices of product i at the i-th device
   pointer of the arrays A, B and C (device memory of the handle's device,
   batch pointers each). The arrays and the matrices they point to are
   read when the stream runs the product, as cuBLAS's kernels read them:
   at the call only the arrays are checked against their allocations; a
   pointer that is not a live allocation of the device big enough for its
   matrix, or two C matrices that overlap, is a fault then (a warning and
   the sticky cudaErrorIllegalAddress, as a GPU's fault would leave). */
struct gemm_ptrs_task {
	struct gemm_task g;       /* the product's sizes and types; a, b, c unset */
	const unsigned char *pa, *pb, *pc; /* the pointer arrays (host views) */
	int dev, ar, ac, br, bc;
};

static void gemm_ptrs_fault(const char *what, int i, uintptr_t p) {
	warnf("cublasGemmBatchedEx: product %d's %s at %p is not within a live allocation of the handle's device "
	      "(a fault on a GPU)", i, what, (void *)p);
	fakecudaStickyError(700); /* cudaErrorIllegalAddress */
}

/* Whether two m x n column-major matrices (ld elements a column of es
   bytes) d bytes apart share an element. */
static int gemm_ptrs_overlap(uintptr_t d, size_t es, int m, int n, int ld) {
	if (d % es) return 1;
	uintptr_t e = d / es, q = e / (uintptr_t)ld, r = e % (uintptr_t)ld;
	return (q < (uintptr_t)n && r < (uintptr_t)m) || (q + 1 < (uintptr_t)n && (uintptr_t)ld - r < (uintptr_t)m);
}

static void run_gemm_ptrs(void *arg) {
	struct gemm_ptrs_task *t = arg;
	struct gemm_task *g = &t->g;
	delay(&kernel_delay_ms, "FAKE_CUDA_KERNEL_DELAY_MS");
	size_t csz = fk_dt_size(g->ct);
	size_t cbytes = ((size_t)(g->n - 1) * (size_t)g->ldc + (size_t)g->m) * csz;
	for (int i = 0; i < g->batch && !sticky_err(); i++) {
		uintptr_t a = 0, b = 0, c;
		memcpy(&c, t->pc + 8 * (size_t)i, 8);
		if (g->k) {
			memcpy(&a, t->pa + 8 * (size_t)i, 8);
			memcpy(&b, t->pb + 8 * (size_t)i, 8);
		}
		/* no two C matrices may share an element (cuBLAS's undefined
		   result); side by side in the columns of one is fine */
		for (int j = 0; j < i; j++) {
			uintptr_t cj;
			memcpy(&cj, t->pc + 8 * (size_t)j, 8);
			if (c < cj + cbytes && cj < c + cbytes && gemm_ptrs_overlap(c > cj ? c - cj : cj - c, csz, g->m, g->n, g->ldc)) {
				warnf("cublasGemmBatchedEx: products %d and %d write overlapping C matrices (%p, %p)", j, i,
				      (void *)cj, (void *)c);
				fakecudaStickyError(700);
				break;
			}
		}
		if (sticky_err()) break;
		unsigned char *ha = NULL, *hb = NULL, *hc = NULL;
		if (g->k && gemm_matrix_batch("cublasGemmBatchedEx", "A", (void *)a, t->ar, t->ac, g->lda, g->at, t->dev, 1, 0, &ha)) {
			gemm_ptrs_fault("A", i, a);
			break;
		}
		if (g->k && gemm_matrix_batch("cublasGemmBatchedEx", "B", (void *)b, t->br, t->bc, g->ldb, g->bt, t->dev, 1, 0, &hb)) {
			gemm_ptrs_fault("B", i, b);
			break;
		}
		if (gemm_matrix_batch("cublasGemmBatchedEx", "C", (void *)c, g->m, g->n, g->ldc, g->ct, t->dev, 1, 0, &hc)) {
			gemm_ptrs_fault("C", i, c);
			break;
		}
		g->a = ha;
		g->b = hb;
		g->c = hc;
		run_gemm1(g);
	}
	free(t);
}

API int cublasGemmBatchedEx(fk_blas *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *const A[], int at,
			    int lda, const void *const B[], int bt, int ldb, const void *beta, void *const C[], int ct, int ldc,
			    int batch, int compute, int algo) {
	(void)algo;
	const char *call = "cublasGemmBatchedEx";
	int r = blas_check(call, h);
	if (r) return r;
	int round;
	int rs = ex_round(call, h, at, bt, ct, compute, &round);
	if (rs) return rs;
	if (ta < 0 || ta > 2 || tb < 0 || tb > 2 || m < 0 || n < 0 || k < 0 || batch < 0) {
		warnf("%s: bad operation or size (transa %d, transb %d, m %d, n %d, k %d, batch %d)", call, ta, tb, m, n, k, batch);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
	if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1)) {
		warnf("%s: leading dimensions lda %d, ldb %d, ldc %d too small for A %dx%d, B %dx%d, C %dx%d", call, lda, ldb, ldc, ar,
		      ac, br, bc, m, n);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
	float al, be;
	memcpy(&al, alpha, 4);
	memcpy(&be, beta, 4);
	struct gemm_ptrs_task *t = calloc(1, sizeof *t);
	if (!t) return CUBLAS_STATUS_ALLOC_FAILED;
	t->g = (struct gemm_task){ta != 0, tb != 0, m, n, al == 0 ? 0 : k, lda, ldb, ldc, at, bt, ct, round, al, be, NULL, NULL,
				  NULL, 1, 0, 0, 0};
	t->g.batch = batch;
	t->dev = h->dev, t->ar = ar, t->ac = ac, t->br = br, t->bc = bc;
	unsigned char *pa = NULL, *pb = NULL, *pc = NULL;
	/* the arrays: batch device pointers each (matrices resolved later) */
	if ((t->g.k && (gemm_matrix_batch(call, "Aarray", A, 2 * batch, 1, 2 * batch, FK_R32F, h->dev, 1, 0, &pa) ||
			gemm_matrix_batch(call, "Barray", B, 2 * batch, 1, 2 * batch, FK_R32F, h->dev, 1, 0, &pb))) ||
	    gemm_matrix_batch(call, "Carray", C, 2 * batch, 1, 2 * batch, FK_R32F, h->dev, 1, 0, &pc)) {
		free(t);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	t->pa = pa, t->pb = pb, t->pc = pc;
	stream *st = NULL;
	if (check_stream(call, h->stream, &st)) {
		free(t);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	submit(st, run_gemm_ptrs, t);
	return CUBLAS_STATUS_SUCCESS;
}

/* ---- NVRTC ---- */

enum {
	NVRTC_SUCCESS = 0,
	NVRTC_ERROR_OUT_OF_MEMORY = 1,
	NVRTC_ERROR_INVALID_INPUT = 3,
	NVRTC_ERROR_INVALID_PROGRAM = 4,
	NVRTC_ERROR_INVALID_OPTION = 5,
	NVRTC_ERROR_COMPILATION = 6,
	NVRTC_ERROR_INTERNAL_ERROR = 11,
};

API const char *nvrtcGetErrorString(int r) {
	static const char *names[] = {"NVRTC_SUCCESS", "NVRTC_ERROR_OUT_OF_MEMORY", "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
				      "NVRTC_ERROR_INVALID_INPUT", "NVRTC_ERROR_INVALID_PROGRAM", "NVRTC_ERROR_INVALID_OPTION",
				      "NVRTC_ERROR_COMPILATION", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
				      "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
				      "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION", "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
				      "NVRTC_ERROR_INTERNAL_ERROR"};
	return r >= 0 && r < (int)(sizeof names / sizeof *names) ? names[r] : "NVRTC_ERROR unknown";
}

API int nvrtcVersion(int *major, int *minor) {
	if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
	*major = rt_version() / 1000;
	*minor = rt_version() % 1000 / 10;
	return NVRTC_SUCCESS;
}

static const int fk_archs[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};
#define FK_NARCHS ((int)(sizeof fk_archs / sizeof *fk_archs))

API int nvrtcGetNumSupportedArchs(int *n) {
	if (!n) return NVRTC_ERROR_INVALID_INPUT;
	*n = FK_NARCHS;
	return NVRTC_SUCCESS;
}

API int nvrtcGetSupportedArchs(int *a) {
	if (!a) return NVRTC_ERROR_INVALID_INPUT;
	memcpy(a, fk_archs, sizeof fk_archs);
	return NVRTC_SUCCESS;
}

#define PROG_MAGIC 0x50524f47u
#define FK_CUBIN_MAGIC "GDIST-FAKECUBIN"   /* 16 bytes with the NUL, then a uint64 length */
#define FK_PTX_MAGIC "//GDIST-FAKEPTX "

typedef struct fk_prog {
	unsigned magic;
	char *src, *name;
	int nh;
	char **hdrs, **hnames;
	char *log;
	unsigned char *lib; /* the compiled shared library */
	size_t lib_len;
	int arch, virt; /* arch 90 for sm_90 or compute_90; virt: compute_ */
	int compiled;
} fk_prog;

typedef struct {
	char *p;
	size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
	if (b->n + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 4096;
		while (c < b->n + n + 1) c *= 2;
		char *q = realloc(b->p, c);
		if (!q) abort();
		b->p = q;
		b->cap = c;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) {
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	sb_add(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static char *fk_strdup(const char *s) {
	size_t n = strlen(s) + 1;
	char *p = malloc(n);
	if (p) memcpy(p, s, n);
	return p;
}

API int nvrtcCreateProgram(fk_prog **out, const char *src, const char *name, int nh, const char *const *hdrs,
			   const char *const *hnames) {
	if (!out || !src || nh < 0 || (nh > 0 && (!hdrs || !hnames))) return NVRTC_ERROR_INVALID_INPUT;
	fk_prog *p = calloc(1, sizeof *p);
	if (!p) return NVRTC_ERROR_OUT_OF_MEMORY;
	p->magic = PROG_MAGIC;
	p->src = fk_strdup(src);
	p->name = fk_strdup(name ? name : "default_program");
	p->nh = nh;
	p->hdrs = calloc(nh + 1, sizeof *p->hdrs);
	p->hnames = calloc(nh + 1, sizeof *p->hnames);
	for (int i = 0; i < nh; i++) {
		p->hdrs[i] = fk_strdup(hdrs[i] ? hdrs[i] : "");
		p->hnames[i] = fk_strdup(hnames[i]);
	}
	p->log = fk_strdup("");
	*out = p;
	return NVRTC_SUCCESS;
}

API int nvrtcDestroyProgram(fk_prog **pp) {
	if (!pp || !*pp || (*pp)->magic != PROG_MAGIC) return NVRTC_ERROR_INVALID_PROGRAM;
	fk_prog *p = *pp;
	p->magic = 0;
	for (int i = 0; i < p->nh; i++) {
		free(p->hdrs[i]);
		free(p->hnames[i]);
	}
	free(p->hdrs);
	free(p->hnames);
	free(p->src);
	free(p->name);
	free(p->log);
	free(p->lib);
	free(p);
	*pp = NULL;
	return NVRTC_SUCCESS;
}

static int is_id0(int c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_id(int c) { return is_id0(c) || (c >= '0' && c <= '9'); }

/* Skips spaces and comments from i; returns the new position. */
static size_t skip_ws(const char *s, size_t i) {
	for (;;) {
		if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++;
		} else if (s[i] == '/' && s[i + 1] == '/') {
			while (s[i] && s[i] != '\n') i++;
		} else if (s[i] == '/' && s[i + 1] == '*') {
			i += 2;
			while (s[i] && !(s[i] == '*' && s[i + 1] == '/')) i++;
			if (s[i]) i += 2;
		} else {
			return i;
		}
	}
}

/* The kernels' source as the host compiler gets it: comments, strings and
   lines kept; each "extern __shared__ T name[];" becomes a pointer to the
   launch's dynamic shared memory. Records the names of the extern "C"
   __global__ functions and whether anything synchronizes threads (then
   threads run as fibers). */
static int transform(const char *s, const char *fname, sbuf *out, char ***kernels, int *nk, int *fibers) {
	size_t i = 0;
	int line = 1, depth = 0, ext_c = 0;
	int cblock[32], ncblock = 0; /* the depths of extern "C" { blocks */
	*nk = 0;
	*fibers = 0;
	*kernels = NULL;
	while (s[i]) {
		char c = s[i];
		if (c == '/' && (s[i + 1] == '/' || s[i + 1] == '*')) {
			size_t j = skip_ws(s, i);
			for (size_t q = i; q < j; q++) line += s[q] == '\n';
			sb_add(out, s + i, j - i);
			i = j;
			continue;
		}
		if (c == '"' || c == '\'') {
			size_t j = i + 1;
			while (s[j] && s[j] != c) j += s[j] == '\\' && s[j + 1] ? 2 : 1;
			if (s[j]) j++;
			sb_add(out, s + i, j - i);
			i = j;
			continue;
		}
		if (c == '#') { /* a preprocessor line: copied whole (with continuations) */
			size_t j = i;
			while (s[j] && s[j] != '\n') j += s[j] == '\\' && s[j + 1] == '\n' ? 2 : 1;
			for (size_t q = i; q < j; q++) line += s[q] == '\n';
			sb_add(out, s + i, j - i);
			i = j;
			continue;
		}
		if (is_id0(c) && (i == 0 || !is_id(s[i - 1]))) {
			size_t j = i;
			while (is_id(s[j])) j++;
			size_t n = j - i;
			const char *w = s + i;
#define IS(lit) (n == sizeof lit - 1 && !memcmp(w, lit, n))
			if ((n >= 13 && !memcmp(w, "__syncthreads", 13)) || IS("__syncwarp") || (n > 6 && !memcmp(w, "__shfl", 6)) ||
			    IS("__ballot_sync") || IS("__any_sync") || IS("__all_sync") || IS("__activemask") ||
			    IS("load_matrix_sync") || IS("store_matrix_sync") || IS("mma_sync"))
				*fibers = 1;
			if (IS("extern")) {
				size_t k = skip_ws(s, j);
				if (s[k] == '"' && s[k + 1] == 'C' && s[k + 2] == '"') {
					size_t b = skip_ws(s, k + 3);
					if (s[b] == '{') {
						if (ncblock < 32) cblock[ncblock++] = depth + 1;
					} else {
						ext_c = 1;
					}
				} else if (!strncmp(s + k, "__shared__", 10) && !is_id(s[k + 10])) {
					/* extern __shared__ [__align__(n)] T name[]; */
					size_t e = k + 10;
					while (s[e] && s[e] != ';') e++;
					if (!s[e]) return -1;
					sbuf ty = {0};
					size_t q = k + 10, last_id = 0, last_len = 0;
					while (q < e) {
						q = skip_ws(s, q);
						if (q >= e) break;
						if (!strncmp(s + q, "__align__", 9)) {
							while (q < e && s[q] != ')') q++;
							q++;
							continue;
						}
						if (is_id0(s[q])) {
							size_t r = q;
							while (is_id(s[r])) r++;
							if (last_len) {
								sb_add(&ty, s + last_id, last_len);
								sb_str(&ty, " ");
							}
							last_id = q;
							last_len = r - q;
							q = r;
							continue;
						}
						if (s[q] == '[') break;
						if (last_len) {
							sb_add(&ty, s + last_id, last_len);
							sb_str(&ty, " ");
							last_len = 0;
						}
						sb_add(&ty, s + q, 1);
						q++;
					}
					if (!last_len || !ty.n) {
						free(ty.p);
						return -1;
					}
					char name[256];
					snprintf(name, sizeof name, "%.*s", (int)last_len, s + last_id);
					int nl = 0;
					for (size_t z = i; z < e; z++) nl += s[z] == '\n';
					if (depth > 0) {
						sb_printf(out, "%s *%s = (%s *)gdfk_dyn_smem;", ty.p, name, ty.p);
						for (int z = 0; z < nl; z++) sb_str(out, "\n");
					} else {
						sb_printf(out, "\n#define %s ((%s *)gdfk_dyn_smem)\n#line %d \"%s\"\n", name, ty.p, line + nl, fname);
					}
					line += nl;
					free(ty.p);
					i = e + 1;
					continue;
				}
			} else if (IS("__global__")) {
				/* the kernel's name: the first identifier followed by '(' that is not an attribute */
				size_t k = j;
				for (;;) {
					k = skip_ws(s, k);
					if (!s[k] || s[k] == ';' || s[k] == '{' || s[k] == '(') break;
					if (is_id0(s[k])) {
						size_t r = k;
						while (is_id(s[r])) r++;
						size_t p = skip_ws(s, r);
						int attr = (r - k == 17 && !memcmp(s + k, "__launch_bounds__", 17)) ||
							   (r - k == 13 && !memcmp(s + k, "__attribute__", 13)) ||
							   (r - k == 9 && !memcmp(s + k, "__align__", 9));
						if (s[p] == '(' && !attr) {
							int inblock = ncblock > 0 && depth >= cblock[ncblock - 1];
							if (ext_c || inblock) {
								int dup = 0;
								for (int z = 0; z < *nk; z++) dup |= strlen((*kernels)[z]) == r - k && !memcmp((*kernels)[z], s + k, r - k);
								if (!dup) {
									*kernels = realloc(*kernels, (*nk + 1) * sizeof **kernels);
									(*kernels)[*nk] = malloc(r - k + 1);
									memcpy((*kernels)[*nk], s + k, r - k);
									(*kernels)[*nk][r - k] = 0;
									(*nk)++;
								}
							}
							break;
						}
						if (s[p] == '(') { /* an attribute's arguments */
							int lvl = 0;
							do {
								if (s[p] == '(') lvl++;
								if (s[p] == ')') lvl--;
								p++;
							} while (s[p] && lvl > 0);
						}
						k = p;
						continue;
					}
					k++;
				}
			}
#undef IS
			sb_add(out, w, n);
			i = j;
			continue;
		}
		if (c == '{') {
			depth++;
			ext_c = 0;
		} else if (c == '}') {
			if (ncblock > 0 && depth == cblock[ncblock - 1]) ncblock--;
			depth--;
			ext_c = 0;
		} else if (c == ';') {
			ext_c = 0;
		} else if (c == '\n') {
			line++;
		}
		sb_add(out, s + i, 1);
		i++;
	}
	return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
	return h;
}

static int mkdirs(const char *path) {
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			mkdir(tmp, 0700);
			*p = '/';
		}
	}
	return mkdir(tmp, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

static void cache_dir(char *buf, size_t len) {
	const char *e = getenv("FAKE_NVRTC_CACHE");
	if (e && *e) {
		snprintf(buf, len, "%s", e);
	} else if ((e = getenv("XDG_CACHE_HOME")) && *e) {
		snprintf(buf, len, "%s/gdist/fakenvrtc", e);
	} else if ((e = getenv("HOME")) && *e) {
		snprintf(buf, len, "%s/.cache/gdist/fakenvrtc", e);
	} else {
		snprintf(buf, len, "%s/gdist-fakenvrtc-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getuid());
	}
	mkdirs(buf);
}

static int read_file(const char *path, unsigned char **out, size_t *len) {
	FILE *f = fopen(path, "rb");
	if (!f) return -1;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc(n > 0 ? n : 1);
	if (!b || fread(b, 1, n, f) != (size_t)n) {
		free(b);
		fclose(f);
		return -1;
	}
	fclose(f);
	*out = b;
	*len = n;
	return 0;
}

static int write_file(const char *path, const void *p, size_t n) {
	FILE *f = fopen(path, "wb");
	if (!f) return -1;
	int ok = fwrite(p, 1, n, f) == n;
	return fclose(f) == 0 && ok ? 0 : -1;
}

static void set_log(fk_prog *p, const char *s) {
	free(p->log);
	p->log = fk_strdup(s);
}

/* The options NVRTC takes that change nothing here. */
static int ignored_option(const char *o) {
	static const char *pre[] = {"-lineinfo", "--generate-line-info", "--fmad=", "-fmad=", "-default-device", "--std=", "-std=",
				    "--use_fast_math", "-use_fast_math", "--device-debug", "-G", "-ftz=", "--ftz=", "-prec-div=",
				    "--prec-div=", "-prec-sqrt=", "--prec-sqrt=", "--extra-device-vectorization", "-dw",
				    "--disable-warnings", "-w", "--restrict", "-restrict", "--device-as-default-execution-space",
				    "-dlto", "--dlink-time-opt", "-rdc=", "--relocatable-device-code=", "-dopt=", "--dopt=",
				    "-time=", "--time=", "-Werror", "--Werror", "-split-compile=", "--split-compile=",
				    "--ptxas-options=", "-Xptxas=", NULL};
	for (int i = 0; pre[i]; i++) {
		size_t n = strlen(pre[i]);
		if (!strncmp(o, pre[i], n) && (pre[i][n - 1] == '=' || o[n] == 0)) return 1;
	}
	return 0;
}

static int compile_program(fk_prog *p, int nopt, const char *const *opts, char **owned, int *nowned_out) {
	int nowned = 0;
	if (!p || p->magic != PROG_MAGIC) return NVRTC_ERROR_INVALID_PROGRAM;
	if (nopt < 0 || (nopt > 0 && !opts)) return NVRTC_ERROR_INVALID_INPUT;
	p->compiled = 0;
	p->arch = 52;
	p->virt = 1;
	const char *cxx = getenv("FAKE_NVRTC_CXX");
	if (!cxx || !*cxx) cxx = getenv("CXX");
	if (!cxx || !*cxx) cxx = "g++";
	char dir[4096];
	cache_dir(dir, sizeof dir);
	const char *argv[256];
	int argc = 0;
	static const char *fixed[] = {"-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off",
				      "-fno-strict-aliasing", NULL};
	argv[argc++] = cxx;
	for (int i = 0; fixed[i]; i++) argv[argc++] = fixed[i];
	const char *env_uc = getenv("FAKE_NVRTC_UCONTEXT");
	if (env_uc && *env_uc == '1') argv[argc++] = "-DGDFK_UCONTEXT";
	/* the build directory (its headers: the emulations of fk_headers and
	   the program's) before the options' include paths, so that a CUDA
	   include directory given with -I does not hide them */
	int incpos = argc;
	argv[argc++] = "";
	for (int i = 0; i < nopt; i++) {
		const char *o = opts[i], *arch = NULL;
		if (!strncmp(o, "--gpu-architecture=", 19)) arch = o + 19;
		else if (!strncmp(o, "-arch=", 6)) arch = o + 6;
		else if (!strcmp(o, "-arch") || !strcmp(o, "--gpu-architecture")) {
			if (++i >= nopt) goto bad;
			arch = opts[i];
		}
		if (arch) {
			int v = 0;
			if (!strncmp(arch, "sm_", 3)) p->virt = 0, v = atoi(arch + 3);
			else if (!strncmp(arch, "compute_", 8)) p->virt = 1, v = atoi(arch + 8);
			int ok = 0;
			for (int a = 0; a < FK_NARCHS; a++) ok |= fk_archs[a] == v;
			if (!ok) {
				char msg[256];
				snprintf(msg, sizeof msg, "nvrtc: error: invalid value for --gpu-architecture (-arch): %s\n", arch);
				set_log(p, msg);
				return NVRTC_ERROR_INVALID_OPTION;
			}
			p->arch = v;
			continue;
		}
		if (!strncmp(o, "-D", 2) || !strncmp(o, "--define-macro=", 15) || !strncmp(o, "-U", 2) ||
		    !strncmp(o, "--undefine-macro=", 17) || !strncmp(o, "-I", 2) || !strncmp(o, "--include-path=", 15)) {
			if (argc > 240) goto bad;
			const char *v = o;
			char conv[512];
			if (!strncmp(o, "--define-macro=", 15)) snprintf(conv, sizeof conv, "-D%s", o + 15), v = conv;
			else if (!strncmp(o, "--undefine-macro=", 17)) snprintf(conv, sizeof conv, "-U%s", o + 17), v = conv;
			else if (!strncmp(o, "--include-path=", 15)) snprintf(conv, sizeof conv, "-I%s", o + 15), v = conv;
			argv[argc++] = owned[nowned] = fk_strdup(v);
			*nowned_out = ++nowned;
			continue;
		}
		if (ignored_option(o)) continue;
	bad: {
		char msg[512];
		snprintf(msg, sizeof msg, "nvrtc: error: unrecognized option %s\n", i < nopt ? opts[i] : "(missing value)");
		set_log(p, msg);
		return NVRTC_ERROR_INVALID_OPTION;
	}
	}
	sbuf body = {0}, tu = {0};
	char **kernels;
	int nk, fibers;
	if (transform(p->src, p->name, &body, &kernels, &nk, &fibers)) {
		free(body.p);
		set_log(p, "fake nvrtc: cannot parse an extern __shared__ declaration\n");
		return NVRTC_ERROR_COMPILATION;
	}
	if (fibers) sb_str(&tu, "#define GDFK_FIBERS 1\n");
	sb_str(&tu, fk_kernel_h);
	sb_printf(&tu, "\n#line 1 \"%s\"\n", p->name);
	sb_add(&tu, body.p ? body.p : "", body.n);
	sb_str(&tu, "\n");
	for (int k = 0; k < nk; k++) {
		sb_printf(&tu, "GDFK_KERNEL(%s)\n", kernels[k]);
		free(kernels[k]);
	}
	free(kernels);
	free(body.p);
	uint64_t h = 1469598103934665603ULL;
	h = fnv(h, tu.p, tu.n);
	for (int i = 0; i < argc; i++) h = fnv(h, argv[i], strlen(argv[i]) + 1);
	for (int i = 0; i < FK_NHEADERS; i++) h = fnv(h, fk_headers[i].text, strlen(fk_headers[i].text) + 1);
	for (int i = 0; i < p->nh; i++) {
		h = fnv(h, p->hnames[i], strlen(p->hnames[i]) + 1);
		h = fnv(h, p->hdrs[i], strlen(p->hdrs[i]) + 1);
	}
	char lib[4200];
	snprintf(lib, sizeof lib, "%s/k-%016llx.so", dir, (unsigned long long)h);
	free(p->lib);
	p->lib = NULL;
	if (read_file(lib, &p->lib, &p->lib_len) == 0) {
		free(tu.p);
		set_log(p, "");
		p->compiled = 1;
		return NVRTC_SUCCESS;
	}
	char tmpl[4200];
	snprintf(tmpl, sizeof tmpl, "%s/build-XXXXXX", dir);
	if (!mkdtemp(tmpl)) {
		free(tu.p);
		set_log(p, "fake nvrtc: cannot make a build directory\n");
		return NVRTC_ERROR_INTERNAL_ERROR;
	}
	char src[4300], out[4300], logf_[4300], inc[4300];
	snprintf(src, sizeof src, "%s/tu.cpp", tmpl);
	snprintf(out, sizeof out, "%s/k.so", tmpl);
	snprintf(logf_, sizeof logf_, "%s/log", tmpl);
	snprintf(inc, sizeof inc, "-I%s", tmpl);
	int werr = write_file(src, tu.p, tu.n);
	free(tu.p);
	for (int i = 0; i < FK_NHEADERS && !werr; i++) {
		char hp[4400];
		snprintf(hp, sizeof hp, "%s/%s", tmpl, fk_headers[i].name);
		werr = write_file(hp, fk_headers[i].text, strlen(fk_headers[i].text));
	}
	for (int i = 0; i < p->nh && !werr; i++) {
		char hp[4400];
		snprintf(hp, sizeof hp, "%s/%s", tmpl, p->hnames[i]);
		werr = write_file(hp, p->hdrs[i], strlen(p->hdrs[i]));
	}
	argv[incpos] = inc;
	argv[argc++] = "-o";
	argv[argc++] = out;
	argv[argc++] = src;
	argv[argc] = NULL;
	int rc = NVRTC_ERROR_INTERNAL_ERROR;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, logf_, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	pid_t pid;
	int se = werr ? -1 : posix_spawnp(&pid, cxx, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (se != 0) {
		char msg[512];
		snprintf(msg, sizeof msg, "fake nvrtc: cannot run the C++ compiler %s (set FAKE_NVRTC_CXX or CXX): %s\n", cxx,
			 strerror(se > 0 ? se : errno));
		set_log(p, msg);
	} else {
		int st = 0;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
		}
		unsigned char *lg = NULL;
		size_t ll = 0;
		if (read_file(logf_, &lg, &ll) == 0) {
			char *l = malloc(ll + 1);
			memcpy(l, lg, ll);
			l[ll] = 0;
			free(p->log);
			p->log = l;
			free(lg);
		}
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && read_file(out, &p->lib, &p->lib_len) == 0) {
			rename(out, lib); /* atomic: concurrent compiles of one source are fine */
			p->compiled = 1;
			rc = NVRTC_SUCCESS;
		} else {
			rc = NVRTC_ERROR_COMPILATION;
		}
	}
	unlink(out);
	unlink(src);
	unlink(logf_);
	for (int i = 0; i < p->nh; i++) {
		char hp[4400];
		snprintf(hp, sizeof hp, "%s/%s", tmpl, p->hnames[i]);
		unlink(hp);
	}
	for (int i = 0; i < FK_NHEADERS; i++) {
		char hp[4400];
		snprintf(hp, sizeof hp, "%s/%s", tmpl, fk_headers[i].name);
		unlink(hp);
	}
	rmdir(tmpl);
	return rc;
}

API int nvrtcCompileProgram(fk_prog *p, int nopt, const char *const *opts) {
	char *owned[256];
	int n = 0;
	int r = compile_program(p, nopt, opts, owned, &n);
	for (int i = 0; i < n; i++) free(owned[i]);
	return r;
}

API int nvrtcGetProgramLogSize(fk_prog *p, size_t *n) {
	if (!p || p->magic != PROG_MAGIC) return NVRTC_ERROR_INVALID_PROGRAM;
	if (!n) return NVRTC_ERROR_INVALID_INPUT;
	*n = strlen(p->log) + 1;
	return NVRTC_SUCCESS;
}

API int nvrtcGetProgramLog(fk_prog *p, char *out) {
	if (!p || p->magic != PROG_MAGIC) return NVRTC_ERROR_INVALID_PROGRAM;
	if (!out) return NVRTC_ERROR_INVALID_INPUT;
	memcpy(out, p->log, strlen(p->log) + 1);
	return NVRTC_SUCCESS;
}

API int nvrtcGetCUBINSize(fk_prog *p, size_t *n) {
	if (!p || p->magic != PROG_MAGIC) return NVRTC_ERROR_INVALID_PROGRAM;
	if (!n) return NVRTC_ERROR_INVALID_INPUT;
	*n = p->compiled && !p->virt ? 16 + 8 + p->lib_len : 0;
	return p->compiled ? NVRTC_SUCCESS : NVRTC_ERROR_INVALID_PROGRAM;
}

API int nvrtcGetCUBIN(fk_prog *p, char *out) {
	if (!p || p->magic != PROG_MAGIC || !p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
	if (!out) return NVRTC_ERROR_INVALID_INPUT;
	if (p->virt) return NVRTC_ERROR_INVALID_INPUT; /* compiled for a virtual architecture: PTX only */
	uint64_t n = p->lib_len;
	memcpy(out, FK_CUBIN_MAGIC, 16);
	memcpy(out + 16, &n, 8);
	memcpy(out + 24, p->lib, p->lib_len);
	return NVRTC_SUCCESS;
}

API int nvrtcGetPTXSize(fk_prog *p, size_t *n) {
	if (!p || p->magic != PROG_MAGIC || !p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
	if (!n) return NVRTC_ERROR_INVALID_INPUT;
	*n = strlen(FK_PTX_MAGIC) + 2 * p->lib_len + 2;
	return NVRTC_SUCCESS;
}

API int nvrtcGetPTX(fk_prog *p, char *out) {
	if (!p || p->magic != PROG_MAGIC || !p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
	if (!out) return NVRTC_ERROR_INVALID_INPUT;
	static const char hex[] = "0123456789abcdef";
	size_t m = strlen(FK_PTX_MAGIC);
	memcpy(out, FK_PTX_MAGIC, m);
	for (size_t i = 0; i < p->lib_len; i++) {
		out[m + 2 * i] = hex[p->lib[i] >> 4];
		out[m + 2 * i + 1] = hex[p->lib[i] & 15];
	}
	out[m + 2 * p->lib_len] = '\n';
	out[m + 2 * p->lib_len + 1] = 0;
	return NVRTC_SUCCESS;
}

/* ---- driver API ---- */

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_IMAGE = 200,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_LAUNCH_FAILED = 719,
};

static int drv_inited;

API int cuGetErrorName(int e, const char **s) {
	const char *n = NULL;
	switch (e) {
	case 0: n = "CUDA_SUCCESS"; break;
	case 1: n = "CUDA_ERROR_INVALID_VALUE"; break;
	case 2: n = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case 3: n = "CUDA_ERROR_NOT_INITIALIZED"; break;
	case 35: n = "CUDA_ERROR_INSUFFICIENT_DRIVER"; break;
	case 100: n = "CUDA_ERROR_NO_DEVICE"; break;
	case 101: n = "CUDA_ERROR_INVALID_DEVICE"; break;
	case 200: n = "CUDA_ERROR_INVALID_IMAGE"; break;
	case 218: n = "CUDA_ERROR_INVALID_PTX"; break;
	case 400: n = "CUDA_ERROR_INVALID_HANDLE"; break;
	case 500: n = "CUDA_ERROR_NOT_FOUND"; break;
	case 700: n = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
	case 719: n = "CUDA_ERROR_LAUNCH_FAILED"; break;
	}
	if (s) *s = n;
	return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API int cuGetErrorString(int e, const char **s) {
	const char *n = NULL;
	switch (e) {
	case 0: n = "no error"; break;
	case 1: n = "invalid argument"; break;
	case 2: n = "out of memory"; break;
	case 3: n = "initialization error"; break;
	case 35: n = "CUDA driver version is insufficient for CUDA runtime version"; break;
	case 100: n = "no CUDA-capable device is detected"; break;
	case 101: n = "invalid device ordinal"; break;
	case 200: n = "device kernel image is invalid"; break;
	case 218: n = "a PTX JIT compilation failed"; break;
	case 400: n = "invalid resource handle"; break;
	case 500: n = "named symbol not found"; break;
	case 700: n = "an illegal memory access was encountered"; break;
	case 719: n = "unspecified launch failure"; break;
	}
	if (s) *s = n;
	return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API int cuInit(unsigned flags) {
	if (flags) return CUDA_ERROR_INVALID_VALUE;
	if (ndevices() <= 0) return CUDA_ERROR_NO_DEVICE;
	__atomic_store_n(&drv_inited, 1, __ATOMIC_SEQ_CST);
	return CUDA_SUCCESS;
}

#define DRV_INIT()                                                          \
	do {                                                                \
		if (!__atomic_load_n(&drv_inited, __ATOMIC_SEQ_CST)) return CUDA_ERROR_NOT_INITIALIZED; \
		int se_ = sticky_err();                                     \
		if (se_) return se_;                                        \
	} while (0)

API int cuDriverGetVersion(int *v) {
	if (!v) return CUDA_ERROR_INVALID_VALUE;
	*v = drv_version();
	return CUDA_SUCCESS;
}

API int cuDeviceGet(int *d, int ordinal) {
	DRV_INIT();
	if (!d) return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

/* CU_DEVICE_ATTRIBUTE_*: MAX_THREADS_PER_BLOCK 1, MAX_BLOCK_DIM_X/Y/Z 2-4,
   MAX_GRID_DIM_X/Y/Z 5-7, MAX_SHARED_MEMORY_PER_BLOCK 8, WARP_SIZE 10,
   MULTIPROCESSOR_COUNT 16, COMPUTE_CAPABILITY_MAJOR 75, _MINOR 76. The
   capability is FAKE_CUDA_CC ("8.6"; default 9.0). */
API int cuDeviceGetAttribute(int *v, int attr, int dev) {
	DRV_INIT();
	if (!v) return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
	const char *cc = getenv("FAKE_CUDA_CC");
	int major = 9, minor = 0;
	if (cc && *cc) {
		major = atoi(cc);
		const char *dot = strchr(cc, '.');
		minor = dot ? atoi(dot + 1) : 0;
	}
	switch (attr) {
	case 1: *v = 1024; break;
	case 2: case 3: *v = 1024; break;
	case 4: *v = 64; break;
	case 5: *v = 2147483647; break;
	case 6: case 7: *v = 65535; break;
	case 8: *v = 49152; break;
	case 10: *v = 32; break;
	case 16: *v = 4; break;
	case 75: *v = major; break;
	case 76: *v = minor; break;
	default: *v = 0; return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

#define MOD_MAGIC 0x4d4f4455u
#define FUNC_MAGIC 0x46554e43u

typedef struct fk_desc {
	const char *name;
	int nparams;
	const size_t *sizes;
	const unsigned char *ptrs;
	void (*thunk)(void **);
	void (*block)(void **, int);
} fk_desc;

typedef int (*fk_run_fn)(const fk_desc *, const unsigned *, const unsigned *, size_t, void **, char *, size_t);

typedef struct fk_mod {
	unsigned magic;
	int dev;
	void *dl;
	fk_run_fn run;
} fk_mod;

typedef struct fk_func {
	unsigned magic;
	fk_mod *mod;
	const fk_desc *d;
} fk_func;

static int unhex(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

API int cuModuleLoadData(fk_mod **out, const void *image) {
	DRV_INIT();
	if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
	*out = NULL;
	int dev = ctx_dev("cuModuleLoadData");
	const unsigned char *img = image;
	unsigned char *lib = NULL;
	size_t n = 0;
	if (!memcmp(img, FK_CUBIN_MAGIC, 16)) {
		uint64_t len;
		memcpy(&len, img + 16, 8);
		lib = malloc(len ? len : 1);
		memcpy(lib, img + 24, len);
		n = len;
	} else if (!strncmp((const char *)img, FK_PTX_MAGIC, strlen(FK_PTX_MAGIC))) {
		const char *h = (const char *)img + strlen(FK_PTX_MAGIC);
		size_t hl = 0;
		while (unhex(h[hl]) >= 0) hl++;
		n = hl / 2;
		lib = malloc(n ? n : 1);
		for (size_t i = 0; i < n; i++) lib[i] = (unsigned char)(unhex(h[2 * i]) << 4 | unhex(h[2 * i + 1]));
	} else {
		warnf("cuModuleLoadData: not an image of the fake NVRTC (a real cubin or PTX cannot run here)");
		return CUDA_ERROR_INVALID_IMAGE;
	}
	char dir[4096], path[4200];
	cache_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/load-XXXXXX", dir);
	int fd = mkstemp(path);
	if (fd < 0) {
		free(lib);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	int ok = write(fd, lib, n) == (ssize_t)n;
	close(fd);
	free(lib);
	void *dl = ok ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
	unlink(path);
	if (!dl) {
		warnf("cuModuleLoadData: %s", ok ? dlerror() : "cannot write the module");
		return CUDA_ERROR_INVALID_IMAGE;
	}
	fk_mod *m = calloc(1, sizeof *m);
	m->magic = MOD_MAGIC;
	m->dev = dev;
	m->dl = dl;
	*(void **)&m->run = dlsym(dl, "gdfk_run");
	if (!m->run) {
		dlclose(dl);
		free(m);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	*out = m;
	return CUDA_SUCCESS;
}

API int cuModuleUnload(fk_mod *m) {
	DRV_INIT();
	if (!m || m->magic != MOD_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
	drain(m->dev, 0); /* its kernels may still be queued */
	m->magic = 0;     /* the library stays loaded: late users see a dead handle */
	return CUDA_SUCCESS;
}

API int cuModuleGetFunction(fk_func **out, fk_mod *m, const char *name) {
	DRV_INIT();
	if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
	*out = NULL;
	if (!m || m->magic != MOD_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
	char sym[512];
	snprintf(sym, sizeof sym, "gdfk_kernel_%s", name);
	const fk_desc *(*get)(void);
	*(void **)&get = dlsym(m->dl, sym);
	if (!get) {
		warnf("cuModuleGetFunction: no extern \"C\" __global__ function %s in the module", name);
		return CUDA_ERROR_NOT_FOUND;
	}
	fk_func *f = calloc(1, sizeof *f);
	f->magic = FUNC_MAGIC;
	f->mod = m;
	f->d = get();
	*out = f;
	return CUDA_SUCCESS;
}

/* CUDA 12.4: the offset and size of a kernel's parameter (offsets as the
   C ABI lays the parameters out: each at a multiple of its size up to 8). */
API int cuFuncGetParamInfo(fk_func *f, size_t idx, size_t *off, size_t *size) {
	DRV_INIT();
	if (!f || f->magic != FUNC_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
	if (idx >= (size_t)f->d->nparams) return CUDA_ERROR_INVALID_VALUE;
	size_t o = 0;
	for (size_t i = 0; i <= idx; i++) {
		size_t s = f->d->sizes[i], a = s >= 8 ? 8 : s >= 4 ? 4 : s >= 2 ? 2 : 1;
		o = (o + a - 1) / a * a;
		if (i == idx) break;
		o += s;
	}
	if (off) *off = o;
	if (size) *size = f->d->sizes[idx];
	return CUDA_SUCCESS;
}

static pthread_mutex_t kernel_mu = PTHREAD_MUTEX_INITIALIZER;

struct launch_task {
	fk_func *f;
	unsigned grid[3], block[3];
	size_t shmem;
	void **args;
	unsigned char *buf;
};

/* Why the last launch that failed failed (fakecudaKernelFailure). */
static char kernel_failure[640];

/* Copies the last launch failure's message into buf (n bytes) and forgets
   it; returns its length (0: none since the last call). */
API int fakecudaKernelFailure(char *buf, int n) {
	pthread_mutex_lock(&kernel_mu);
	int len = (int)strlen(kernel_failure);
	if (buf && n > 0) snprintf(buf, (size_t)n, "%s", kernel_failure);
	kernel_failure[0] = 0;
	pthread_mutex_unlock(&kernel_mu);
	return len;
}

static void run_launch(void *a) {
	struct launch_task *l = a;
	delay(&kernel_delay_ms, "FAKE_CUDA_KERNEL_DELAY_MS");
	char err[512] = "";
	pthread_mutex_lock(&kernel_mu);
	int r = l->f->mod->run(l->f->d, l->grid, l->block, l->shmem, l->args, err, sizeof err);
	pthread_mutex_unlock(&kernel_mu);
	if (r) {
		warnf("kernel %s failed: %s", l->f->d->name, err);
		fprintf(stderr, "fakecuda: kernel %s failed: %s (the context now has a sticky error)\n", l->f->d->name, err);
		pthread_mutex_lock(&kernel_mu);
		snprintf(kernel_failure, sizeof kernel_failure, "kernel %s failed: %s", l->f->d->name, err);
		pthread_mutex_unlock(&kernel_mu);
		__atomic_store_n(&sticky, CUDA_ERROR_LAUNCH_FAILED, __ATOMIC_SEQ_CST);
	}
	free(l->args);
	free(l->buf);
	free(l);
}

API int cuLaunchKernel(fk_func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		       unsigned shmem, void *hs, void **params, void **extra) {
	DRV_INIT();
	if (!f || f->magic != FUNC_MAGIC || f->mod->magic != MOD_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
	const fk_desc *d = f->d;
	int dev = ctx_dev("cuLaunchKernel");
	if (f->mod->dev != dev) {
		warnf("cuLaunchKernel(%s): the module is loaded on device %d but device %d is current", d->name, f->mod->dev, dev);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	stream *st;
	if (check_stream("cuLaunchKernel", hs, &st)) return CUDA_ERROR_INVALID_HANDLE;
	if (!stream_dev_ok("cuLaunchKernel", st)) return CUDA_ERROR_INVALID_HANDLE;
	if (!gx || !gy || !gz || !bx || !by || !bz || bx > 1024 || by > 1024 || bz > 64 ||
	    (unsigned long long)bx * by * bz > 1024 || gy > 65535 || gz > 65535 || gx > 2147483647u) {
		warnf("cuLaunchKernel(%s): grid (%u,%u,%u), block (%u,%u,%u) out of range", d->name, gx, gy, gz, bx, by, bz);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (shmem > 49152) {
		warnf("cuLaunchKernel(%s): %u bytes of dynamic shared memory (at most 48 KiB without cuFuncSetAttribute)", d->name, shmem);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (extra) {
		warnf("cuLaunchKernel(%s): the fake takes kernelParams, not extra", d->name);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (d->nparams > 0 && !params) return CUDA_ERROR_INVALID_VALUE;
	size_t total = 0;
	for (int i = 0; i < d->nparams; i++) total += (d->sizes[i] + 15) / 16 * 16;
	struct launch_task *l = calloc(1, sizeof *l);
	l->buf = calloc(total ? total : 1, 1);
	l->args = calloc(d->nparams + 1, sizeof *l->args);
	size_t off = 0;
	for (int i = 0; i < d->nparams; i++) {
		l->args[i] = l->buf + off;
		memcpy(l->args[i], params[i], d->sizes[i]);
		if (d->ptrs[i] && d->sizes[i] == sizeof(uintptr_t)) {
			uintptr_t v;
			memcpy(&v, l->args[i], sizeof v);
			unsigned char *h;
			int pd, r = v ? dev_lookup(v, 0, &h, &pd) : 1;
			if (v && r == 1 && pd != dev) r = -2;
			if (v && r == 0 && pinned_lookup((void *)v, 0)) r = 2, h = (unsigned char *)v;
			if (r <= 0) {
				warnf("cuLaunchKernel(%s): parameter %d, %#lx, is %s", d->name, i, (unsigned long)v,
				      r == 0 ? "host memory (not pinned): a GPU cannot read it" :
				      r == -2 ? "memory of another device" : "not within a live device allocation");
				free(l->args);
				free(l->buf);
				free(l);
				return CUDA_ERROR_INVALID_VALUE;
			}
			if (v) {
				uintptr_t hv = (uintptr_t)h;
				memcpy(l->args[i], &hv, sizeof hv);
			}
		}
		off += (d->sizes[i] + 15) / 16 * 16;
	}
	l->f = f;
	l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz;
	l->block[0] = bx, l->block[1] = by, l->block[2] = bz;
	l->shmem = shmem;
	submit(st, run_launch, l);
	return CUDA_SUCCESS;
}
