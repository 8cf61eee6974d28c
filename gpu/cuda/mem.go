//go:build cgo

package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Malloc allocates n bytes on device (cudaMalloc). The memory is not
// initialized.
func Malloc(device, n int) (uintptr, error) {
	l, err := lib()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("cuda: Malloc of %d bytes", n)
	}
	var p C.uintptr_t
	if e := C.gdcu_malloc(l.c, C.int(device), &p, C.size_t(n)); e != 0 {
		return 0, fmt.Errorf("%w (%d bytes on cuda:%d)", l.err("cudaMalloc", e), n, device)
	}
	return uintptr(p), nil
}

// Free releases memory from Malloc (cudaFree). It blocks until the device
// has done all the work queued on it, on every stream, so never call it
// where that work may wait for this caller (an NCCL kernel waiting for a
// peer that waits for this rank): Pool frees in the background.
func Free(device int, ptr uintptr) error {
	l, err := lib()
	if err != nil {
		return err
	}
	return l.err("cudaFree", C.gdcu_free(l.c, C.int(device), C.uintptr_t(ptr)))
}

// HostAlloc allocates n bytes of page-locked (pinned) host memory usable by
// every device (cudaHostAlloc with cudaHostAllocPortable), with device
// current (the call needs a CUDA context: pass the caller's GPU, so that no
// context is made on another). The returned slice is C memory: it stays
// valid until FreeHost, and the Go garbage collector never moves or frees
// it.
func HostAlloc(device, n int) ([]byte, error) {
	l, err := lib()
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("cuda: HostAlloc of %d bytes", n)
	}
	var p unsafe.Pointer
	if e := C.gdcu_host_alloc(l.c, C.int(device), &p, C.size_t(n)); e != 0 {
		return nil, fmt.Errorf("%w (%d bytes)", l.err("cudaHostAlloc", e), n)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases memory from HostAlloc (cudaFreeHost), with device
// current. Like Free, it blocks until the device is idle.
func FreeHost(device int, b []byte) error {
	l, err := lib()
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	return l.err("cudaFreeHost", C.gdcu_free_host(l.c, C.int(device), unsafe.Pointer(unsafe.SliceData(b))))
}

// The host side of a copy goes to C as an address (an integer), with the
// slice kept alive past the call (runtime.KeepAlive): it may be any Go
// memory, such as an int64 field of a struct that holds pointers, which
// cgo's pointer check refuses as an unsafe.Pointer argument ("Go pointer
// to unpinned Go pointer"). The copies are synchronous on the host side,
// and a goroutine's stack does not move while it is in a cgo call.

// CopyHtoD copies len(src) bytes from host memory to device address dst on
// device (cudaMemcpy). It returns when src may be reused; the copy to the
// device may still be in flight (the runtime stages pageable memory), and
// work queued later on the legacy default stream, or on streams that wait
// for it, sees the data.
func CopyHtoD(device int, dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	l, err := lib()
	if err != nil {
		return err
	}
	e := C.gdcu_memcpy_htod(l.c, C.int(device), C.uintptr_t(dst), C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(src)))), C.size_t(len(src)))
	runtime.KeepAlive(src)
	return l.err("cudaMemcpy (host to device)", e)
}

// CopyDtoH copies len(dst) bytes from device address src on device to host
// memory (cudaMemcpy). It returns once the data is in dst.
func CopyDtoH(device int, dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	l, err := lib()
	if err != nil {
		return err
	}
	e := C.gdcu_memcpy_dtoh(l.c, C.int(device), C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(dst)))), C.uintptr_t(src), C.size_t(len(dst)))
	runtime.KeepAlive(dst)
	return l.err("cudaMemcpy (device to host)", e)
}

// CopyDtoD copies n bytes between device addresses (cudaMemcpy), with
// device current. It is asynchronous to the host: it returns once the copy
// is queued on the legacy default stream; work queued there later (and a
// device-to-host copy) sees the data, and Synchronize on a stream that
// waits for the default stream (Stream.WaitDefault) waits for it.
func CopyDtoD(device int, dst, src uintptr, n int) error {
	if n == 0 {
		return nil
	}
	l, err := lib()
	if err != nil {
		return err
	}
	e := C.gdcu_memcpy(l.c, C.int(device), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.int(DeviceToDevice))
	return l.err("cudaMemcpy (device to device)", e)
}

// Memset sets n bytes at device address ptr to v (cudaMemset). Like
// CopyDtoD it is asynchronous to the host: it is queued on the legacy
// default stream.
func Memset(device int, ptr uintptr, v byte, n int) error {
	if n == 0 {
		return nil
	}
	l, err := lib()
	if err != nil {
		return err
	}
	return l.err("cudaMemset", C.gdcu_memset(l.c, C.int(device), C.uintptr_t(ptr), C.int(v), C.size_t(n)))
}

// PointerInfo tells what kind of memory ptr is and, for device memory, on
// which device (cudaPointerGetAttributes, with device current: the call
// needs a context, so pass the caller's GPU).
func PointerInfo(device int, ptr uintptr) (MemoryType, int, error) {
	l, err := lib()
	if err != nil {
		return 0, 0, err
	}
	var typ, dev C.int
	if e := C.gdcu_pointer_info(l.c, C.int(device), C.uintptr_t(ptr), &typ, &dev); e != 0 {
		return 0, 0, l.err("cudaPointerGetAttributes", e)
	}
	return MemoryType(typ), int(dev), nil
}
