// Package vecmath holds vectorised kernels for nn and optim (Go assembly,
// which a package that uses cgo, as nn does, cannot hold itself), with a
// report of whether this CPU runs them.
package vecmath

// GELUConsts is the GELU kernel's constants, each broadcast to 8 lanes, in
// this order: the |x| mask (bits 0x7fffffff), the clamp of |x| (20), -0.5,
// the lowest exponent (-87), log2(e), ln 2's leading bits and the rest, the
// exp polynomial's coefficients from degree 7 down to 2 (1/7! ... 1/2), 1,
// the exponent bias 127 (as an int32's bits), 0.5, the Mills-ratio fit's
// k and its 10 coefficients (degree 0 first), 1/sqrt(2 pi).
type GELUConsts [28][8]float32

// GELU sets y[i] = x[i] Phi(x[i]) and, if d is not nil, d[i] = Phi(x[i]) +
// x[i] phi(x[i]), for the first len(x) rounded down to a multiple of 8
// elements, and returns how many it did: 0 where the kernel does not run
// (no AVX2 and FMA, or not amd64). y and d must be at least as long as x.
func GELU(y, d, x []float32, c *GELUConsts) int {
	n := len(x) &^ 7
	if !HasAVX2FMA || n == 0 {
		return 0
	}
	geluKernel(y[:n], d, x[:n], c)
	return n
}

// AdamWConsts is the AdamW kernel's constants, each broadcast to 8 lanes:
// lr x weight decay, beta1, 1 - beta1, beta2, 1 - beta2, sqrt(1 -
// beta2^t), eps, lr / (1 - beta1^t).
type AdamWConsts [8][8]float32

// AdamW is one decoupled-weight-decay Adam step over the first len(p)
// rounded down to a multiple of 8 elements, each computed exactly as
// optim.Adam's scalar loop does (the same float32 operations in the same
// order, no fused multiply-adds: bit-identical results):
//
//	p -= lrwd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g
//	p -= step m / (sqrt(v) / sqrtBC2 + eps)
//
// It returns how many elements it did: 0 where the kernel does not run.
// g, m and v must be at least as long as p.
func AdamW(p, g, m, v []float32, c *AdamWConsts) int {
	n := len(p) &^ 7
	if !HasAVX2FMA || n == 0 {
		return 0
	}
	adamWKernel(p[:n], g[:n], m[:n], v[:n], c)
	return n
}

// SGDConsts is the SGD kernel's constants, each broadcast to 8 lanes:
// weight decay, momentum, learning rate.
type SGDConsts [3][8]float32

// SGD is one step of SGD over the first len(p) rounded down to a multiple
// of 8 elements, each computed exactly as optim.SGD's scalar loop does
// (the same float32 operations in the same order, no fused multiply-adds:
// bit-identical results):
//
//	d = g + wd p; with momentum (b not nil): b = mu b + d, p -= lr b;
//	without: p -= lr d
//
// It returns how many elements it did: 0 where the kernel does not run.
// g and b (if not nil) must be at least as long as p.
func SGD(p, g, b []float32, c *SGDConsts) int {
	n := len(p) &^ 7
	if !HasAVX2FMA || n == 0 {
		return 0
	}
	if b != nil {
		b = b[:n]
	}
	sgdKernel(p[:n], g[:n], b, c)
	return n
}

// PoolReLUArg is one output row of a 2x2 max-pool followed by ReLU, as
// nn's fused conv+ReLU+pool computes it, for all len(y) outputs: y[i] is the largest of top[2i],
// top[2i+1], bot[2i], bot[2i+1] and +0 (compared by their
// order-preserving integer keys, so bit for bit what nn's scalar loop
// gives), arg[i] which of the four it is (0-3, the first in that order
// among equals) or 4 when y[i] is +0. It returns how many outputs it did:
// 0 where the kernel does not run (no AVX-512). top and bot must hold
// 2*len(y) values, arg len(y).
func PoolReLUArg(top, bot, y []float32, arg []uint8) int {
	n := len(y)
	if !HasAVX512 || n == 0 {
		return 0
	}
	poolReLUArgKernel(top[:2*n], bot[:2*n], y[:n], arg[:n])
	return n
}
