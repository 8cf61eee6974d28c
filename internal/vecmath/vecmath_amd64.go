//go:build amd64 && !purego

package vecmath

import (
	"unsafe"

	"github.com/gdist/gdist/internal/cpu"
)

//go:noescape
func geluAVX2(y, d, x *float32, n int, c *GELUConsts)

//go:noescape
func adamWAVX(pp, gg, mm, vv *float32, n int, c *AdamWConsts)

//go:noescape
func sgdAVX(pp, gg, bb *float32, n int, c *SGDConsts)

func sgdKernel(p, g, b []float32, c *SGDConsts) {
	var bp *float32
	if b != nil {
		bp = unsafe.SliceData(b)
	}
	sgdAVX(unsafe.SliceData(p), unsafe.SliceData(g), bp, len(p), c)
}

func adamWKernel(p, g, m, v []float32, c *AdamWConsts) {
	adamWAVX(unsafe.SliceData(p), unsafe.SliceData(g), unsafe.SliceData(m), unsafe.SliceData(v), len(p), c)
}

// HasAVX2FMA reports AVX2 and FMA, with the AVX state enabled by the OS:
// what the kernels need.
var HasAVX2FMA = cpu.X86.AVX2 && cpu.X86.FMA

func geluKernel(y, d, x []float32, c *GELUConsts) {
	var dp *float32
	if d != nil {
		dp = unsafe.SliceData(d[:len(x)])
	}
	geluAVX2(unsafe.SliceData(y), dp, unsafe.SliceData(x), len(x), c)
}

//go:noescape
func poolReLUArgAVX512(top, bot, y *float32, arg *uint8, n int)

// HasAVX512 reports AVX-512 (F, DQ, BW, VL) enabled by the OS.
var HasAVX512 = cpu.X86.AVX512

func poolReLUArgKernel(top, bot, y []float32, arg []uint8) {
	poolReLUArgAVX512(unsafe.SliceData(top), unsafe.SliceData(bot), unsafe.SliceData(y), unsafe.SliceData(arg), len(y))
}

//go:noescape
func im2colPlaneAVX512(col, x *float32, h, w, ho, wo, k, pad int, masks *uint16)

//go:noescape
func col2imPlaneAVX512(dx, col *float32, h, w, ho, wo, k, pad int, masks *uint16)

//go:noescape
func poolArgGradAVX512(arg *uint8, dy, top, bot *float32, n int)

//go:noescape
func sum8AVX(v *float32, n int, s *[8]float32)

//go:noescape
func addScalarAVX512(v *float32, n int, s float32)

func im2colKernel(col, x []float32, h, w, ho, wo, k, pad int, masks []uint16) {
	im2colPlaneAVX512(unsafe.SliceData(col), unsafe.SliceData(x), h, w, ho, wo, k, pad, unsafe.SliceData(masks))
}

func col2imKernel(dx, col []float32, h, w, ho, wo, k, pad int, masks []uint16) {
	col2imPlaneAVX512(unsafe.SliceData(dx), unsafe.SliceData(col), h, w, ho, wo, k, pad, unsafe.SliceData(masks))
}

func poolArgGradKernel(arg []uint8, dy, top, bot []float32) {
	poolArgGradAVX512(unsafe.SliceData(arg), unsafe.SliceData(dy), unsafe.SliceData(top), unsafe.SliceData(bot), len(dy))
}

func sum8Kernel(v []float32, s *[8]float32) { sum8AVX(unsafe.SliceData(v), len(v), s) }

func addScalarKernel(v []float32, s float32) { addScalarAVX512(unsafe.SliceData(v), len(v), s) }

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

func sumF64Kernel(x []float32) float64 { return sumF64AVX512(unsafe.SliceData(x), len(x)) }

func sqDevF64Kernel(x []float32, mu float64) float64 {
	return sqDevF64AVX512(unsafe.SliceData(x), len(x), mu)
}

func sumDotF64Kernel(d, e []float32, out *[2]float64) {
	sumDotF64AVX512(unsafe.SliceData(d), unsafe.SliceData(e), len(d), out)
}

func bnNormKernel(x, out, xhat []float32, c *[4]float64) {
	var xp *float32
	if xhat != nil {
		xp = unsafe.SliceData(xhat)
	}
	bnNormAVX512(unsafe.SliceData(x), unsafe.SliceData(out), xp, len(x), c)
}

func bnGradKernel(dy, xhat, out []float32, c *[3]float64) {
	bnGradAVX512(unsafe.SliceData(dy), unsafe.SliceData(xhat), unsafe.SliceData(out), len(dy), c)
}
