package vecmath

import "github.com/gdist/gdist/internal/cpu"

// kernelSet is one implementation of every kernel, with the exported
// functions' argument checks already done: slices have the lengths the
// kernel reads and writes.
type kernelSet struct {
	name string

	gelu        func(y, d, x []float32, c *GELUConsts) // len(x) a multiple of 8; d nil or len(x)
	adamW       func(p, g, m, v []float32, c *AdamWConsts)
	sgd         func(p, g, b []float32, c *SGDConsts) // b nil or len(p)
	poolReLUArg func(top, bot, y []float32, arg []uint8)
	poolArgGrad func(arg []uint8, dy, top, bot []float32)
	sum8        func(v []float32, s *[8]float32) // len(v) a multiple of 8
	addScalar   func(v []float32, a float32)
	sumF64      func(x []float32) float64
	sqDevF64    func(x []float32, mu float64) float64
	sumDotF64   func(d, e []float32) (s, sx float64)
	bnNorm      func(x, out, xhat []float32, c *[4]float64) // xhat nil or len(x)
	bnGrad      func(dy, xhat, out []float32, c *[3]float64)
	im2col      func(p *ConvPlane, col, x []float32)
	col2im      func(p *ConvPlane, dx, col []float32)
}

// kernelSets lists the sets this machine can run, narrowest first.
func kernelSets() []*kernelSet {
	return append([]*kernelSet{goKernels}, archKernelSets()...)
}

// active is the set the exported functions run: the widest, or the one
// GDIST_KERNELS picks (cpu.ChooseKernels).
var active = cpu.ChooseKernels(kernelSets(), func(s *kernelSet) string { return s.name })

// KernelSet names the kernels in use: "avx512", "avx2" or "go".
func KernelSet() string { return active.name }
