package vecmath

import "math"

// GELUConsts is the GELU kernel's constants, each broadcast to 8 lanes, in
// this order: the |x| mask (bits 0x7fffffff), the clamp of |x| (20), -0.5,
// the lowest exponent (-87), log2(e), ln 2's leading bits and the rest, the
// exp polynomial's coefficients from degree 7 down to 2 (1/7! ... 1/2), 1,
// the exponent bias 127 (as an int32's bits), 0.5, the Mills-ratio fit's
// k and its 10 coefficients (degree 0 first), 1/sqrt(2 pi).
type GELUConsts [28][8]float32

// NewGELUConsts returns the GELU kernel's constants with the Mills-ratio
// fit Phi(-t) = phi(t) u S(u), u = 1/(1 + k t), S(u) = s[0] + s[1] u + ...
// + s[9] u^9 (rounded to float32).
func NewGELUConsts(k float32, s [10]float64) *GELUConsts {
	vals := []float32{
		math.Float32frombits(0x7fffffff), // |x| mask
		20,                               // |x| clamp: Phi(-20) is 0 in float32
		-0.5,
		-87, // e^-87: the float32 range's end
		math.Log2E,
		0.693359375,   // ln 2, leading bits (n ln2hi is exact)
		-2.1219444e-4, // ln 2 - ln2hi
		1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5,
		1,
		math.Float32frombits(127), // exponent bias, as an int32
		0.5,
		k,
	}
	for _, v := range s {
		vals = append(vals, float32(v))
	}
	vals = append(vals, 0.3989422804014327) // 1/sqrt(2 pi)
	c := new(GELUConsts)
	for i, v := range vals {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	return c
}

// GELU sets y[i] = x[i] Phi(x[i]) and, if d is not nil, d[i] = Phi(x[i]) +
// x[i] phi(x[i]), for the first len(x) rounded down to a multiple of 8
// elements, and returns how many it did (the caller does the rest its own
// way). It computes in float32: Phi(-|x|) = exp(-x^2/2) u S(u) with u =
// 1/(1 + k |x|) (a Mills-ratio fit), exp by Cody-Waite reduction and a
// degree-7 polynomial, x^2 carried as hi + lo, with fused multiply-adds
// (about 4 ulp). y and d must be at least as long as x.
func GELU(y, d, x []float32, c *GELUConsts) int {
	n := len(x) &^ 7
	if n == 0 {
		return 0
	}
	if d != nil {
		d = d[:n]
	}
	active.gelu(y[:n], d, x[:n], c)
	return n
}

// AdamWConsts is the AdamW kernel's constants, each broadcast to 8 lanes:
// lr x weight decay, beta1, 1 - beta1, beta2, 1 - beta2, sqrt(1 -
// beta2^t), eps, lr / (1 - beta1^t).
type AdamWConsts [8][8]float32

// AdamW is one decoupled-weight-decay Adam step over p, each element
// computed with these float32 operations in this order, no fused
// multiply-adds:
//
//	p -= lrwd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g
//	p -= step m / (float32(sqrt(v)) / sqrtBC2 + eps)
//
// g, m and v must be at least as long as p.
func AdamW(p, g, m, v []float32, c *AdamWConsts) {
	n := len(p)
	active.adamW(p, g[:n], m[:n], v[:n], c)
}

// SGDConsts is the SGD kernel's constants, each broadcast to 8 lanes:
// weight decay, momentum, learning rate.
type SGDConsts [3][8]float32

// SGD is one step of SGD over p, each element computed with these float32
// operations in this order, no fused multiply-adds:
//
//	d = g + wd p; with momentum (b not nil): b = mu b + d, p -= lr b;
//	without: p -= lr d
//
// g and b (if not nil) must be at least as long as p.
func SGD(p, g, b []float32, c *SGDConsts) {
	n := len(p)
	if b != nil {
		b = b[:n]
	}
	active.sgd(p, g[:n], b, c)
}

// PoolReLUArg is one output row of a 2x2 max-pool followed by ReLU, for
// all len(y) outputs: y[i] is the largest of top[2i], top[2i+1], bot[2i],
// bot[2i+1] and +0, compared by their order-preserving integer keys (a
// NaN with the sign bit clear is above +Inf, one with it set below -Inf),
// and arg[i] which of the four it is (0-3, the first in that order among
// equals) or 4 when y[i] is +0. top and bot must hold 2*len(y) values,
// arg len(y).
func PoolReLUArg(top, bot, y []float32, arg []uint8) {
	n := len(y)
	if n == 0 {
		return
	}
	active.poolReLUArg(top[:2*n], bot[:2*n], y, arg[:n])
}
