//go:build amd64 && !purego

package reduce

import (
	"sync"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/cpu"
)

//go:generate go run gen_kernels_amd64.go

// cpuFeatures reports AVX2 (with F16C) and AVX-512 (F, BW, VL, DQ)
// support, each also enabled by the OS.
func cpuFeatures() (hasAVX2, hasAVX512 bool) {
	hasAVX2 = cpu.X86.AVX2 && cpu.X86.F16C
	return hasAVX2, hasAVX2 && cpu.X86.AVX512
}

type asmBin func(dst, a, b *byte, n int)
type asmDiv32 func(dst, a *byte, n int, d float32)
type asmDiv64 func(dst, a *byte, n int, d float64)

// kernelBlock is the granule of the assembly kernels: they take a whole
// number of 64-byte blocks (AVX2 ones too, for simplicity).
const kernelBlock = 64

// blocked runs k over the whole blocks of dst and pads the tail into one
// block on the stack.
// tails holds the scratch blocks of the kernels' partial last block: on
// the stack they would escape (k is called through a func value) and cost
// an allocation per call.
var tails = sync.Pool{New: func() any { return new([3][kernelBlock]byte) }}

func blocked(k asmBin) binKernel {
	return func(dst, a, b []byte) {
		n := len(dst) &^ (kernelBlock - 1)
		if n > 0 {
			k(unsafe.SliceData(dst), unsafe.SliceData(a), unsafe.SliceData(b), n)
		}
		if n < len(dst) {
			t := tails.Get().(*[3][kernelBlock]byte)
			ta, tb, td := &t[0], &t[1], &t[2]
			copy(ta[:], a[n:])
			copy(tb[:], b[n:])
			k(&td[0], &ta[0], &tb[0], kernelBlock)
			copy(dst[n:], td[:])
			tails.Put(t)
		}
	}
}

func blockedDiv32(k asmDiv32) divKernel {
	return func(buf []byte, n int) {
		m := len(buf) &^ (kernelBlock - 1)
		if m > 0 {
			k(unsafe.SliceData(buf), unsafe.SliceData(buf), m, float32(n))
		}
		if m < len(buf) {
			tt := tails.Get().(*[3][kernelBlock]byte)
			t := &tt[0]
			copy(t[:], buf[m:])
			k(&t[0], &t[0], kernelBlock, float32(n))
			copy(buf[m:], t[:])
			tails.Put(tt)
		}
	}
}

func blockedDiv64(k asmDiv64) divKernel {
	return func(buf []byte, n int) {
		m := len(buf) &^ (kernelBlock - 1)
		if m > 0 {
			k(unsafe.SliceData(buf), unsafe.SliceData(buf), m, float64(n))
		}
		if m < len(buf) {
			tt := tails.Get().(*[3][kernelBlock]byte)
			t := &tt[0]
			copy(t[:], buf[m:])
			k(&t[0], &t[0], kernelBlock, float64(n))
			copy(buf[m:], t[:])
			tails.Put(tt)
		}
	}
}

// asmTable lists one ISA's kernels.
type asmTable struct {
	addF32, mulF32, minF32, maxF32         asmBin
	addF64, mulF64, minF64, maxF64         asmBin
	addI32, mulI32, minI32, maxI32, addI64 asmBin
	addU8, minU8, maxU8, and, or, xor      asmBin
	addBF16, mulBF16, minBF16, maxBF16     asmBin
	addF16, mulF16, minF16, maxF16         asmBin
	divBF16, divF16, divF32                asmDiv32
	divF64                                 asmDiv64
}

