package reduce

import (
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/cpu"
)

const (
	numDTypes = int(comm.Float16) + 1
	numOps    = int(comm.BXor) + 1
)

// binKernel sets dst = a op b; the three have the same length, a whole
// number of elements. dst may be a or b but must not overlap them
// otherwise.
type binKernel func(dst, a, b []byte)

// divKernel divides every element of buf by n > 1.
type divKernel func(buf []byte, n int)

type kernelSet struct {
	name string
	bin  [numDTypes][numOps]binKernel
	div  [numDTypes]divKernel
}

// fillFrom completes s with base's kernels where s has none.
func (s *kernelSet) fillFrom(base *kernelSet) *kernelSet {
	for d := range s.bin {
		for o := range s.bin[d] {
			if s.bin[d][o] == nil {
				s.bin[d][o] = base.bin[d][o]
			}
		}
		if s.div[d] == nil {
			s.div[d] = base.div[d]
		}
	}
	return s
}

// kernelSets lists the sets this machine can run, narrowest first.
func kernelSets() []*kernelSet {
	return append([]*kernelSet{goKernels}, archKernelSets()...)
}

// active is the set the exported functions run: the widest, or the one
// GDIST_KERNELS picks (cpu.ChooseKernels).
var active = cpu.ChooseKernels(kernelSets(), func(s *kernelSet) string { return s.name })

// KernelSet names the reduce kernels in use ("avx512", "avx2" or "go").
func KernelSet() string { return active.name }

// Into sets dst = dst op src element-wise. len(src) >= len(dst), a whole
// number of dt elements (a trailing partial element is left alone);
// (dt, op) must have passed comm.CheckReduce. Avg reduces as Sum (Divide
// finishes it).
func Into(dt comm.DType, op comm.ReduceOp, dst, src []byte) {
	To(dt, op, dst, dst, src)
}

// To sets dst = a op b element-wise, with a in the role of Into's dst (it
// decides which NaN comes out of Sum and Prod when both are NaN, and which
// zero out of Min and Max of -0 and +0). a and b must be at least
// as long as dst. dst may be the same memory as a or b (in place) but must
// not overlap them otherwise.
func To(dt comm.DType, op comm.ReduceOp, dst, a, b []byte) {
	n := len(dst) / dt.Size() * dt.Size()
	if n == 0 {
		return
	}
	active.bin[dt][op](dst[:n], a[:n], b[:n])
}

// Divide divides every element of buf by n (the last step of Avg; integer
// division for integer types).
func Divide(dt comm.DType, buf []byte, n int) {
	if n == 1 || len(buf) < dt.Size() {
		return
	}
	active.div[dt](buf[:len(buf)/dt.Size()*dt.Size()], n)
}
