//go:build cgo

package cudafake

/*
#include <stdint.h>

typedef void (*gdfk_contexts_fn)(unsigned long long *, int *, char *, int);
typedef void (*gdfk_void_fn)(void);
typedef void (*gdfk_int_fn)(int);
typedef int (*gdfk_get_fn)(void);

static void gdfk_contexts(uintptr_t f, unsigned long long *mask, int *implicit, char *call, int len) {
	((gdfk_contexts_fn)f)(mask, implicit, call, len);
}
static void gdfk_call(uintptr_t f) { ((gdfk_void_fn)f)(); }
static void gdfk_call_int(uintptr_t f, int v) { ((gdfk_int_fn)f)(v); }
static int gdfk_get(uintptr_t f) { return ((gdfk_get_fn)f)(); }
static void gdfk_call_ll(uintptr_t f, long long v) { ((void (*)(long long))f)(v); }
static int gdfk_failure(uintptr_t f, char *buf, int n) { return ((int (*)(char *, int))f)(buf, n); }
static int gdfk_stream_delay(uintptr_t f, uintptr_t s, int ms) { return ((int (*)(void *, int))f)((void *)s, ms); }
*/
import "C"

import (
	"fmt"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
)

// sym is the address of one of the fake's test entry points (fake mode
// only: the test is skipped otherwise).
func sym(t testing.TB, name string) C.uintptr_t {
	t.Helper()
	RequireFake(t)
	p, err := cuda.Symbol(name)
	if err != nil || p == 0 {
		t.Fatalf("cudafake: the loaded library has no %s: %v", name, err)
	}
	return C.uintptr_t(p)
}

// Contexts says on which devices the process has a CUDA context (bit d of
// mask for device d), and how many calls that need one ran on an OS thread
// where no device was ever set, so that the real runtime would have made a
// context on device 0 (the last such call is named in last).
func Contexts(t testing.TB) (mask uint64, implicit int, last string) {
	f := sym(t, "fakecudaContexts")
	var m C.ulonglong
	var n C.int
	var buf [64]C.char
	C.gdfk_contexts(f, &m, &n, &buf[0], C.int(len(buf)))
	return uint64(m), int(n), C.GoString(&buf[0])
}

// ResetContexts forgets the contexts made so far (see Contexts).
func ResetContexts(t testing.TB) { C.gdfk_call(sym(t, "fakecudaResetContexts")) }

// OnlyContexts fails t unless the process made contexts on the given
// devices only, and no call ran on a thread with no device set.
func OnlyContexts(t testing.TB, devices ...int) {
	t.Helper()
	var want uint64
	for _, d := range devices {
		want |= 1 << d
	}
	mask, implicit, last := Contexts(t)
	if implicit != 0 {
		t.Errorf("%d CUDA call(s) needed a context on a thread with no device set (the last: %s): the real runtime makes one on device 0", implicit, last)
	}
	if mask&^want != 0 {
		t.Errorf("CUDA contexts on devices %s, want only %v", devs(mask), devices)
	}
}

func devs(mask uint64) string {
	var out []int
	for d := 0; d < 64; d++ {
		if mask&(1<<d) != 0 {
			out = append(out, d)
		}
	}
	return fmt.Sprint(out)
}

// HoldFunc is the address of a C function that, queued on a stream with
// Stream.LaunchHostFunc, keeps the stream busy until Gate(true), as an NCCL
// kernel that waits for a peer does.
func HoldFunc(t testing.TB) uintptr { return uintptr(sym(t, "fakecudaHold")) }

// Gate closes (false) or opens (true) the gate that HoldFunc waits for.
func Gate(t testing.TB, open bool) {
	v := C.int(0)
	if open {
		v = 1
	}
	C.gdfk_call_int(sym(t, "fakecudaGate"), v)
}

// CopyDelay makes every cudaMemcpy and cudaMemset take d longer, until
// called again with 0: a copy to the host returns d later, and a copy to
// the device or a memset (asynchronous, queued on the default stream)
// completes d later, so that code that fails to synchronize reads stale
// data.
func CopyDelay(t testing.TB, d time.Duration) {
	C.gdfk_call_int(sym(t, "fakecudaCopyDelay"), C.int(d.Milliseconds()))
}

