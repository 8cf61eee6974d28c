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
