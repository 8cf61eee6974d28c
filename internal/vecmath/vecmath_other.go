//go:build !amd64 || purego

package vecmath

// HasAVX2FMA is false: the kernels are amd64 assembly.
const HasAVX2FMA = false

func geluKernel(y, d, x []float32, c *GELUConsts) { panic("vecmath: no GELU kernel") }

func adamWKernel(p, g, m, v []float32, c *AdamWConsts) { panic("vecmath: no AdamW kernel") }

func sgdKernel(p, g, b []float32, c *SGDConsts) { panic("vecmath: no SGD kernel") }

// HasAVX512 is false: the kernels are amd64 assembly.
const HasAVX512 = false

func poolReLUArgKernel(top, bot, y []float32, arg []uint8) { panic("vecmath: no pooling kernel") }

func im2colKernel(col, x []float32, h, w, ho, wo, k, pad int, masks []uint16) {
	panic("vecmath: no im2col kernel")
}

func col2imKernel(dx, col []float32, h, w, ho, wo, k, pad int, masks []uint16) {
	panic("vecmath: no col2im kernel")
}

func poolArgGradKernel(arg []uint8, dy, top, bot []float32) { panic("vecmath: no pooling kernel") }

func sum8Kernel(v []float32, s *[8]float32) { panic("vecmath: no sum kernel") }

func addScalarKernel(v []float32, s float32) { panic("vecmath: no add kernel") }

func sumF64Kernel(x []float32) float64                    { panic("vecmath: no batch-norm kernel") }
func sqDevF64Kernel(x []float32, mu float64) float64      { panic("vecmath: no batch-norm kernel") }
func sumDotF64Kernel(d, e []float32, out *[2]float64)     { panic("vecmath: no batch-norm kernel") }
func bnNormKernel(x, out, xhat []float32, c *[4]float64)  { panic("vecmath: no batch-norm kernel") }
func bnGradKernel(dy, xhat, out []float32, c *[3]float64) { panic("vecmath: no batch-norm kernel") }