func (t *asmTable) set(name string) *kernelSet {
	s := &kernelSet{name: name}
	four := func(dt comm.DType, add, mul, min, max asmBin) {
		s.bin[dt][comm.Sum] = blocked(add)
		s.bin[dt][comm.Avg] = blocked(add)
		s.bin[dt][comm.Prod] = blocked(mul)
		s.bin[dt][comm.Min] = blocked(min)
		s.bin[dt][comm.Max] = blocked(max)
	}
	four(comm.Float32, t.addF32, t.mulF32, t.minF32, t.maxF32)
	four(comm.Float64, t.addF64, t.mulF64, t.minF64, t.maxF64)
	four(comm.Int32, t.addI32, t.mulI32, t.minI32, t.maxI32)
	four(comm.BFloat16, t.addBF16, t.mulBF16, t.minBF16, t.maxBF16)
	four(comm.Float16, t.addF16, t.mulF16, t.minF16, t.maxF16)
	s.bin[comm.Int64][comm.Sum] = blocked(t.addI64)
	s.bin[comm.Int64][comm.Avg] = blocked(t.addI64)
	s.bin[comm.Int64][comm.Prod] = nil
	s.bin[comm.Uint8][comm.Sum] = blocked(t.addU8)
	s.bin[comm.Uint8][comm.Avg] = blocked(t.addU8)
	s.bin[comm.Uint8][comm.Min] = blocked(t.minU8)
	s.bin[comm.Uint8][comm.Max] = blocked(t.maxU8)
	for _, dt := range []comm.DType{comm.Int32, comm.Int64, comm.Uint8} {
		s.bin[dt][comm.BAnd] = blocked(t.and)
		s.bin[dt][comm.BOr] = blocked(t.or)
		s.bin[dt][comm.BXor] = blocked(t.xor)
	}
	s.div[comm.Float32] = blockedDiv32(t.divF32)
	s.div[comm.Float64] = blockedDiv64(t.divF64)
	s.div[comm.BFloat16] = blockedDiv32(t.divBF16)
	s.div[comm.Float16] = blockedDiv32(t.divF16)
	return s.fillFrom(goKernels)
}

func archKernelSets() []*kernelSet {
	hasAVX2, hasAVX512 := cpuFeatures()
	var sets []*kernelSet
	if hasAVX2 {
		sets = append(sets, avx2Table.set("avx2"))
	}
	if hasAVX512 {
		sets = append(sets, avx512Table.set("avx512"))
	}
	return sets
}

//go:noescape
func addF32AVX2(dst, a, b *byte, n int)

//go:noescape
func mulF32AVX2(dst, a, b *byte, n int)

//go:noescape
func minF32AVX2(dst, a, b *byte, n int)

//go:noescape
func maxF32AVX2(dst, a, b *byte, n int)

//go:noescape
func addF64AVX2(dst, a, b *byte, n int)

//go:noescape
func mulF64AVX2(dst, a, b *byte, n int)

//go:noescape
func minF64AVX2(dst, a, b *byte, n int)

//go:noescape
func maxF64AVX2(dst, a, b *byte, n int)

//go:noescape
func addI32AVX2(dst, a, b *byte, n int)

//go:noescape
func mulI32AVX2(dst, a, b *byte, n int)

//go:noescape
func minI32AVX2(dst, a, b *byte, n int)

//go:noescape
func maxI32AVX2(dst, a, b *byte, n int)

//go:noescape
func addI64AVX2(dst, a, b *byte, n int)

//go:noescape
func addU8AVX2(dst, a, b *byte, n int)

//go:noescape
func minU8AVX2(dst, a, b *byte, n int)

//go:noescape
func maxU8AVX2(dst, a, b *byte, n int)

//go:noescape
func andAVX2(dst, a, b *byte, n int)

//go:noescape
func orAVX2(dst, a, b *byte, n int)

//go:noescape
func xorAVX2(dst, a, b *byte, n int)

//go:noescape
func addBF16AVX2(dst, a, b *byte, n int)

//go:noescape
func addF16AVX2(dst, a, b *byte, n int)

//go:noescape
func mulBF16AVX2(dst, a, b *byte, n int)

//go:noescape
func mulF16AVX2(dst, a, b *byte, n int)

//go:noescape
func minBF16AVX2(dst, a, b *byte, n int)

//go:noescape
func minF16AVX2(dst, a, b *byte, n int)

//go:noescape
func maxBF16AVX2(dst, a, b *byte, n int)

//go:noescape
func maxF16AVX2(dst, a, b *byte, n int)

//go:noescape
func divBF16AVX2(dst, a *byte, n int, d float32)

//go:noescape
func divF16AVX2(dst, a *byte, n int, d float32)

//go:noescape
func divF32AVX2(dst, a *byte, n int, d float32)

//go:noescape
func divF64AVX2(dst, a *byte, n int, d float64)

//go:noescape
func addF32AVX512(dst, a, b *byte, n int)

//go:noescape
func mulF32AVX512(dst, a, b *byte, n int)

//go:noescape
func minF32AVX512(dst, a, b *byte, n int)

//go:noescape
func maxF32AVX512(dst, a, b *byte, n int)

//go:noescape
func addF64AVX512(dst, a, b *byte, n int)

//go:noescape
func mulF64AVX512(dst, a, b *byte, n int)

