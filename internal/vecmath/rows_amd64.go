//go:build amd64 && !purego

package vecmath

import "unsafe"

// haveRowAsm: rows_amd64.s holds the row kernels (AVX2; run where the
// active set is avx2 or avx512, which implies AVX2).
const haveRowAsm = true

// rp is s's first element's address (s not empty).
func rp(s []float32) *float32 { return unsafe.SliceData(s) }

// The row kernels in rows_amd64.s: n a positive multiple of 8; each does
// what its ...Go twin in rows.go does, over whole groups of 8, storing the
// 8 running sums (not added to) where it has them.

//go:noescape
func addToAVX(d, a *float32, n int)

//go:noescape
func addAVX(d, a, b *float32, n int)

//go:noescape
func mulAVX(d, a, b *float32, n int)

//go:noescape
func addMulToAVX(d, a, b *float32, n int)

//go:noescape
func dotAVX(a, b *float32, n int, s *[8]float32)

//go:noescape
func sqDevAVX(v *float32, n int, m float32, s *[8]float32)

//go:noescape
func lnRowAVX(y, xh, x, gg, b *float32, n int, mean, inv float32)

//go:noescape
func lnGradSumsAVX(gg, dy, gamma, xh *float32, n int, s *[16]float32)

//go:noescape
func lnGradApplyAVX(dx, gg, xh *float32, n int, m1, m2, inv float32)

//go:noescape
func maxAVX(v *float32, n int, s *[8]float32)

// expSubSumAVX takes any n > 0 (the last partial group under a mask).
//
//go:noescape
func expSubSumAVX(r *float32, n int, mx float32, c *expConsts, s *[8]float32)

//go:noescape
func scaleAVX(v *float32, n int, a float32)

//go:noescape
func softmaxGradAVX(d, p *float32, n int, dot, scale float32)

// geluAVX512 is geluAVX2 on 16 lanes (gelu512_amd64.s): the avx512 set's
// GELU, bit for bit the avx2 set's.
//
//go:noescape
func geluAVX512(y, d, x *float32, n int, c *GELUConsts)

func geluAVX512Kernel(y, d, x []float32, c *GELUConsts) {
	geluAVX512(ptr(y), ptr(d), ptr(x), len(x), c)
}

// haveTransposeAsm: rows_amd64.s holds transpose8x8AVX.
const haveTransposeAsm = true

// transpose8x8AVX transposes one 8 x 8 block (strides in elements).
//
//go:noescape
func transpose8x8AVX(dst *float32, ldd int, src *float32, lds int)

// expSubF64AVX does ExpSubF64's groups of 4 (n a positive multiple of 4)
// until one has an argument outside [-700, 700] or NaN, and returns how
// many values it did (a multiple of 4).
//
//go:noescape
func expSubF64AVX(e *float64, v *float32, n int, m float64, c *expF64Consts) int
