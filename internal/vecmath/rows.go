package vecmath

import "math"

// The row kernels of nn's transformer ops (rows_amd64.s, AVX2): bias adds
// and sums, layer norm's passes, the causal softmax and its gradient. Each
// is defined by its portable Go loop here (the ...Go functions), which the
// assembly reproduces bit for bit: the same float32 operations in the same
// order, no fused multiply-adds (a product that is rounded before an add
// is converted to float32 here so that no compiler fuses it), and sums
// over 8 running lanes in Sum32's order. The assembly does the whole
// groups of 8 and the Go loop the rest; it runs where the active set
// (KernelSet) is "avx2" or "avx512", so GDIST_KERNELS=go turns it off too.

// rowAsm says whether the row kernels use their assembly.
var rowAsm = haveRowAsm && active.name != "go"

// sumLanes32 is Sum32's combination of 8 running sums.
func sumLanes32(s *[8]float32) float32 {
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// AddTo sets dst[i] += a[i] for i < len(dst); a must be at least as long.
func AddTo(dst, a []float32) {
	a = a[:len(dst)]
	n := 0
	if rowAsm {
		if n = len(dst) &^ 7; n > 0 {
			addToAVX(rp(dst), rp(a), n)
		}
	}
	addToGo(dst[n:], a[n:])
}

func addToGo(dst, a []float32) {
	for i, v := range a {
		dst[i] += v
	}
}

// Add sets dst[i] = a[i] + b[i] for i < len(dst); a and b must be at
// least as long (dst may be a or b).
func Add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := 0
	if rowAsm {
		if n = len(dst) &^ 7; n > 0 {
			addAVX(rp(dst), rp(a), rp(b), n)
		}
	}
	addGo(dst[n:], a[n:], b[n:])
}

