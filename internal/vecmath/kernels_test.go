package vecmath

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// The kernel tests run every kernel set this machine has (the go set
// alone with -tags purego or off amd64) through the exported functions,
// against the kernels' definitions and, where a definition leaves the
// order of operations open (the float64 sums, GELU), against the go set,
// bit for bit.

// eachSet runs fn with each kernel set active in turn.
func eachSet(t *testing.T, fn func(t *testing.T)) {
	for _, s := range kernelSets() {
		t.Run(s.name, func(t *testing.T) {
			old := active
			active = s
			defer func() { active = old }()
			fn(t)
		})
	}
}

// sameBits reports whether a and b are equal bit for bit, any NaN
// matching any NaN: which NaN comes out of an operation on two differs
// between the assembly and Go.
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// sum32Def is Sum32 as its documentation defines it.
func sum32Def(v []float32) float32 {
	var s [8]float32
	i := 0
	for ; i+8 <= len(v); i += 8 {
		for j := range s {
			s[j] += v[i+j]
		}
	}
	for j := 0; i+j < len(v); j++ {
		s[j] += v[i+j]
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// geluConsts is the constants nn passes (nn/activation.go's Mills-ratio
// fit).
var geluConsts = NewGELUConsts(0.24, [10]float64{
	0.09574191954997546, 0.0958599210153723, 0.08891431435376891,
	0.08784878790636118, 0.02791988337131288, 0.14186521950961223,
	-0.1447440379111764, 0.20581896739665398, -0.1247755696109543,
	0.025550596009470215,
})

// geluInputs are values of interest and random ones of every magnitude.
func geluInputs(r *rand.Rand, n int) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, -0.5, 3, -3, 5.5, -5.5, 13, -13, 19.99, 20, -20, 21, -21,
		1e-20, -1e-20, 1e-45, -1e-45, 1e38, -1e38, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	x := make([]float32, n)
	for i := range x {
		switch {
		case i < len(special):
			x[i] = special[i]
		case i%3 == 0:
			x[i] = math.Float32frombits(r.Uint32())
		default:
			x[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.Intn(12)-4)))
		}
	}
	return x
}

// TestGELU, on every kernel set: the go set's values bit for bit (NaN for
// NaN), on the whole groups of 8 only (the rest untouched), with and
// without the derivative; and the go set within its documented accuracy
// of x Phi(x) and Phi(x) + x phi(x) from math.Erfc.
func TestGELU(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, n := range []int{0, 7, 8, 9, 64, 1003} {
		x := geluInputs(r, n)
		wantY, wantD := make([]float32, n), make([]float32, n)
		m := n &^ 7
		goKernels.gelu(wantY[:m], wantD[:m], x[:m], geluConsts)
		eachSet(t, func(t *testing.T) {
			y, yAll := guarded(n, 8, func(int) float32 { return 7 })
			d, dAll := guarded(n, 8, func(int) float32 { return 7 })
			y2 := make([]float32, n)
			if got := GELU(y, d, x, geluConsts); got != m {
				t.Fatalf("n %d: did %d", n, got)
			}
			GELU(y2, nil, x, geluConsts)
			checkGuards(t, yAll, 8, "GELU y")
			checkGuards(t, dAll, 8, "GELU d")
			for i := range x {
				if i >= m {
					if y[i] != 7 || d[i] != 7 {
						t.Fatalf("n %d: element %d past the groups of 8 written", n, i)
					}
					continue
				}
				if !sameBits(y[i], wantY[i]) || !sameBits(d[i], wantD[i]) || !sameBits(y2[i], wantY[i]) {
					t.Fatalf("n %d: gelu(%g) = %g, %g (%g without d); go set %g, %g", n, x[i], y[i], d[i], y2[i], wantY[i], wantD[i])
				}
			}
		})
	}
	// accuracy of the go set (the assembly equals it)
	x := make([]float32, 0, 1<<16)
	for v := -14.0; v < 14; v += 1.0 / 2048 {
		x = append(x, float32(v))
	}
	y, d := make([]float32, len(x)), make([]float32, len(x))
	goKernels.gelu(y, d, x, geluConsts)
	var ey, ed float64
	for i, v32 := range x {
		v := float64(v32)
		p := math.Erfc(-v/math.Sqrt2) / 2
		wy, wd := v*p, p+v*math.Exp(-v*v/2)/math.Sqrt(2*math.Pi)
		ey = max(ey, math.Abs(float64(y[i])-wy)/max(1, math.Abs(wy)))
		ed = max(ed, math.Abs(float64(d[i])-wd)/max(1, math.Abs(wd)))
	}
	t.Logf("go set: max error %.3g (gelu), %.3g (gelu')", ey, ed)
	if ey > 2.5e-7 || ed > 2.5e-7 {
		t.Errorf("go set: max error %.3g (gelu), %.3g (gelu'), want <= 2.5e-7", ey, ed)
	}
}

