// Package cpu reports the x86 vector extensions the assembly kernels use
// (internal/reduce's, internal/vecmath's and internal/winograd's), each
// only where the OS also saves its registers: one place that asks CPUID;
// and, for those three, which of their kernel sets to run (ChooseKernels: the widest, or GDIST_KERNELS's cap).
//
// Environment: GDIST_KERNELS (EnvKernels) only, read at the first
// ChooseKernels, not at import.
package cpu

// Features are the extensions found, all false off amd64 or with the
// purego build tag.
type Features struct {
	AVX2   bool // AVX2, with the AVX state enabled by the OS
	FMA    bool // FMA3 (meaningful with AVX2)
	F16C   bool // half-precision conversions
	AVX512 bool // AVX-512 F, DQ, BW and VL, with their state enabled by the OS (implies AVX2)
}

// X86 is this machine's.
var X86 = detect()
