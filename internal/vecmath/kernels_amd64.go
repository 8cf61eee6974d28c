//go:build amd64 && !purego

package vecmath

import (
	"unsafe"

	"github.com/gdist/gdist/internal/cpu"
)

// The assembly kernels (hand-written: gelu_amd64.s, optim_amd64.s,
// pool_amd64.s, conv_amd64.s, bn_amd64.s) and the sets made of them.

// archKernelSets returns the "avx2" set where the CPU has AVX2 and FMA
// (with the OS saving the AVX state) and then the "avx512" set where it
// also has AVX-512 F, DQ, BW and VL.
func archKernelSets() []*kernelSet {
	if !cpu.X86.AVX2 || !cpu.X86.FMA {
		return nil
	}
	avx2 := *goKernels
	avx2.name = "avx2"
	avx2.gelu = geluAVX2Kernel
	avx2.adamW = adamWAVXKernel
	avx2.sgd = sgdAVXKernel
	avx2.sum8 = sum8AVXKernel
	if !cpu.X86.AVX512 {
		return []*kernelSet{&avx2}
	}
	avx512 := avx2
	avx512.name = "avx512"
	avx512.gelu = geluAVX512Kernel // gelu512_amd64.s
	avx512.poolReLUArg = poolReLUArgAVX512Kernel
	avx512.poolArgGrad = poolArgGradAVX512Kernel
	avx512.addScalar = addScalarAVX512Kernel
	avx512.sumF64 = sumF64AVX512Kernel
	avx512.sqDevF64 = sqDevF64AVX512Kernel
	avx512.sumDotF64 = sumDotF64AVX512Kernel
	avx512.bnNorm = bnNormAVX512Kernel
	avx512.bnGrad = bnGradAVX512Kernel
	avx512.im2col = im2colAVX512Kernel
	avx512.col2im = col2imAVX512Kernel
	return []*kernelSet{&avx2, &avx512}
}

// ptr is s's first element's address; nil for a nil or empty s.
func ptr[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return unsafe.SliceData(s)
}

// ---- AVX2 + FMA (8 lanes; the whole groups of 8, the Go the rest) ----

//go:noescape
func geluAVX2(y, d, x *float32, n int, c *GELUConsts)

//go:noescape
func adamWAVX(pp, gg, mm, vv *float32, n int, c *AdamWConsts)

//go:noescape
func sgdAVX(pp, gg, bb *float32, n int, c *SGDConsts)

//go:noescape
func sum8AVX(v *float32, n int, s *[8]float32)

func geluAVX2Kernel(y, d, x []float32, c *GELUConsts) {
	geluAVX2(ptr(y), ptr(d), ptr(x), len(x), c)
}

func adamWAVXKernel(p, g, m, v []float32, c *AdamWConsts) {
	n := len(p) &^ 7
	if n > 0 {
		adamWAVX(ptr(p), ptr(g), ptr(m), ptr(v), n, c)
	}
	adamWGo(p[n:], g[n:], m[n:], v[n:], c)
}

func sgdAVXKernel(p, g, b []float32, c *SGDConsts) {
	n := len(p) &^ 7
	if n > 0 {
		sgdAVX(ptr(p), ptr(g), ptr(b), n, c)
	}
	if b != nil {
		b = b[n:]
	}
	sgdGo(p[n:], g[n:], b, c)
}

func sum8AVXKernel(v []float32, s *[8]float32) { sum8AVX(ptr(v), len(v), s) }

// ---- AVX-512 (whole rows, a last partial vector under a mask) ----

//go:noescape
func poolReLUArgAVX512(top, bot, y *float32, arg *uint8, n int)

//go:noescape
func poolArgGradAVX512(arg *uint8, dy, top, bot *float32, n int)

//go:noescape
func addScalarAVX512(v *float32, n int, s float32)

//go:noescape
func im2colPlaneAVX512(col, x *float32, h, w, ho, wo, k, pad int, masks *uint16)

//go:noescape
func col2imPlaneAVX512(dx, col *float32, h, w, ho, wo, k, pad int, masks *uint16)

//go:noescape
func sumF64AVX512(x *float32, n int) float64

//go:noescape
func sqDevF64AVX512(x *float32, n int, mu float64) float64

//go:noescape
func sumDotF64AVX512(d, e *float32, n int, out *[2]float64)

//go:noescape
func bnNormAVX512(x, out, xhat *float32, n int, c *[4]float64)

//go:noescape
func bnGradAVX512(dy, xhat, out *float32, n int, c *[3]float64)

func poolReLUArgAVX512Kernel(top, bot, y []float32, arg []uint8) {
	poolReLUArgAVX512(ptr(top), ptr(bot), ptr(y), ptr(arg), len(y))
}

func poolArgGradAVX512Kernel(arg []uint8, dy, top, bot []float32) {
	poolArgGradAVX512(ptr(arg), ptr(dy), ptr(top), ptr(bot), len(dy))
}

func addScalarAVX512Kernel(v []float32, a float32) { addScalarAVX512(ptr(v), len(v), a) }

func im2colAVX512Kernel(p *ConvPlane, col, x []float32) {
	im2colPlaneAVX512(ptr(col), ptr(x), p.H, p.W, p.Ho, p.Wo, p.K, p.Pad, ptr(p.im))
}

func col2imAVX512Kernel(p *ConvPlane, dx, col []float32) {
	col2imPlaneAVX512(ptr(dx), ptr(col), p.H, p.W, p.Ho, p.Wo, p.K, p.Pad, ptr(p.col))
}

func sumF64AVX512Kernel(x []float32) float64 { return sumF64AVX512(ptr(x), len(x)) }

func sqDevF64AVX512Kernel(x []float32, mu float64) float64 {
	return sqDevF64AVX512(ptr(x), len(x), mu)
}

func sumDotF64AVX512Kernel(d, e []float32) (s, sx float64) {
	var out [2]float64
	sumDotF64AVX512(ptr(d), ptr(e), len(d), &out)
	return out[0], out[1]
}

func bnNormAVX512Kernel(x, out, xhat []float32, c *[4]float64) {
	bnNormAVX512(ptr(x), ptr(out), ptr(xhat), len(x), c)
}

func bnGradAVX512Kernel(dy, xhat, out []float32, c *[3]float64) {
	bnGradAVX512(ptr(dy), ptr(xhat), ptr(out), len(dy), c)
}