//go:noescape
func minF64AVX512(dst, a, b *byte, n int)

//go:noescape
func maxF64AVX512(dst, a, b *byte, n int)

//go:noescape
func addI32AVX512(dst, a, b *byte, n int)

//go:noescape
func mulI32AVX512(dst, a, b *byte, n int)

//go:noescape
func minI32AVX512(dst, a, b *byte, n int)

//go:noescape
func maxI32AVX512(dst, a, b *byte, n int)

//go:noescape
func addI64AVX512(dst, a, b *byte, n int)

//go:noescape
func addU8AVX512(dst, a, b *byte, n int)

//go:noescape
func minU8AVX512(dst, a, b *byte, n int)

//go:noescape
func maxU8AVX512(dst, a, b *byte, n int)

//go:noescape
func andAVX512(dst, a, b *byte, n int)

//go:noescape
func orAVX512(dst, a, b *byte, n int)

//go:noescape
func xorAVX512(dst, a, b *byte, n int)

//go:noescape
func addBF16AVX512(dst, a, b *byte, n int)

//go:noescape
func addF16AVX512(dst, a, b *byte, n int)

//go:noescape
func mulBF16AVX512(dst, a, b *byte, n int)

//go:noescape
func mulF16AVX512(dst, a, b *byte, n int)

//go:noescape
func minBF16AVX512(dst, a, b *byte, n int)

//go:noescape
func minF16AVX512(dst, a, b *byte, n int)

//go:noescape
func maxBF16AVX512(dst, a, b *byte, n int)

//go:noescape
func maxF16AVX512(dst, a, b *byte, n int)

//go:noescape
func divBF16AVX512(dst, a *byte, n int, d float32)

//go:noescape
func divF16AVX512(dst, a *byte, n int, d float32)

//go:noescape
func divF32AVX512(dst, a *byte, n int, d float32)

//go:noescape
func divF64AVX512(dst, a *byte, n int, d float64)

var avx2Table = &asmTable{
	addF32:  addF32AVX2,
	mulF32:  mulF32AVX2,
	minF32:  minF32AVX2,
	maxF32:  maxF32AVX2,
	addF64:  addF64AVX2,
	mulF64:  mulF64AVX2,
	minF64:  minF64AVX2,
	maxF64:  maxF64AVX2,
	addI32:  addI32AVX2,
	mulI32:  mulI32AVX2,
	minI32:  minI32AVX2,
	maxI32:  maxI32AVX2,
	addI64:  addI64AVX2,
	addU8:   addU8AVX2,
	minU8:   minU8AVX2,
	maxU8:   maxU8AVX2,
	and:     andAVX2,
	or:      orAVX2,
	xor:     xorAVX2,
	addBF16: addBF16AVX2,
	mulBF16: mulBF16AVX2,
	minBF16: minBF16AVX2,
	maxBF16: maxBF16AVX2,
	addF16:  addF16AVX2,
	mulF16:  mulF16AVX2,
	minF16:  minF16AVX2,
	maxF16:  maxF16AVX2,
	divBF16: divBF16AVX2,
	divF16:  divF16AVX2,
	divF32:  divF32AVX2,
	divF64:  divF64AVX2,
}

var avx512Table = &asmTable{
	addF32:  addF32AVX512,
	mulF32:  mulF32AVX512,
	minF32:  minF32AVX512,
	maxF32:  maxF32AVX512,
	addF64:  addF64AVX512,
	mulF64:  mulF64AVX512,
	minF64:  minF64AVX512,
	maxF64:  maxF64AVX512,
	addI32:  addI32AVX512,
	mulI32:  mulI32AVX512,
	minI32:  minI32AVX512,
	maxI32:  maxI32AVX512,
	addI64:  addI64AVX512,
	addU8:   addU8AVX512,
	minU8:   minU8AVX512,
	maxU8:   maxU8AVX512,
	and:     andAVX512,
	or:      orAVX512,
	xor:     xorAVX512,
	addBF16: addBF16AVX512,
	mulBF16: mulBF16AVX512,
	minBF16: minBF16AVX512,
	maxBF16: maxBF16AVX512,
	addF16:  addF16AVX512,
	mulF16:  mulF16AVX512,
	minF16:  minF16AVX512,
	maxF16:  maxF16AVX512,
	divBF16: divBF16AVX512,
	divF16:  divF16AVX512,
	divF32:  divF32AVX512,
	divF64:  divF64AVX512,
}