// TestFMA32: fma32 is a*b + c rounded once to nearest even, on random
// operands and on the hard cases: a*b exactly halfway between two float32
// values and c far smaller, where rounding to float64 first lands on the
// tie and rounding again goes the wrong way half the time.
func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	check := func(a, b, c float32) {
		t.Helper()
		got := fma32(a, b, c)
		if math.IsInf(float64(got), 0) {
			return
		}
		// the exact sum as hi + lo (TwoSum), compared with the midpoints
		// between got and its neighbours
		p := float64(a) * float64(b)
		hi := p + float64(c)
		bv := hi - p
		lo := (p - (hi - bv)) + (float64(c) - bv)
		dn, up := math.Nextafter32(got, float32(math.Inf(-1))), math.Nextafter32(got, float32(math.Inf(1)))
		cmp := func(m float64) int { // the sign of (hi + lo) - m
			d := (hi - m) + lo
			switch {
			case d > 0:
				return 1
			case d < 0:
				return -1
			}
			return 0
		}
		below, above := cmp((float64(dn)+float64(got))/2), cmp((float64(got)+float64(up))/2)
		even := math.Float32bits(got)&1 == 0
		if below < 0 || above > 0 || (below == 0 || above == 0) && !even {
			t.Fatalf("fma32(%g, %g, %g) = %g (%x): not the exact sum rounded to nearest even", a, b, c, got, math.Float32bits(got))
		}
	}
	for i := 0; i < 100000; i++ {
		a, b := float32(r.NormFloat64()), float32(r.NormFloat64())
		check(a, b, float32(r.NormFloat64()))
		check(a, b, -a*b)
		// a*b a tie: odd 13-bit integers whose product has 25 bits
		var x, y uint32
		for {
			x, y = uint32(r.Intn(1<<13))|1|1<<12, uint32(r.Intn(1<<13))|1|1<<12
			if p := x * y; p >= 1<<24 && p < 1<<25 {
				break
			}
		}
		a, b = float32(x), float32(y)
		c := float32(math.Ldexp(1, -r.Intn(40)))
		check(a, b, c)
		check(a, b, -c)
		check(-a, b, c)
	}
}

// adamWDef is the AdamW update as AdamW's documentation states it.
func adamWDef(p, g, m, v []float32, c *AdamWConsts) {
	lrwd, b1, c1, b2, c2, sqrtBC2, eps, step := c[0][0], c[1][0], c[2][0], c[3][0], c[4][0], c[5][0], c[6][0], c[7][0]
	for i := range p {
		p[i] -= float32(lrwd * p[i])
		m[i] = float32(b1*m[i]) + float32(c1*g[i])
		v[i] = float32(b2*v[i]) + float32(float32(c2*g[i])*g[i])
		denom := float32(math.Sqrt(float64(v[i])))/sqrtBC2 + eps
		p[i] -= float32(step*m[i]) / denom
	}
}

