package vecmath

import (
	"math"
	"math/rand"
	"testing"
)

// TestBNKernels, on every kernel set: the sums agree with a float64 loop
// to float64 rounding and with the go set bit for bit; BNNorm and BNGrad
// give bit for bit the loop's values (xhat nil or not), for lengths with
// and without a partial last group, and write nothing past the end.
func TestBNKernels(t *testing.T) { eachSet(t, testBNKernels) }

func testBNKernels(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 196, 785} {
		x, _ := guarded(n, 0, func(int) float32 { return float32(r.NormFloat64()*3 + 100) })
		e, _ := guarded(n, 0, func(int) float32 { return float32(r.NormFloat64()) })
		var mu float64
		for _, v := range x {
			mu += float64(v)
		}
		var wq, wd float64
		for i, v := range x {
			d := float64(v) - mu/float64(max(n, 1))
			wq += d * d
			wd += float64(v) * float64(e[i])
		}
		s, q := SumF64(x), SqDevF64(x, mu/float64(max(n, 1)))
		var sd [2]float64
		sd[0], sd[1] = SumDotF64(x, e)
		gs, gq := goKernels.sumF64(x), goKernels.sqDevF64(x, mu/float64(max(n, 1)))
		gd0, gd1 := goKernels.sumDotF64(x, e)
		if s != gs || q != gq || sd != [2]float64{gd0, gd1} {
			t.Fatalf("n %d: sum %v sqdev %v sumdot %v; go set %v %v [%v %v]", n, s, q, sd, gs, gq, gd0, gd1)
		}
		near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-12*(1+math.Abs(want)) }
		if !near(s, mu) || !near(q, wq) || !near(sd[0], mu) || !near(sd[1], wd) {
			t.Fatalf("n %d: sum %v / %v, sqdev %v / %v, sumdot %v / [%v %v]", n, s, mu, q, wq, sd, mu, wd)
		}
		c := [4]float64{100.25, 0.3, 1.7, -0.2}
		out, outAll := guarded(n, 8, func(int) float32 { return 7 })
		xh, xhAll := guarded(n, 8, func(int) float32 { return 7 })
		for _, withXHat := range []bool{false, true} {
			var xp []float32
			if withXHat {
				xp = xh
			}
			BNNorm(x, out, xp, &c)
			checkGuards(t, outAll, 8, "BNNorm out")
			checkGuards(t, xhAll, 8, "BNNorm xhat")
			for i, v := range x {
				h := (float64(v) - c[0]) * c[1]
				if math.Float32bits(out[i]) != math.Float32bits(float32(c[2]*h+c[3])) || withXHat && math.Float32bits(xh[i]) != math.Float32bits(float32(h)) {
					t.Fatalf("n %d xhat %v: element %d: out %v xhat %v, want %v %v", n, withXHat, i, out[i], xh[i], float32(c[2]*h+c[3]), float32(h))
				}
			}
		}
		k := [3]float64{1.3, 0.01, -0.4}
		BNGrad(e, xh, out, &k)
		checkGuards(t, outAll, 8, "BNGrad")
		for i, d := range e {
			want := float32(k[0] * (float64(d) - k[1] - float64(xh[i])*k[2]))
			if math.Float32bits(out[i]) != math.Float32bits(want) {
				t.Fatalf("n %d: BNGrad element %d = %v, want %v", n, i, out[i], want)
			}
		}
	}
}
