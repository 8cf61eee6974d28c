//go:build amd64 && !purego

package vecmath

import (
	"unsafe"

	"github.com/gdist/gdist/internal/cpu"
)

var copyNTOK = cpu.X86.AVX2

func addrMod64(b []byte) int { return int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & 63) }

// copyNTAVX streams n bytes (a multiple of 64, dst 64-byte aligned) from
// src to dst and fences.
//
//go:noescape
func copyNTAVX(dst, src *byte, n int)

func copyNT(dst, src []byte) {
	if len(dst) == 0 {
		return
	}
	copyNTAVX(&dst[0], &src[0], len(dst))
}
