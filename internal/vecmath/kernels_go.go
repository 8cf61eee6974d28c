package vecmath

import (
	"math"
	"unsafe"
)

// The "go" kernel set: every kernel in portable Go, the reference the
// assembly reproduces bit for bit (NaN payloads aside), and the set used
// on other architectures, with the purego build tag, and for the kernels
// a CPU's set lacks. Where the assembly rounds a product before adding it,
// the Go says so with a conversion (float32(a*b) + c): Go may fuse a*b + c
// into one multiply-add on some architectures otherwise. Where the
// assembly fuses, the Go calls fma32.

var goKernels = &kernelSet{
	name:        "go",
	gelu:        geluGo,
	adamW:       adamWGo,
	sgd:         sgdGo,
	poolReLUArg: poolReLUArgGo,
	poolArgGrad: poolArgGradGo,
	sum8:        sum8Go,
	addScalar:   addScalarGo,
	sumF64:      sumF64Go,
	sqDevF64:    sqDevF64Go,
	sumDotF64:   sumDotF64Go,
	bnNorm:      bnNormGo,
	bnGrad:      bnGradGo,
	im2col:      im2colGo,
	col2im:      col2imGo,
}

// fma32 is a*b + c rounded once to float32, as VFMADD*PS computes it. The
// product of two float32 values is exact in float64; the sum is rounded
// to float64 by round-to-odd (the error of the sum, exact by TwoSum, moves
// an even result one ulp toward it), after which rounding to float32 is
// correct: round-to-odd to 53 bits then to nearest at 24 bits is rounding
// to nearest at 24 bits, where plain double rounding could be one ulp off.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bv := s - p
	e := (p - (s - bv)) + (float64(c) - bv)
	if u := math.Float64bits(s); e != 0 && u&1 == 0 {
		if (e > 0) == (s > 0) {
			u++ // away from zero, toward the exact sum
		} else {
			u--
		}
		s = math.Float64frombits(u)
	}
	return float32(s)
}

// geluGo is the AVX2 kernel (gelu_amd64.s) element by element, operation
// for operation.
func geluGo(y, d, x []float32, c *GELUConsts) {
	k := func(i int) float32 { return c[i][0] }
	absMask := math.Float32bits(k(0))
	clamp, mhalf, lowest, log2e, ln2hi, ln2lo := k(1), k(2), k(3), k(4), k(5), k(6)
	one, bias, half, mk, invSqrt2Pi := k(13), int32(math.Float32bits(k(14))), k(15), k(16), k(27)
	for i, xv := range x {
		t := math.Float32frombits(math.Float32bits(xv) & absMask)
		if clamp < t { // VMINPS: a NaN t stays
			t = clamp
		}
		hi := t * t
		lo := fma32(t, t, -hi)
		a := hi * mhalf
		inRange := a >= lowest
		if !(a > lowest) { // VMAXPS
			a = lowest
		}
		n := float32(math.RoundToEven(float64(a * log2e)))
		r := fma32(-n, ln2hi, a)
		r = fma32(-n, ln2lo, r)
		p := k(7)
		for j := 8; j <= 12; j++ {
			p = fma32(p, r, k(j))
		}
		p = fma32(p, r, one)
		p = fma32(p, r, one) // e^r
		var pow2 float32
		if !math.IsNaN(float64(n)) {
			pow2 = math.Float32frombits(uint32(int32(n)+bias) << 23)
		} else { // VCVTPS2DQ gives 0x80000000
			pow2 = math.Float32frombits(uint32(-1<<31+bias) << 23)
		}
		e := p * pow2
		e = fma32(-e, lo*half, e) // e^(-hi/2) (1 - lo/2)
		if !inRange {
			e = 0
		}
		u := one / fma32(mk, t, one)
		s := k(26)
		for j := 25; j >= 17; j-- {
			s = fma32(s, u, k(j))
		}
		q := s * u * e // Phi(-|x|)
		phi := one - q
		if math.Signbit(float64(xv)) {
			phi = q
		}
		y[i] = xv * phi
		if d != nil {
			d[i] = fma32(xv*e, invSqrt2Pi, phi)
		}
	}
}

