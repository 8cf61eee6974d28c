//go:build amd64 && !purego

package cpu

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

func detect() (f Features) {
	if maxID, _, _, _ := cpuid(0, 0); maxID < 7 {
		return f
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx, f16c = 1 << 12, 1 << 27, 1 << 28, 1 << 29
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
		return f
	}
	xcr0, _ := xgetbv()
	if xcr0&0x6 != 0x6 { // SSE and AVX state
		return f
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const avx2, avx512f, avx512dq, avx512bw, avx512vl = 1 << 5, 1 << 16, 1 << 17, 1 << 30, 1 << 31
	f.AVX2 = ebx7&avx2 != 0
	f.FMA = ecx1&fma != 0
	f.F16C = ecx1&f16c != 0
	f.AVX512 = f.AVX2 && ebx7&avx512f != 0 && ebx7&avx512dq != 0 && ebx7&avx512bw != 0 &&
		ebx7&avx512vl != 0 && xcr0&0xe0 == 0xe0 // opmask, ZMM0-15 upper halves, ZMM16-31
	return f
}