// adamWConsts are the kernel's constants for step t, as optim sets them.
func adamWConsts(lr, b1, b2, eps, wd float64, t int) *AdamWConsts {
	bc1 := 1 - math.Pow(b1, float64(t))
	bc2 := 1 - math.Pow(b2, float64(t))
	f1, f2, flr := float32(b1), float32(b2), float32(lr)
	c := new(AdamWConsts)
	for i, x := range [...]float32{flr * float32(wd), f1, 1 - f1, f2, 1 - f2, float32(math.Sqrt(bc2)), float32(eps), float32(lr / bc1)} {
		for j := range c[i] {
			c[i][j] = x
		}
	}
	return c
}

// sgdDef is the SGD update as SGD's documentation states it.
func sgdDef(p, g, b []float32, c *SGDConsts) {
	wd, mu, lr := c[0][0], c[1][0], c[2][0]
	for i := range p {
		d := g[i] + float32(wd*p[i])
		if b != nil {
			b[i] = float32(mu*b[i]) + d
			d = b[i]
		}
		p[i] -= float32(lr * d)
	}
}

func sgdConsts(lr, mu, wd float32) *SGDConsts {
	c := new(SGDConsts)
	for i, x := range [...]float32{wd, mu, lr} {
		for j := range c[i] {
			c[i][j] = x
		}
	}
	return c
}

// stepInputs are a step's parameters and gradients for the optimizer
// tests (the old optim tests' values).
func stepInputs(n, step int) (p, g []float32) {
	p, g = make([]float32, n), make([]float32, n)
	for i := range p {
		p[i] = float32(math.Sin(float64(i)*0.7)) * 0.5
		g[i] = float32(math.Cos(float64(i*step)*1.3)) * float32(step)
	}
	return p, g
}

// TestAdamW, on every kernel set (moved from optim's
// TestAdamWVectorisedBitIdentical): the update as documented, bit for
// bit, over several steps and lengths with partial groups of 8, nothing
// written past p, m or v.
func TestAdamW(t *testing.T) {
	eachSet(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 8, 9, 64, 1003} {
			p1, _ := stepInputs(n, 1)
			p, pAll := guarded(n, 8, func(i int) float32 { return p1[i] })
			m, mAll := guarded(n, 8, func(int) float32 { return 0 })
			v, vAll := guarded(n, 8, func(int) float32 { return 0 })
			p2, m2, v2 := append([]float32(nil), p...), make([]float32, n), make([]float32, n)
			for step := 1; step <= 5; step++ {
				_, g := stepInputs(n, step)
				c := adamWConsts(3e-3, 0.9, 0.999, 1e-8, 0.01, step)
				AdamW(p, append(g, 99), m, v, c)
				adamWDef(p2, g, m2, v2, c)
			}
			for _, a := range [][]float32{pAll, mAll, vAll} {
				checkGuards(t, a, 8, "AdamW")
			}
			for i := range p {
				if math.Float32bits(p[i]) != math.Float32bits(p2[i]) || m[i] != m2[i] || v[i] != v2[i] {
					t.Fatalf("n %d: element %d: p %v m %v v %v, defined %v %v %v", n, i, p[i], m[i], v[i], p2[i], m2[i], v2[i])
				}
			}
		}
	})
}

// TestSGD, on every kernel set (moved from optim's
// TestSGDVectorisedBitIdentical): with and without momentum and weight
// decay, the update as documented, bit for bit, over several steps and
// lengths with partial groups of 8, nothing written past p or b.
func TestSGD(t *testing.T) {
	eachSet(t, func(t *testing.T) {
		for _, mom := range []float32{0, 0.9} {
			for _, wd := range []float32{0, 1e-4} {
				for _, n := range []int{0, 1, 7, 8, 9, 64, 1003} {
					p1, _ := stepInputs(n, 1)
					p, pAll := guarded(n, 8, func(i int) float32 { return p1[i] })
					b, bAll := guarded(n, 8, func(int) float32 { return 0 })
					p2, b2 := append([]float32(nil), p...), make([]float32, n)
					if mom == 0 {
						b, b2 = nil, nil
					}
					c := sgdConsts(0.05, mom, wd)
					for step := 1; step <= 5; step++ {
						_, g := stepInputs(n, step)
						SGD(p, g, b, c)
						sgdDef(p2, g, b2, c)
					}
					checkGuards(t, pAll, 8, "SGD p")
					checkGuards(t, bAll, 8, "SGD b")
					for i := range p {
						if math.Float32bits(p[i]) != math.Float32bits(p2[i]) || b != nil && b[i] != b2[i] {
							t.Fatalf("momentum %v wd %v n %d: element %d: p %v, defined %v", mom, wd, n, i, p[i], p2[i])
						}
					}
				}
			}
		}
	})
}

