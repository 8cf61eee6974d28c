//go:build amd64 && !purego

package winograd

import (
	"unsafe"

	"github.com/gdist/gdist/internal/cpu"
)

// useAsm: the AVX-512 kernels run (Plan's methods check the sizes first).
var useAsm = cpu.X86.AVX512

// kargs is what every kernel reads (offsets fixed: kernels_amd64.s).
type kargs struct {
	t       *float32 // 0: transformed values, row xi at t + xi*tstride
	tstride int      // 8: elements
	plane   *float32 // 16: the channel's plane of image 0
	pstride int      // 24: elements from one image's plane to the next
	w       int      // 32: plane width
	groups  int      // 40: groups of 16 tiles
	sidx    *int32   // 48
	off     *int32   // 56
	masks   *uint16  // 64
	mbytes  int      // 72: bytes of masks per group
	tmp     *float32 // 80: 36 x 16 floats of scratch (F(4x4, 3x3))
	bias    float32  // 88
}

//go:noescape
func inputF2AVX512(a *kargs)

//go:noescape
func inputF4AVX512(a *kargs)

//go:noescape
func outputF2AVX512(a *kargs)

//go:noescape
func outputF4AVX512(a *kargs)

//go:noescape
func gradF2AVX512(a *kargs)

//go:noescape
func gradF4AVX512(a *kargs)

func (p *Plan) args(t []float32, tstride int, plane []float32, pstride int, tmp *[36 * 16]float32) kargs {
	return kargs{
		t: unsafe.SliceData(t), tstride: tstride,
		plane: unsafe.SliceData(plane), pstride: pstride,
		w: p.W, groups: p.PP / 16,
		sidx: unsafe.SliceData(p.sidx), off: unsafe.SliceData(p.off),
		masks: unsafe.SliceData(p.masks), mbytes: 2 * p.nmask,
		tmp: &tmp[0],
	}
}

func inputAsm(p *Plan, v []float32, vstride int, x []float32, stride int) {
	var tmp [36 * 16]float32
	a := p.args(v, vstride, x, stride, &tmp)
	if p.M == 2 {
		inputF2AVX512(&a)
	} else {
		inputF4AVX512(&a)
	}
}

func outputAsm(p *Plan, y []float32, stride int, mm []float32, mstride int, bias float32) {
	var tmp [36 * 16]float32
	a := p.args(mm, mstride, y, stride, &tmp)
	a.bias = bias
	if p.M == 2 {
		outputF2AVX512(&a)
	} else {
		outputF4AVX512(&a)
	}
}

func gradOutputAsm(p *Plan, q []float32, qstride int, dy []float32, stride int) {
	var tmp [36 * 16]float32
	a := p.args(q, qstride, dy, stride, &tmp)
	if p.M == 2 {
		gradF2AVX512(&a)
	} else {
		gradF4AVX512(&a)
	}
}

// SetAsm turns the assembly kernels off (false) or back on where the CPU
// has them, and returns whether they were on: for tests and benchmarks
// of the Go kernels; not while kernels run.
func SetAsm(on bool) bool {
	old := useAsm
	useAsm = on && cpu.X86.AVX512
	return old
}
