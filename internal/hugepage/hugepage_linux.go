package hugepage

import (
	"syscall"
	"unsafe"
)

const hugeSize = 2 << 20

// advise marks the 2 MiB-aligned interior of b's memory MADV_HUGEPAGE. Go
// hands out a fresh large allocation untouched (it is zero already), so
// its pages are faulted in as huge pages at first use. An error (a kernel
// without THP) leaves ordinary pages.
func advise(b []float32) {
	base := unsafe.Pointer(unsafe.SliceData(b))
	p := uintptr(base)
	lo := (p + hugeSize - 1) &^ (hugeSize - 1)
	hi := (p + uintptr(len(b))*4) &^ (hugeSize - 1)
	if hi <= lo {
		return
	}
	start := unsafe.Add(base, lo-p)
	syscall.Madvise(unsafe.Slice((*byte)(start), hi-lo), syscall.MADV_HUGEPAGE)
}
