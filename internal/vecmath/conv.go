package vecmath

import "fmt"

// ConvPlane is one channel's geometry for a stride-1 convolution with a
// k x k kernel and zero padding pad on an h x w plane (ho x wo out), with
// the lane masks the AVX-512 im2col and col2im kernels read.
type ConvPlane struct {
	H, W, Ho, Wo, K, Pad int
	im, col              []uint16 // 64 bytes per entry: see im2colPlaneAVX512
}

// NewConvPlane returns the plane's geometry; nil when there is no output
// (Ho or Wo below 1) or the arguments make no sense.
func NewConvPlane(h, w, k, pad int) *ConvPlane {
	p := &ConvPlane{H: h, W: w, Ho: h + 2*pad - k + 1, Wo: w + 2*pad - k + 1, K: k, Pad: pad}
	if h < 1 || w < 1 || k < 1 || pad < 0 || p.Ho < 1 || p.Wo < 1 {
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

// valid is the range [lo, hi) of output columns ox whose input column
// ox+kj-Pad lies in the plane (empty: lo == hi).
func (p *ConvPlane) valid(kj int) (lo, hi int) {
	lo, hi = min(max(p.Pad-kj, 0), p.Wo), min(p.W+p.Pad-kj, p.Wo)
	return lo, max(hi, lo)
}

// Im2col unrolls one channel x (H x W) into col (K*K rows of Ho*Wo): row
// ki*K+kj, column oy*Wo+ox holds x[oy+ki-Pad, ox+kj-Pad], 0 outside the
// plane.
func (p *ConvPlane) Im2col(col, x []float32) {
	if len(x) < p.H*p.W || len(col) < p.K*p.K*p.Ho*p.Wo {
		panic(fmt.Sprintf("vecmath: im2col of a %dx%d plane, kernel %d: %d inputs, %d outputs", p.H, p.W, p.K, len(x), len(col)))
	}
	active.im2col(p, col[:p.K*p.K*p.Ho*p.Wo], x[:p.H*p.W])
}

// Col2im adds col (as Im2col makes it) back into one channel dx: its
// adjoint, each element of dx summing its taps in row order, as adding
// the rows one at a time does.
func (p *ConvPlane) Col2im(dx, col []float32) {
	if len(dx) < p.H*p.W || len(col) < p.K*p.K*p.Ho*p.Wo {
		panic(fmt.Sprintf("vecmath: col2im of a %dx%d plane, kernel %d: %d outputs, %d inputs", p.H, p.W, p.K, len(dx), len(col)))
	}
	active.col2im(p, dx[:p.H*p.W], col[:p.K*p.K*p.Ho*p.Wo])
}

// PoolArgGrad is one output row's gradient through PoolReLUArg: for i <
// len(dy), top[2i], top[2i+1], bot[2i], bot[2i+1] get dy[i] where arg[i]
// is 0, 1, 2, 3 respectively and 0 otherwise (all four for code 4). top
// and bot must hold 2*len(dy) values, arg len(dy).
func PoolArgGrad(arg []uint8, dy, top, bot []float32) {
	n := len(dy)
	if n == 0 {
		return
	}
	active.poolArgGrad(arg[:n], dy, top[:2*n], bot[:2*n])
}

// Sum32 is the float32 sum of v over eight running sums: s[j] the sum, in
// order, of v[8i+j] over the whole groups of 8, then the last partial
// group's values added to s[0], s[1], ..., and the result ((s0 + s1) +
// (s2 + s3)) + ((s4 + s5) + (s6 + s7)). (One running sum would wait on
// the adder's latency at every element; this is as accurate as float32
// allows for the lengths of a layer norm's rows or a channel.)
func Sum32(v []float32) float32 {
	var s [8]float32
	n := len(v) &^ 7
	if n > 0 {
		active.sum8(v[:n], &s)
	}
	for i, x := range v[n:] {
		s[i] += x
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// AddScalar adds a to every element of v.
func AddScalar(v []float32, a float32) {
	if len(v) > 0 {
		active.addScalar(v, a)
	}
}