func addGo(dst, a, b []float32) {
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// Mul sets dst[i] = a[i] b[i] for i < len(dst); a and b must be at least
// as long (dst may be a or b).
func Mul(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := 0
	if rowAsm {
		if n = len(dst) &^ 7; n > 0 {
			mulAVX(rp(dst), rp(a), rp(b), n)
		}
	}
	mulGo(dst[n:], a[n:], b[n:])
}

func mulGo(dst, a, b []float32) {
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

// AddMulTo sets dst[i] += a[i] b[i] (the product rounded, then the sum)
// for i < len(dst); a and b must be at least as long.
func AddMulTo(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := 0
	if rowAsm {
		if n = len(dst) &^ 7; n > 0 {
			addMulToAVX(rp(dst), rp(a), rp(b), n)
		}
	}
	addMulToGo(dst[n:], a[n:], b[n:])
}

func addMulToGo(dst, a, b []float32) {
	for i := range dst {
		dst[i] += float32(a[i] * b[i])
	}
}

// Dot32 is the sum of a[i] b[i] for i < len(a) (b at least as long), each
// product rounded, summed in Sum32's order.
func Dot32(a, b []float32) float32 {
	b = b[:len(a)]
	var s [8]float32
	n := 0
	if rowAsm {
		if n = len(a) &^ 7; n > 0 {
			dotAVX(rp(a), rp(b), n, &s)
		}
	}
	dotGo(a[n:], b[n:], &s)
	return sumLanes32(&s)
}

// dotGo adds a[i] b[i] to the lanes, whole groups of 8 and then the rest
// from lane 0 on (called on the remainder, that is the tail alone).
func dotGo(a, b []float32, s *[8]float32) {
	for len(a) >= 8 {
		for j := 0; j < 8; j++ {
			s[j] += float32(a[j] * b[j])
		}
		a, b = a[8:], b[8:]
	}
	for i, x := range a {
		s[i] += float32(x * b[i])
	}
}

// SqDev32 is the sum of (v[i] - m)^2, each square rounded, in Sum32's
// order.
func SqDev32(v []float32, m float32) float32 {
	var s [8]float32
	n := 0
	if rowAsm {
		if n = len(v) &^ 7; n > 0 {
			sqDevAVX(rp(v), n, m, &s)
		}
	}
	sqDevGo(v[n:], m, &s)
	return sumLanes32(&s)
}

func sqDevGo(v []float32, m float32, s *[8]float32) {
	for len(v) >= 8 {
		for j := 0; j < 8; j++ {
			d := v[j] - m
			s[j] += float32(d * d)
		}
		v = v[8:]
	}
	for i, x := range v {
		d := x - m
		s[i] += float32(d * d)
	}
}

// LayerNormRow is layer norm's forward over one row: xhat[i] = (x[i] -
// mean) inv, y[i] = xhat[i] gamma[i] + beta[i] (the product rounded), for
// i < len(x); y, xhat, gamma and beta must be at least as long.
func LayerNormRow(y, xhat, x, gamma, beta []float32, mean, inv float32) {
	c := len(x)
	y, xhat, gamma, beta = y[:c], xhat[:c], gamma[:c], beta[:c]
	n := 0
	if rowAsm {
		if n = c &^ 7; n > 0 {
			lnRowAVX(rp(y), rp(xhat), rp(x), rp(gamma), rp(beta), n, mean, inv)
		}
	}
	lnRowGo(y[n:], xhat[n:], x[n:], gamma[n:], beta[n:], mean, inv)
}

func lnRowGo(y, xhat, x, gamma, beta []float32, mean, inv float32) {
	for j, v := range x {
		h := (v - mean) * inv
		xhat[j] = h
		y[j] = float32(h*gamma[j]) + beta[j]
	}
}

// LayerNormGradRow is layer norm's input gradient over one row of c =
// len(dy) values: g[i] = dy[i] gamma[i] (g is scratch, written), m1 =
// Sum32(g) invC, m2 = Dot32(g, xhat) invC, dx[i] = inv ((g[i] - m1) -
// xhat[i] m2). dx, g, gamma and xhat must be at least as long as dy.
func LayerNormGradRow(dx, g, dy, gamma, xhat []float32, inv, invC float32) {
	c := len(dy)
	dx, g, gamma, xhat = dx[:c], g[:c], gamma[:c], xhat[:c]
	var s [16]float32
	n := 0
	if rowAsm {
		if n = c &^ 7; n > 0 {
			lnGradSumsAVX(rp(g), rp(dy), rp(gamma), rp(xhat), n, &s)
		}
	}
	s1, s2 := (*[8]float32)(s[:8]), (*[8]float32)(s[8:])
	lnGradSumsGo(g[n:], dy[n:], gamma[n:], xhat[n:], s1, s2)
	m1 := sumLanes32(s1) * invC
	m2 := sumLanes32(s2) * invC
	if rowAsm && n > 0 {
		lnGradApplyAVX(rp(dx), rp(g), rp(xhat), n, m1, m2, inv)
	}
	lnGradApplyGo(dx[n:], g[n:], xhat[n:], m1, m2, inv)
}

func lnGradSumsGo(g, dy, gamma, xhat []float32, s1, s2 *[8]float32) {
	for j, v := range dy {
		g[j] = v * gamma[j]
	}
	sum8Lanes(g, s1)
	dotGo(g, xhat, s2)
}

// sum8Lanes adds v to the lanes as Sum32 does (whole groups of 8, then the
// rest from lane 0).
func sum8Lanes(v []float32, s *[8]float32) {
	for len(v) >= 8 {
		for j := 0; j < 8; j++ {
			s[j] += v[j]
		}
		v = v[8:]
	}
	for i, x := range v {
		s[i] += x
	}
}

func lnGradApplyGo(dx, g, xhat []float32, m1, m2, inv float32) {
	for j, v := range g {
		dx[j] = inv * (v - m1 - float32(xhat[j]*m2))
	}
}

// Softmax sets r to the softmax of r in float32: m the largest value, e[i]
// = Exp32(r[i] - m), r[i] = e[i] (1 / s) for s the sum of the e[i] in
// Sum32's order. A NaN in r makes the whole row NaN.
func Softmax(r []float32) {
	if len(r) == 0 {
		return
	}
	n := 0
	if rowAsm {
		n = len(r) &^ 7
	}
	var s [8]float32
	mx := r[0]
	if n > 0 {
		maxAVX(rp(r), n, &s)
		for _, v := range s {
			mx = max(mx, v)
		}
	}
	for _, v := range r[n:] {
		mx = max(mx, v)
	}
	s = [8]float32{}
	if rowAsm {
		expSubSumAVX(rp(r), len(r), mx, &expTable, &s) // the tail too, masked
	} else {
		expSubSumGo(r, mx, &s)
	}
	inv := 1 / sumLanes32(&s)
	if n > 0 {
		scaleAVX(rp(r), n, inv)
	}
	for j := range r[n:] {
		r[n+j] *= inv
	}
}

// expSubSumGo sets r[i] = Exp32(r[i] - mx) and adds them to the lanes as
// Sum32 does.
func expSubSumGo(r []float32, mx float32, s *[8]float32) {
	for i := range r {
		r[i] = Exp32(r[i] - mx)
	}
	sum8Lanes(r, s)
}

// SoftmaxGradRow is the softmax's gradient over one row of probabilities
// p: dot = Dot32(p, d), d[i] = (p[i] (d[i] - dot)) scale for i < len(p)
// (d at least as long; the rest of d untouched).
func SoftmaxGradRow(d, p []float32, scale float32) {
	d = d[:len(p)]
	dot := Dot32(p, d)
	n := 0
	if rowAsm {
		if n = len(p) &^ 7; n > 0 {
			softmaxGradAVX(rp(d), rp(p), n, dot, scale)
		}
	}
	softmaxGradGo(d[n:], p[n:], dot, scale)
}

func softmaxGradGo(d, p []float32, dot, scale float32) {
	for j, pv := range p {
		d[j] = float32(pv*(d[j]-dot)) * scale
	}
}

// Exp32 is e^y for y <= 0 in float32, within 2 ulp (relative error under
// 2.5e-7) on [-87, 0]; below -87 it is e^-87 (about 1.6e-38: near the end
// of float32's normal range), not 0. Cody-Waite reduction to r in
// [-ln2/2, ln2/2] with ln 2 split in two, a degree-7 Taylor polynomial,
// then the power of two by its bits; NaN gives NaN. Every product is
// rounded before its sum (the assembly's order, no fused multiply-adds).
func Exp32(y float32) float32 {
	const (
		log2e = 1.442695
		ln2hi = 0.693359375   // ln 2's leading bits: n ln2hi is exact
		ln2lo = -2.1219444e-4 // ln 2 - ln2hi
		round = 0x1.8p23      // adding it rounds to an integer (|v| < 2^22)
	)
	y = max(y, -87)
	nf := (float32(y*log2e) + round) - round
	r := (y - float32(nf*ln2hi)) - float32(nf*ln2lo)
	r2 := r * r
	r4 := r2 * r2
	a := (1 + r) + float32((1.0/2+float32(r*(1.0/6)))*r2)
	b := float32((float32(1.0/24+float32(r*(1.0/120))) + float32((1.0/720+float32(r*(1.0/5040)))*r2)) * r4)
	return (a + b) * math.Float32frombits(uint32(int32(nf)+127)<<23)
}

// expConsts is Exp32's constants for the assembly, each broadcast to 8
// lanes: -87, log2(e), 1.5 2^23, ln2hi, ln2lo, 1, 1/2, 1/6, 1/24, 1/120,
// 1/720, 1/5040, and 127 as an int32.
type expConsts [13][8]float32

var expTable = func() (c expConsts) {
	vals := [13]float32{-87, 1.442695, 0x1.8p23, 0.693359375, -2.1219444e-4, 1, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, math.Float32frombits(127)}
	for i, v := range vals {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	return c
}()
