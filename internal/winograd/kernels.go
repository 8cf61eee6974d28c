package winograd

import "github.com/gdist/gdist/internal/cpu"

// kernelSet is one implementation of Plan's transforms, called after
// Plan.check.
type kernelSet struct {
	name       string
	input      func(p *Plan, v []float32, vstride int, x []float32, stride int)
	output     func(p *Plan, y []float32, stride int, mm []float32, mstride int, bias float32)
	gradOutput func(p *Plan, q []float32, qstride int, dy []float32, stride int)
}

// kernelSets lists the sets this machine can run, narrowest first.
func kernelSets() []*kernelSet {
	return append([]*kernelSet{goKernels}, archKernelSets()...)
}

// active is the set Plan's methods run: the widest, or the one
// GDIST_KERNELS picks (cpu.ChooseKernels).
var active = cpu.ChooseKernels(kernelSets(), func(s *kernelSet) string { return s.name })

// KernelSet names the transforms in use: "avx512" or "go".
func KernelSet() string { return active.name }

// Vectorized reports whether the assembly transforms run. Without them
// the Go transforms are several times slower than the convolution's
// matrix products, and im2col wins.
func Vectorized() bool { return active != goKernels }

// SetAsm turns the assembly transforms off (false: the go set) or on
// (true: the widest set here, whatever GDIST_KERNELS says), and returns
// whether they were on: for tests and benchmarks of the Go transforms;
// not while transforms run.
func SetAsm(on bool) bool {
	old := Vectorized()
	sets := kernelSets()
	if active = sets[0]; on {
		active = sets[len(sets)-1]
	}
	return old
}