// floats reads data as float32 values (4 bytes each, little-endian).
func floats(data []byte) []float32 {
	x := make([]float32, len(data)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return x
}

// compareSets runs fn on every kernel set and fails where a set's output
// (what fn returns) differs from the go set's, NaN matching any NaN.
func compareSets(t *testing.T, what string, fn func() []float32) {
	t.Helper()
	old := active
	defer func() { active = old }()
	active = goKernels
	want := fn()
	for _, s := range kernelSets()[1:] {
		active = s
		got := fn()
		for i := range want {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("%s: %s set: value %d = %v (%x), go set %v (%x)", what, s.name, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
}

// FuzzGELU: every set against the go set on arbitrary float32 values.
func FuzzGELU(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0xc0, 0xff, 1, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0xa0, 0x41, 0, 0, 0xa0, 0xc1, 0xff, 0xff, 0x7f, 0x7f, 0, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := floats(data)
		compareSets(t, "GELU", func() []float32 {
			y, d := make([]float32, len(x)), make([]float32, len(x))
			GELU(y, d, x, geluConsts)
			return append(y, d...)
		})
	})
}

// FuzzOptim: AdamW and SGD (with momentum) on every set against their
// definitions, on arbitrary parameters, gradients and state; the first
// byte picks the hyper-parameters.
func FuzzOptim(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xbf, 0xcd, 0xcc, 0x4c, 0x3e, 0, 0, 0, 0, 0, 0, 0x80, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		sel := int(data[0])
		x := floats(data[1:])
		n := len(x) / 4
		p, g, m, v := x[:n], x[n:2*n], x[2*n:3*n], x[3*n:4*n]
		for i := range v { // a second moment is never negative
			v[i] = float32(math.Abs(float64(v[i])))
		}
		ac := adamWConsts([]float64{1e-3, 0.5, 1e-8}[sel%3], 0.9, 0.999, 1e-8, []float64{0, 0.01, 1}[sel/3%3], 1+sel%7)
		sc := sgdConsts([]float32{0.05, 1, 1e-6}[sel%3], []float32{0, 0.9}[sel/3%2], []float32{0, 1e-4}[sel/6%2])
		eachSet(t, func(t *testing.T) {
			p1, m1, v1 := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
			p2, m2, v2 := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
			AdamW(p1, g, m1, v1, ac)
			adamWDef(p2, g, m2, v2, ac)
			q1, b1 := append([]float32(nil), p...), append([]float32(nil), m...)
			q2, b2 := append([]float32(nil), p...), append([]float32(nil), m...)
			SGD(q1, g, b1, sc)
			sgdDef(q2, g, b2, sc)
			for i := range p {
				for _, pair := range [][2]float32{{p1[i], p2[i]}, {m1[i], m2[i]}, {v1[i], v2[i]}, {q1[i], q2[i]}, {b1[i], b2[i]}} {
					if !sameBits(pair[0], pair[1]) {
						t.Fatalf("element %d (p %v g %v m %v v %v): AdamW p m v %v %v %v, defined %v %v %v; SGD p b %v %v, defined %v %v",
							i, p[i], g[i], m[i], v[i], p1[i], m1[i], v1[i], p2[i], m2[i], v2[i], q1[i], b1[i], q2[i], b2[i])
					}
				}
			}
		})
	})
}

