//go:build cgo

package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
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

// Free releases memory from Malloc (cudaFree). It may wait for work in
// flight on the device.
func Free(device int, ptr uintptr) error {
	l, err := lib()
	if err != nil {
		return err
	}
	return l.err("cudaFree", C.gdcu_free(l.c, C.int(device), C.uintptr_t(ptr)))
}

// HostAlloc allocates n bytes of page-locked (pinned) host memory usable by
// every device (cudaHostAlloc with cudaHostAllocPortable). The returned slice
// is C memory: it stays valid until FreeHost, and the Go garbage collector
// never moves or frees it.
func HostAlloc(n int) ([]byte, error) {
	l, err := lib()
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("cuda: HostAlloc of %d bytes", n)
	}
	var p unsafe.Pointer
	if e := C.gdcu_host_alloc(l.c, &p, C.size_t(n)); e != 0 {
		return nil, fmt.Errorf("%w (%d bytes)", l.err("cudaHostAlloc", e), n)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases memory from HostAlloc (cudaFreeHost).
func FreeHost(b []byte) error {
	l, err := lib()
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	return l.err("cudaFreeHost", C.gdcu_free_host(l.c, unsafe.Pointer(unsafe.SliceData(b))))
}

func hostAddr(b []byte) C.uintptr_t { return C.uintptr_t(addrOf(b)) }

// CopyHtoD copies len(src) bytes from host memory to device address dst on
// device (cudaMemcpy). It returns when src may be reused; later work on the
// default stream or on streams that wait for it sees the data.
func CopyHtoD(device int, dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	l, err := lib()
	if err != nil {
		return err
	}
	e := C.gdcu_memcpy(l.c, C.int(device), C.uintptr_t(dst), hostAddr(src), C.size_t(len(src)), C.int(HostToDevice))
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
	e := C.gdcu_memcpy(l.c, C.int(device), hostAddr(dst), C.uintptr_t(src), C.size_t(len(dst)), C.int(DeviceToHost))
	return l.err("cudaMemcpy (device to host)", e)
}

// CopyDtoD copies n bytes between device addresses (cudaMemcpy), with
// device current.
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

// Memset sets n bytes at device address ptr to v (cudaMemset).
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
// which device (cudaPointerGetAttributes).
func PointerInfo(ptr uintptr) (MemoryType, int, error) {
	l, err := lib()
	if err != nil {
		return 0, 0, err
	}
	var typ, dev C.int
	if e := C.gdcu_pointer_info(l.c, C.uintptr_t(ptr), &typ, &dev); e != 0 {
		return 0, 0, l.err("cudaPointerGetAttributes", e)
	}
	return MemoryType(typ), int(dev), nil
}