func adamWGo(p, g, m, v []float32, c *AdamWConsts) {
	lrwd, b1, c1, b2, c2, sqrtBC2, eps, step := c[0][0], c[1][0], c[2][0], c[3][0], c[4][0], c[5][0], c[6][0], c[7][0]
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i, pi := range p {
		pi -= float32(lrwd * pi)
		mi := float32(b1*m[i]) + float32(c1*g[i])
		vi := float32(b2*v[i]) + float32(c2*g[i]*g[i])
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))/sqrtBC2 + eps
		p[i] = pi - float32(step*mi)/denom
	}
}

func sgdGo(p, g, b []float32, c *SGDConsts) {
	wd, mu, lr := c[0][0], c[1][0], c[2][0]
	g = g[:len(p)]
	if b == nil {
		for i, pi := range p {
			d := g[i] + float32(wd*pi)
			p[i] = pi - float32(lr*d)
		}
		return
	}
	b = b[:len(p)]
	for i, pi := range p {
		d := g[i] + float32(wd*pi)
		bi := float32(mu*b[i]) + d
		b[i] = bi
		p[i] = pi - float32(lr*bi)
	}
}

// bits views x's values as their bits: copies that no float operation
// touches (a signalling NaN stays one).
func bits(x []float32) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}

// key32 is an int32 with the order of the float32 with bits b (its own
// inverse).
func key32(b uint32) int32 {
	v := int32(b)
	return v ^ (v>>31)&0x7fffffff
}

func poolReLUArgGo(top, bot, y []float32, arg []uint8) {
	tb, bb, yb := bits(top), bits(bot), bits(y)
	tb, bb, arg = tb[:2*len(yb)], bb[:2*len(yb)], arg[:len(yb)]
	for i := range yb {
		t0, t1, b0, b1 := key32(tb[2*i]), key32(tb[2*i+1]), key32(bb[2*i]), key32(bb[2*i+1])
		k := max(t0, t1, b0, b1, 0)
		a := uint8(3)
		if b0 == k {
			a = 2
		}
		if t1 == k {
			a = 1
		}
		if t0 == k {
			a = 0
		}
		if k == 0 {
			a = 4
		}
		yb[i], arg[i] = uint32(k), a
	}
}

func poolArgGradGo(arg []uint8, dy, top, bot []float32) {
	gb, tb, bb := bits(dy), bits(top), bits(bot)
	arg, tb, bb = arg[:len(gb)], tb[:2*len(gb)], bb[:2*len(gb)]
	for i, g := range gb {
		var w [4]uint32
		if a := arg[i]; a < 4 {
			w[a] = g
		}
		tb[2*i], tb[2*i+1], bb[2*i], bb[2*i+1] = w[0], w[1], w[2], w[3]
	}
}

func sum8Go(v []float32, s *[8]float32) {
	var t [8]float32
	for ; len(v) >= 8; v = v[8:] {
		w := v[:8:8]
		for j := range t {
			t[j] += w[j]
		}
	}
	*s = t
}

func addScalarGo(v []float32, a float32) {
	for i := range v {
		v[i] += a
	}
}

// The float64 sums follow bn_amd64.s: lane j of register r sums the
// values 8r+j of each block of 32 (16 for sumDotF64: registers 0 and 1),
// then lane j of register 0 those of the remaining whole groups of 8 and
// the last partial group; the registers are combined 0+1 (sumDotF64: 0+1
// of each sum), else (0+1) + (2+3), and the lanes as ((l0+l4) + (l2+l6))
// + ((l1+l5) + (l3+l7)).

// lanes8 is the final horizontal sum of eight lanes.
func lanes8(z *[8]float64) float64 {
	y0, y1, y2, y3 := z[0]+z[4], z[1]+z[5], z[2]+z[6], z[3]+z[7]
	return (y0 + y2) + (y1 + y3)
}

