package vecmath

import (
	"math"
	"math/rand"
	"testing"
)

// TestExpSubF64: ExpSubF64 equals math.Exp(float64(v) - m) bit for bit,
// for logits of every scale (rows whose exponentials underflow, overflow
// or are NaN included, which the assembly leaves to math.Exp), over
// lengths with and without a partial group of 4.
func TestExpSubF64(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 699.9, 700, 700.1, -699.9, -700, -700.1, -745, -800, 1e30, -1e30, 1e-40}
	for _, scale := range []float64{1e-3, 1, 10, 100, 1000} {
		for n := 0; n <= 37; n++ {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64() * scale)
				if rng.Intn(15) == 0 {
					v[i] = specials[rng.Intn(len(specials))]
				}
			}
			for _, m := range []float64{0, 3.25, -17, float64(max32(v))} {
				e := make([]float64, n+2)
				e[n], e[n+1] = 42, 42
				ExpSubF64(e, v, m)
				for i := range v {
					want := math.Exp(float64(v[i]) - m)
					if math.Float64bits(e[i]) != math.Float64bits(want) && !(math.IsNaN(e[i]) && math.IsNaN(want)) {
						t.Fatalf("scale %v n %d m %v: exp(%v - m) = %v (%#x), math.Exp %v (%#x)", scale, n, m, v[i], e[i], math.Float64bits(e[i]), want, math.Float64bits(want))
					}
				}
				if e[n] != 42 || e[n+1] != 42 {
					t.Fatalf("n %d: wrote past the row", n)
				}
			}
		}
	}
	// dense sweep of the assembly's range
	v := make([]float32, 4096)
	e := make([]float64, len(v))
	for i := range v {
		v[i] = float32(-700 + 1400*float64(i)/float64(len(v)-1))
	}
	ExpSubF64(e, v, 0)
	if rowAsm {
		if got := expSubF64AVX(&e[0], &v[0], len(v), 0, &expF64Table); got != len(v) {
			t.Fatalf("the assembly did %d of %d values in [-700, 700]", got, len(v))
		}
	}
	for i := range v {
		if want := math.Exp(float64(v[i])); math.Float64bits(e[i]) != math.Float64bits(want) {
			t.Fatalf("exp(%v) = %v, math.Exp %v", v[i], e[i], want)
		}
	}
}

func max32(v []float32) float32 {
	m := float32(0)
	for _, x := range v {
		if x == x {
			m = max(m, x)
		}
	}
	return m
}
