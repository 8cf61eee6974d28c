//go:build amd64 && !purego

package vecmath

import "unsafe"

//go:noescape
func geluAVX2(y, d, x *float32, n int, c *GELUConsts)

//go:noescape
func adamWAVX(pp, gg, mm, vv *float32, n int, c *AdamWConsts)

func adamWKernel(p, g, m, v []float32, c *AdamWConsts) {
	adamWAVX(unsafe.SliceData(p), unsafe.SliceData(g), unsafe.SliceData(m), unsafe.SliceData(v), len(p), c)
}

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// HasAVX2FMA reports AVX2 and FMA, with the AVX state enabled by the OS:
// what the kernels need.
var HasAVX2FMA = func() bool {
	if maxID, _, _, _ := cpuid(0, 0); maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&fma == 0 || ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&0x6 != 0x6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}()

func geluKernel(y, d, x []float32, c *GELUConsts) {
	var dp *float32
	if d != nil {
		dp = unsafe.SliceData(d[:len(x)])
	}
	geluAVX2(unsafe.SliceData(y), dp, unsafe.SliceData(x), len(x), c)
}
