//go:build !amd64 || purego

package vecmath

// haveRowAsm: no assembly here; the row kernels are rows.go's Go loops.
const haveRowAsm = false

func rp(s []float32) *float32 { return &s[0] }

func unreachable() { panic("vecmath: row kernel assembly without the assembly") }

func addToAVX(d, a *float32, n int)                                           { unreachable() }
func addAVX(d, a, b *float32, n int)                                          { unreachable() }
func mulAVX(d, a, b *float32, n int)                                          { unreachable() }
func addMulToAVX(d, a, b *float32, n int)                                     { unreachable() }
func dotAVX(a, b *float32, n int, s *[8]float32)                              { unreachable() }
func sqDevAVX(v *float32, n int, m float32, s *[8]float32)                    { unreachable() }
func lnRowAVX(y, xh, x, gg, b *float32, n int, mean, inv float32)             { unreachable() }
func lnGradSumsAVX(gg, dy, gamma, xh *float32, n int, s *[16]float32)         { unreachable() }
func lnGradApplyAVX(dx, gg, xh *float32, n int, m1, m2, inv float32)          { unreachable() }
func maxAVX(v *float32, n int, s *[8]float32)                                 { unreachable() }
func expSubSumAVX(r *float32, n int, mx float32, c *expConsts, s *[8]float32) { unreachable() }
func scaleAVX(v *float32, n int, a float32)                                   { unreachable() }
func softmaxGradAVX(d, p *float32, n int, dot, scale float32)                 { unreachable() }

const haveTransposeAsm = false

func transpose8x8AVX(dst *float32, ldd int, src *float32, lds int) { unreachable() }

func expSubF64AVX(e *float64, v *float32, n int, m float64, c *expF64Consts) int {
	unreachable()
	return 0
}