// FuzzSums: Sum32 against its definition, the float64 sums and BNNorm and
// BNGrad on every set against the go set, on arbitrary values.
func FuzzSums(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x7f, 0, 0, 0, 0x80, 1, 2, 3, 4, 0xff, 0xff, 0x7f, 0x7f, 9, 9, 9, 9, 0, 0, 0xc0, 0x7f, 0, 0, 0, 0x40})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := floats(data)
		n := len(x) / 2
		a, b := x[:n], x[n:2*n]
		eachSet(t, func(t *testing.T) {
			if got, want := Sum32(x), sum32Def(x); !sameBits(got, want) {
				t.Fatalf("Sum32 = %v, defined %v", got, want)
			}
		})
		compareSets(t, "float64 sums", func() []float32 {
			s, sx := SumDotF64(a, b)
			out := []float32{float32(SumF64(x)), float32(SqDevF64(x, 0.5)), float32(s), float32(sx)}
			// the float64 sums, exactly: their bits as pairs of float32
			// values that are not NaNs (NaN payloads may differ)
			for _, v := range []float64{SumF64(x), SqDevF64(x, -3), s, sx} {
				u := math.Float64bits(v)
				if v != v {
					u = math.Float64bits(math.NaN())
				}
				out = append(out, math.Float32frombits(uint32(u)&0x3fffffff), math.Float32frombits(uint32(u>>32)&0x3fffffff))
			}
			y, xh, dx := make([]float32, n), make([]float32, n), make([]float32, n)
			BNNorm(a, y, xh, &[4]float64{0.25, 1.5, -2, 0.125})
			BNGrad(a, b, dx, &[3]float64{0.7, 0.1, -0.3})
			return append(append(append(out, y...), xh...), dx...)
		})
	})
}

// FuzzPool: PoolReLUArg and PoolArgGrad on every set against the go set,
// bit for bit, on arbitrary rows.
func FuzzPool(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f, 0, 0, 0xc0, 0x7f, 0, 0, 0xc0, 0xff, 1, 0, 0, 0, 1, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := floats(data)
		n := len(x) / 5
		top, bot, dy := x[:2*n], x[2*n:4*n], x[4*n:5*n]
		compareSets(t, "pool", func() []float32 {
			y, arg := make([]float32, n), make([]uint8, n)
			PoolReLUArg(top, bot, y, arg)
			dt, db := make([]float32, 2*n), make([]float32, 2*n)
			PoolArgGrad(arg, dy, dt, db)
			out := append(append(y, dt...), db...)
			for _, a := range arg {
				out = append(out, float32(a))
			}
			return out
		})
	})
}

// FuzzConvPlane: Im2col and Col2im on every set against the go set, bit
// for bit, on planes and kernels of the sizes the first bytes pick.
func FuzzConvPlane(f *testing.F) {
	f.Add([]byte{14, 14, 3, 1, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{1, 33, 5, 2, 0xff, 0x7f, 0x80, 0x3f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		h, w, k, pad := 1+int(data[0])%40, 1+int(data[1])%40, 1+int(data[2])%7, int(data[3])%4
		p := NewConvPlane(h, w, k, pad)
		if p == nil {
			return
		}
		r := rand.New(rand.NewSource(int64(len(data))))
		x, col := make([]float32, h*w), make([]float32, k*k*p.Ho*p.Wo)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for i := range col {
			col[i] = float32(r.NormFloat64())
		}
		for i, v := range floats(data[4:]) {
			x[i%len(x)], col[i%len(col)] = v, v
		}
		compareSets(t, fmt.Sprintf("%dx%d k %d pad %d", h, w, k, pad), func() []float32 {
			c := make([]float32, len(col))
			p.Im2col(c, x)
			dx := append([]float32(nil), x...)
			p.Col2im(dx, col)
			return append(c, dx...)
		})
	})
}