// NoImplicitContexts fails t if, since ResetContexts, a call that needs a
// context ran on a thread where no device was ever set (whatever other
// goroutines of the process did on their own devices meanwhile).
func NoImplicitContexts(t testing.TB) {
	t.Helper()
	if _, implicit, last := Contexts(t); implicit != 0 {
		t.Errorf("%d CUDA call(s) needed a context on a thread with no device set (the last: %s): the real runtime makes one on device 0", implicit, last)
	}
}

// CommInits is the number of NCCL communicators the fake's ncclCommInitRank
// made since ResetCommInits (one per rank and communicator: each costs a
// real NCCL initialization and GPU memory).
func CommInits(t testing.TB) int { return int(C.gdfk_get(sym(t, "fakencclCommInits"))) }

// ResetCommInits restarts the count of CommInits.
func ResetCommInits(t testing.TB) { C.gdfk_call(sym(t, "fakencclResetCommInits")) }

// Vanish makes the NCCL ranks on device dev vanish, as a process that dies
// does over NVLink, P2P or shared memory: their kernels never run, and no
// communicator reports an asynchronous error, so the peers' kernels wait
// for them until aborted. The devices come back when t ends.
func Vanish(t testing.TB, dev int) {
	f := sym(t, "fakencclVanish")
	C.gdfk_call_int(f, C.int(dev))
	t.Cleanup(func() { C.gdfk_call_int(f, -1) })
}

// StickyError makes the process's CUDA context unusable, as a kernel fault
// does: every later CUDA call returns code (if 0, cudaErrorIllegalAddress,
// 700: "an illegal memory access was encountered"),
// synchronizations return it at once, and NCCL calls and NCCL's
// asynchronous error say ncclUnhandledCudaError. The context is repaired
// when t ends (a real process never recovers).
func StickyError(t testing.TB, code int) {
	f := sym(t, "fakecudaStickyError")
	if code == 0 {
		code = 700
	}
	C.gdfk_call_int(f, C.int(code))
	t.Cleanup(func() { C.gdfk_call_int(f, 0) })
}

// KernelFailure says why the last kernel launch that failed on the fake
// failed ("kernel NAME failed: ...": a divergent barrier, a divergent
// warp matrix call, ...), "" when none failed since the last call, and
// forgets it. A failed launch leaves the context with the sticky
// CUDA_ERROR_LAUNCH_FAILED, as a fault on a GPU does (synchronizations
// return it); when KernelFailure reports one it also repairs the context,
// so that the test goes on (a real process never recovers).
func KernelFailure(t testing.TB) string {
	f := sym(t, "fakecudaKernelFailure")
	var buf [640]C.char
	if C.gdfk_failure(f, &buf[0], C.int(len(buf))) == 0 {
		return ""
	}
	C.gdfk_call_int(sym(t, "fakecudaStickyError"), 0)
	return C.GoString(&buf[0])
}

// MemLimit caps the device memory each fake device may have allocated at
// once: cudaMalloc beyond it fails with cudaErrorMemoryAllocation ("out of
// memory"). The cap is lifted when t ends.
func MemLimit(t testing.TB, bytes int64) {
	f := sym(t, "fakecudaMemLimit")
	C.gdfk_call_ll(f, C.longlong(bytes))
	t.Cleanup(func() { C.gdfk_call_ll(f, 0) })
}

// ReferenceGEMM makes the fake cuBLAS compute its GEMMs with its reference
// loop (one element of C at a time, one float sum over k) while on is
// true, and at the latest until t ends; its fast path gives the same bits
// (TestGemmBitsMatchReference).
func ReferenceGEMM(t testing.TB, on bool) {
	f := sym(t, "fakecublasReferenceGemm")
	v := C.int(0)
	if on {
		v = 1
		t.Cleanup(func() { C.gdfk_call_int(f, 0) })
	}
	C.gdfk_call_int(f, v)
}

