package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// geluInputs is a grid over [-40, 40] (finer near 0), random float32s
// of every magnitude, and the edges: zeros, the smallest and largest
// float32s.
func geluInputs() []float32 {
	var xs []float32
	for x := -40.0; x <= 40; x += 1.0 / 512 {
		xs = append(xs, float32(x))
	}
	for x := -4.0; x <= 4; x += 1.0 / 65536 {
		xs = append(xs, float32(x))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		xs = append(xs, float32(r.NormFloat64()*3), float32(math.Ldexp(r.Float64()-0.5, r.IntN(260)-130)))
	}
	return append(xs, 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		math.MaxFloat32, -math.MaxFloat32, 1e-30, -1e-30)
}

// phiRef is Phi(x) in float64 from the standard library's erfc (which
// keeps its relative accuracy in the tail, unlike 1 + erf).
func phiRef(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

func TestNormCDFAgainstErfc(t *testing.T) {
	var maxAbs, maxRel, maxRelE float64
	for _, x32 := range geluInputs() {
		x := float64(x32)
		p, e := normCDF(x)
		want := phiRef(x)
		maxAbs = max(maxAbs, math.Abs(p-want))
		if want > 1e-50 { // beyond, x Phi(x) is 0 in float32 (Phi(-15) is 4e-51)
			maxRel = max(maxRel, math.Abs(p-want)/want)
		}
		if we := math.Exp(-x * x / 2); we > 1e-300 {
			maxRelE = max(maxRelE, math.Abs(e-we)/we)
		}
	}
	t.Logf("Phi: max abs error %.3g, max relative error %.3g; exp(-x^2/2): max relative error %.3g", maxAbs, maxRel, maxRelE)
	if maxAbs > 1e-8 || maxRel > 2e-8 || maxRelE > 1e-9 {
		t.Errorf("Phi: max abs error %.3g (want <= 1e-8), relative %.3g (want <= 2e-8); exp: relative %.3g (want <= 1e-9)", maxAbs, maxRel, maxRelE)
	}
}

func TestExpNeg(t *testing.T) {
	var maxRel float64
	for y := -700.0; y <= 0; y += 0.0137 {
		want := math.Exp(y)
		maxRel = max(maxRel, math.Abs(expNeg(y)-want)/want)
	}
	if maxRel > 1e-9 {
		t.Errorf("expNeg: max relative error %.3g, want <= 1e-9", maxRel)
	}
	if got := expNeg(-1e6); got < 0 || got > 1e-300 {
		t.Errorf("expNeg(-1e6) = %g, want about 0", got)
	}
	if got := expNeg(0); got != 1 {
		t.Errorf("expNeg(0) = %g, want 1", got)
	}
	if got := expNeg(math.NaN()); !math.IsNaN(got) {
		t.Errorf("expNeg(NaN) = %g, want NaN", got)
	}
}

// TestGELUFloat32 checks the float32 GELU and its derivative against
// float64 references from math.Erfc: the error stays within a few float32
// roundings of the result (the tails included), so the op agrees with
// PyTorch's float32 GELU to well within its own rounding. Both
// implementations: geluForward (the vectorised kernel where the CPU has
// AVX2 and FMA, for whole multiples of 8) and the Go one.
func TestGELUFloat32(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   func(y, d, x []float32)
		tol  float64
	}{
		// Go: float64 inside, one rounding to float32 (up to 6e-8)
		{"go", geluForwardGo, 1.2e-7},
		// float32 inside: about 4 ulp
		{"default", geluForward, 2.5e-7},
	} {
		t.Run(c.name, func(t *testing.T) {
			testGELU(t, c.fn, c.tol)
		})
	}
}

func testGELU(t *testing.T, gelu func(y, d, x []float32), tol float64) {
	xs := geluInputs()
	y := make([]float32, len(xs))
	d := make([]float32, len(xs))
	gelu(y, d, xs)
	y2 := make([]float32, len(xs))
	gelu(y2, nil, xs)
	var maxYErr, maxDErr float64
	for i, x32 := range xs {
		x := float64(x32)
		p := phiRef(x)
		wy := x * p
		wd := p + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
		if math.IsInf(x, 0) || math.Abs(x) > 1e30 {
			wd = p // x phi(x) underflows to 0
		}
		// error in units of the result's magnitude (at least 1: absolute
		// error for small results)
		ey := math.Abs(float64(y[i])-wy) / max(1, math.Abs(wy))
		ed := math.Abs(float64(d[i])-wd) / max(1, math.Abs(wd))
		if ey > maxYErr {
			maxYErr = ey
		}
		if ed > maxDErr {
			maxDErr = ed
		}
		if y2[i] != y[i] && !(math.IsNaN(float64(y[i])) && math.IsNaN(float64(y2[i]))) {
			t.Fatalf("gelu(%g) = %g with the derivative kept, %g without", x, y[i], y2[i])
		}
	}
	t.Logf("gelu: max error %.3g; gelu': max error %.3g (absolute, relative above 1)", maxYErr, maxDErr)
	if maxYErr > tol || maxDErr > tol {
		t.Errorf("gelu: max error %.3g, gelu': %.3g; want <= %.2g (absolute, relative above 1)", maxYErr, maxDErr, tol)
	}
	// the negative tail: gelu(x) for x << 0 is tiny but keeps its sign and
	// its relative accuracy until float32 underflows (PyTorch's 1 + erf
	// in float32 gives 0 or one ulp of 1 below x = -5.5)
	var tail []float32
	for x := -13.0; x <= -2; x += 1.0 / 1024 { // gelu(-13) = -8e-38: normal
		tail = append(tail, float32(x))
	}
	ty := make([]float32, len(tail))
	gelu(ty, nil, tail)
	var maxTail float64
	for i, x32 := range tail {
		x := float64(x32)
		want := x * phiRef(x)
		rel := math.Abs(float64(ty[i])-want) / math.Abs(want)
		if ty[i] >= 0 || rel > 1e-6 {
			t.Fatalf("gelu(%g) = %g, want %g", x, ty[i], want)
		}
		maxTail = max(maxTail, rel)
	}
	t.Logf("gelu on [-13, -2]: max relative error %.3g", maxTail)
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), -1e38, 1e38, 0, 1, 2, 3, 4}
	out := make([]float32, len(special))
	gelu(out, nil, special)
	if !math.IsNaN(float64(out[0])) || !math.IsInf(float64(out[1]), 1) || out[2] != 0 || out[3] != 1e38 {
		t.Errorf("gelu(NaN, +Inf, -1e38, 1e38) = %v, want NaN, +Inf, 0, 1e38", out[:4])
	}
}

func BenchmarkGELU(b *testing.B) {
	x := make([]float32, 1<<16)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y, d := make([]float32, len(x)), make([]float32, len(x))
	b.Run("forward", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			geluForward(y, nil, x)
		}
	})
	b.Run("forward+deriv", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			geluForward(y, d, x)
		}
	})
}