// sum4x8 sums f(i) over [0, n) in four registers of eight lanes, as
// bn_amd64.s's sumF64AVX512 and sqDevF64AVX512 do.
func sum4x8(n int, f func(i int) float64) float64 {
	var z [4][8]float64
	i := 0
	for ; i+32 <= n; i += 32 {
		for r := range z {
			for j := range z[r] {
				z[r][j] += f(i + 8*r + j)
			}
		}
	}
	for ; i < n; i += 8 {
		for j := 0; j < 8 && i+j < n; j++ {
			z[0][j] += f(i + j)
		}
	}
	for j := range z[0] {
		z[0][j] += z[1][j]
		z[2][j] += z[3][j]
		z[0][j] += z[2][j]
	}
	return lanes8(&z[0])
}

func sumF64Go(x []float32) float64 {
	return sum4x8(len(x), func(i int) float64 { return float64(x[i]) })
}

func sqDevF64Go(x []float32, mu float64) float64 {
	return sum4x8(len(x), func(i int) float64 { d := float64(x[i]) - mu; return d * d })
}

func sumDotF64Go(d, e []float32) (s, sx float64) {
	var z, w [2][8]float64 // sums of d, of d*e
	n := len(d)
	e = e[:n]
	i := 0
	for ; i+16 <= n; i += 16 {
		for r := range z {
			for j := range z[r] {
				v := float64(d[i+8*r+j])
				z[r][j] += v
				w[r][j] += v * float64(e[i+8*r+j])
			}
		}
	}
	for ; i < n; i += 8 {
		for j := 0; j < 8 && i+j < n; j++ {
			v := float64(d[i+j])
			z[0][j] += v
			w[0][j] += v * float64(e[i+j])
		}
	}
	for j := range z[0] {
		z[0][j] += z[1][j]
		w[0][j] += w[1][j]
	}
	return lanes8(&z[0]), lanes8(&w[0])
}

func bnNormGo(x, out, xhat []float32, c *[4]float64) {
	mu, is, g, b := c[0], c[1], c[2], c[3]
	out = out[:len(x)]
	for i, v := range x {
		xh := (float64(v) - mu) * is
		out[i] = float32(float64(g*xh) + b)
		if xhat != nil {
			xhat[i] = float32(xh)
		}
	}
}

func bnGradGo(dy, xhat, out []float32, c *[3]float64) {
	k, mdy, mdyx := c[0], c[1], c[2]
	xhat, out = xhat[:len(dy)], out[:len(dy)]
	for i, d := range dy {
		out[i] = float32(k * ((float64(d) - mdy) - float64(float64(xhat[i])*mdyx)))
	}
}

// taps calls fn for every tap (ki, kj) and output row oy in order, with c
// that row of col (Wo values) and, where input row iy = oy+ki-Pad lies in
// the plane and some of its columns do, in the stretch of x (row iy) that
// c[lo:hi] takes its values from (else nil).
func (p *ConvPlane) taps(col, x []float32, fn func(c, in []float32, lo, hi int)) {
	howo := p.Ho * p.Wo
	for ki := 0; ki < p.K; ki++ {
		for kj := 0; kj < p.K; kj++ {
			row := col[(ki*p.K+kj)*howo:][:howo]
			lo, hi := p.valid(kj)
			for oy := 0; oy < p.Ho; oy++ {
				var in []float32
				if iy := oy + ki - p.Pad; iy >= 0 && iy < p.H && lo < hi {
					in = x[iy*p.W+lo+kj-p.Pad:][:hi-lo]
				}
				fn(row[oy*p.Wo:][:p.Wo], in, lo, hi)
			}
		}
	}
}

func im2colGo(p *ConvPlane, col, x []float32) {
	p.taps(col, x, func(c, in []float32, lo, hi int) {
		if in == nil {
			clear(c)
			return
		}
		clear(c[:lo])
		copy(c[lo:hi], in)
		clear(c[hi:])
	})
}

// col2imGo adds the taps into dx one row of col at a time, in row order.
func col2imGo(p *ConvPlane, dx, col []float32) {
	p.taps(col, dx, func(c, in []float32, lo, hi int) {
		if in == nil {
			return
		}
		for i, v := range c[lo:hi] {
			in[i] += v
		}
	})
}
