//go:build amd64 && !purego

package winograd

import (
	"unsafe"

	"github.com/gdist/gdist/internal/cpu"
)

// archKernelSets returns the "avx512" set (kernels_amd64.s) where the CPU
// has AVX-512 F, DQ, BW and VL.
func archKernelSets() []*kernelSet {
	if !cpu.X86.AVX512 {
		return nil
	}
	return []*kernelSet{{name: "avx512", input: inputAsm, output: outputAsm, gradOutput: gradOutputAsm}}
}

// kargs is what every kernel reads (offsets fixed: kernels_amd64.s).
type kargs struct {
	t       *float32 // 0: transformed values, row xi at t + xi*tstride
	tstride int      // 8: elements
	plane   *float32 // 16: one plane (split, join)
	_       int      // 24
	h, w    int      // 32, 40: the plane's
	scr     *float32 // 48: the phase scratch (image 0's for the transforms)
	_       int      // 56
	qw      int      // 64: Plan.QW
	groups  int      // 72: groups of 16 tiles
	segs    *int32   // 80
	segEnd  *int32   // 88
	masks   *uint16  // 96: column masks, M per q-block
	_       int      // 104
	rows    int      // 112: scratch rows (split)
	shift   int      // 120: 1 for the input's halo, 0 for dy (split)
	tmp     *float32 // 128: 36 x 16 floats (F(4x4, 3x3))
	idx     *int32   // 136: wgIdx
	bias    float32  // 144 (join)
}

// wgIdx: the even and odd lanes of two registers (a, b: a0 a2 ... b14,
// a1 a3 ... b15), and their low and high halves interleaved (a0 b0 a1 b1
// ... a7 b7, a8 b8 ... a15 b15), as VPERMT2PS indices.
var wgIdx = func() (x [4][16]int32) {
	for l := int32(0); l < 16; l++ {
		x[0][l], x[1][l] = 2*l, 2*l+1
		x[2][l] = l/2 + 16*(l%2)
		x[3][l] = 8 + l/2 + 16*(l%2)
	}
	return x
}()

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

//go:noescape
func deint2AVX512(a *kargs)

//go:noescape
func deint4AVX512(a *kargs)

//go:noescape
func inter2AVX512(a *kargs)

//go:noescape
func inter4AVX512(a *kargs)

func (p *Plan) targs(t []float32, tstride int) kargs {
	if p.tmp == nil {
		p.tmp = make([]float32, 36*16)
	}
	return kargs{
		t: unsafe.SliceData(t), tstride: tstride,
		scr: unsafe.SliceData(p.scr), qw: p.QW, groups: p.PP / 16,
		segs: unsafe.SliceData(p.segs), segEnd: unsafe.SliceData(p.segEnd),
		tmp: &p.tmp[0],
	}
}

// split puts the N planes at x[s*stride:] into the scratch by phase.
func (p *Plan) split(x []float32, stride int, masks []uint16, shift int) {
	a := kargs{
		h: p.H, w: p.W, qw: p.QW, masks: unsafe.SliceData(masks),
		rows: p.M*p.TH + 2, shift: shift, idx: &wgIdx[0][0],
	}
	for s := 0; s < p.N; s++ {
		a.plane = unsafe.SliceData(x[s*stride:])
		a.scr = unsafe.SliceData(p.scr[s*p.splane:])
		if p.M == 2 {
			deint2AVX512(&a)
		} else {
			deint4AVX512(&a)
		}
	}
}

func inputAsm(p *Plan, v []float32, vstride int, x []float32, stride int) {
	p.split(x, stride, p.inMask, 1)
	a := p.targs(v, vstride)
	if p.M == 2 {
		inputF2AVX512(&a)
	} else {
		inputF4AVX512(&a)
	}
}

func gradOutputAsm(p *Plan, q []float32, qstride int, dy []float32, stride int) {
	p.split(dy, stride, p.dyMask, 0)
	a := p.targs(q, qstride)
	if p.M == 2 {
		gradF2AVX512(&a)
	} else {
		gradF4AVX512(&a)
	}
}

func outputAsm(p *Plan, y []float32, stride int, mm []float32, mstride int, bias float32) {
	a := p.targs(mm, mstride)
	if p.M == 2 {
		outputF2AVX512(&a)
	} else {
		outputF4AVX512(&a)
	}
	j := kargs{h: p.H, w: p.W, qw: p.QW, masks: unsafe.SliceData(p.outMask), idx: &wgIdx[0][0], bias: bias}
	for s := 0; s < p.N; s++ {
		j.plane = unsafe.SliceData(y[s*stride:])
		j.scr = unsafe.SliceData(p.scr[s*p.splane:])
		if p.M == 2 {
			inter2AVX512(&j)
		} else {
			inter4AVX512(&j)
		}
	}
}