// StreamDelay makes every later task of stream s (nil: device 0's legacy
// default stream) but its event records
// and waits start d later, until called again with 0 (and at the latest
// when t ends): a stream on a busy GPU. Work on another stream that does
// not wait for s (an event recorded on s) then runs ahead of s's and
// reads stale or unfinished data, so a missing wait is caught.
func StreamDelay(t testing.TB, s *cuda.Stream, d time.Duration) {
	f := sym(t, "fakecudaStreamDelay")
	var h C.uintptr_t
	if s != nil {
		h = C.uintptr_t(s.Handle())
	}
	if r := C.gdfk_stream_delay(f, h, delayMS(t, "StreamDelay", d)); r != 0 {
		t.Fatalf("cudafake: StreamDelay: cudaError %d", int(r))
	}
	if d > 0 {
		t.Cleanup(func() { C.gdfk_stream_delay(f, h, 0) })
	}
}

// NCCLDelay makes every later NCCL collective and send/recv of the fake
// start d later on its stream, until called again with 0 (and at the
// latest when t ends): work that does not wait for NCCL's result (an
// event recorded after it) reads the buffers before they hold it.
func NCCLDelay(t testing.TB, d time.Duration) {
	f := sym(t, "fakecudaNCCLDelay")
	C.gdfk_call_int(f, delayMS(t, "NCCLDelay", d))
	if d > 0 {
		t.Cleanup(func() { C.gdfk_call_int(f, 0) })
	}
}

// KernelDelay makes every later kernel launch and cuBLAS GEMM of the fake
// start d later on its stream, until called again with 0 (and at the
// latest when t ends): the compute streams run behind, so that work on
// another stream (NCCL's, a copy) that does not wait for them reads
// their buffers too early. A rank run as a process sets
// FAKE_CUDA_KERNEL_DELAY_MS (and FAKE_NCCL_DELAY_MS for NCCLDelay)
// instead.
func KernelDelay(t testing.TB, d time.Duration) {
	f := sym(t, "fakecudaKernelDelay")
	C.gdfk_call_int(f, delayMS(t, "KernelDelay", d))
	if d > 0 {
		t.Cleanup(func() { C.gdfk_call_int(f, 0) })
	}
}

// SpinWaits makes the fake's host waits spin while on is true (and at the
// latest until t ends), as CUDA's default scheduling does:
// cudaStreamSynchronize, and the cudaEventSynchronize of an event made
// without cudaEventBlockingSync (cuda.NewEvent's), keep the waiting thread
// running for the whole wait, which the process's CPU time then shows; a
// blocking-sync event's waits (cuda.NewBlockingEvent's) still sleep.
func SpinWaits(t testing.TB, on bool) {
	f := sym(t, "fakecudaSpinWaits")
	v := C.int(0)
	if on {
		v = 1
		t.Cleanup(func() { C.gdfk_call_int(f, 0) })
	}
	C.gdfk_call_int(f, v)
}

// LiveEvents is the number of CUDA events made and not yet destroyed in
// the process (cudaEventCreate less cudaEventDestroy).
func LiveEvents(t testing.TB) int { return int(C.gdfk_get(sym(t, "fakecudaLiveEvents"))) }

// FreedUses is the number of calls so far (copies, memsets, kernel
// launches, GEMMs, NCCL operations) that named device memory already
// freed: uses after free, each also the call's error, which a caller
// issuing work from a goroutine may drop. (A cudaFree itself waits for
// the work queued on the device, as CUDA's does: work queued before it
// never sees its memory freed; work issued after it does, and is
// counted.)
func FreedUses(t testing.TB) int { return int(C.gdfk_get(sym(t, "fakecudaFreedUses"))) }

// delayMS is d in the fake's whole milliseconds: a delay it cannot give
// (under a millisecond but not 0, which would be no delay at all, or
// negative) fails t.
func delayMS(t testing.TB, what string, d time.Duration) C.int {
	if d < 0 || (d > 0 && d < time.Millisecond) || d > time.Duration(1<<31-1)*time.Millisecond {
		t.Fatalf("cudafake: %s(%v): want 0 (off) or 1ms or more (the fake delays in whole milliseconds)", what, d)
	}
	return C.int(d.Milliseconds())
}
