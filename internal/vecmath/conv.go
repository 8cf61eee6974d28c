package vecmath

import "fmt"

// ConvPlane is one channel's geometry for a stride-1 convolution with a
// k x k kernel and zero padding pad on an h x w plane (ho x wo out), with
// the lane masks its im2col and col2im kernels read.
type ConvPlane struct {
	H, W, Ho, Wo, K, Pad int
	im, col              []uint16 // 64 bytes per entry: see im2colPlaneAVX512
}

// NewConvPlane returns the plane's geometry and masks; nil without
// AVX-512 (the caller loops) or when there is no output.
func NewConvPlane(h, w, k, pad int) *ConvPlane {
	p := &ConvPlane{H: h, W: w, Ho: h + 2*pad - k + 1, Wo: w + 2*pad - k + 1, K: k, Pad: pad}
	if !HasAVX512 || h < 1 || w < 1 || k < 1 || pad < 0 || p.Ho < 1 || p.Wo < 1 {
		return nil
	}
	// masks(n, in) is, for chunks of n columns and each kj, which lanes
	// have their column c below n and in(c, kj), then which are below n.
	masks := func(n int, in func(c, kj int) bool) []uint16 {
		nc := (n + 15) / 16
		m := make([]uint16, (k+1)*nc*32)
		for kj := 0; kj <= k; kj++ {
			for c := 0; c < n; c++ {
				if kj == k || in(c, kj) {
					m[(kj*nc+c/16)*32] |= 1 << (c % 16)
				}
			}
		}
		return m
	}
	p.im = masks(p.Wo, func(ox, kj int) bool { ix := ox + kj - pad; return ix >= 0 && ix < w })
	p.col = masks(w, func(ix, kj int) bool { ox := ix - kj + pad; return ox >= 0 && ox < p.Wo })
	return p
}

// Im2col unrolls one channel x (H x W) into col (K*K rows of Ho*Wo): row
// ki*K+kj, column oy*Wo+ox holds x[oy+ki-Pad, ox+kj-Pad], 0 outside the
// plane.
func (p *ConvPlane) Im2col(col, x []float32) {
	if len(x) < p.H*p.W || len(col) < p.K*p.K*p.Ho*p.Wo {
		panic(fmt.Sprintf("vecmath: im2col of a %dx%d plane, kernel %d: %d inputs, %d outputs", p.H, p.W, p.K, len(x), len(col)))
	}
	im2colKernel(col, x, p.H, p.W, p.Ho, p.Wo, p.K, p.Pad, p.im)
}

// Col2im adds col (as Im2col makes it) back into one channel dx: its
// adjoint, each element of dx summing its taps in row order, as adding
// the rows one at a time does.
func (p *ConvPlane) Col2im(dx, col []float32) {
	if len(dx) < p.H*p.W || len(col) < p.K*p.K*p.Ho*p.Wo {
		panic(fmt.Sprintf("vecmath: col2im of a %dx%d plane, kernel %d: %d outputs, %d inputs", p.H, p.W, p.K, len(dx), len(col)))
	}
	col2imKernel(dx, col, p.H, p.W, p.Ho, p.Wo, p.K, p.Pad, p.col)
}

// PoolArgGrad is one output row's gradient through PoolReLUArg: for i <
// len(dy), top[2i], top[2i+1], bot[2i], bot[2i+1] get dy[i] where arg[i]
// is 0, 1, 2, 3 respectively and 0 otherwise (all four for code 4). It
// reports whether it did (false without AVX-512). top and bot must hold
// 2*len(dy) values, arg len(dy).
func PoolArgGrad(arg []uint8, dy, top, bot []float32) bool {
	n := len(dy)
	if !HasAVX512 || n == 0 {
		return HasAVX512
	}
	poolArgGradKernel(arg[:n], dy, top[:2*n], bot[:2*n])
	return true
}

// Sum8 sets s[j] to the float32 sum, in order, of v[8i+j] over the first
// len(v) rounded down to a multiple of 8 elements (eight running sums),
// and reports whether it did (false without AVX).
func Sum8(v []float32, s *[8]float32) bool {
	if !HasAVX2FMA {
		return false
	}
	sum8Kernel(v, s)
	return true
}

// AddScalar adds a to every element of v, reporting whether it did (false
// without AVX-512).
func AddScalar(v []float32, a float32) bool {
	if !HasAVX512 {
		return false
	}
	if len(v) > 0 {
		addScalarKernel(v, a)
	}
	return true
}
