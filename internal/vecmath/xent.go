package vecmath

import "math"

// ExpSubF64 sets e[i] = math.Exp(float64(v[i]) - m) for i < len(v) (e at
// least as long): the exponentials of a softmax cross-entropy's row in
// float64, bit for bit math.Exp's. Where the active set is avx2 or avx512
// (and math.Exp takes its FMA path, as it does on every CPU with AVX and
// FMA), groups of 4 whose arguments lie in [-700, 700] go through
// xent_amd64.s, math.Exp's amd64 assembly on 4 lanes; the rest through
// math.Exp.
func ExpSubF64(e []float64, v []float32, m float64) {
	n := len(v)
	e = e[:n]
	i := 0
	for i < n {
		if rowAsm && n-i >= 4 {
			i += expSubF64AVX(&e[i], &v[i], (n-i)&^3, m, &expF64Table)
		}
		end := min(i+4, n) // a group the assembly declined, or the tail
		for ; i < end; i++ {
			e[i] = math.Exp(float64(v[i]) - m)
		}
	}
}

// expF64Consts is the constants of math.Exp's amd64 assembly, each
// broadcast to 4 lanes: log2(e), ln 2's upper and lower halves, 1/16,
// the Taylor coefficients 1/8! ... 1/3! (in order of use), 1/2, 1, 2,
// and the clamp bounds -700 and 700 (past them: math.Exp itself).
type expF64Consts [15][4]float64

var expF64Table = func() (c expF64Consts) {
	vals := [15]float64{
		1.4426950408889634073599246810018920,                  // log2(e)
		0.69314718055966295651160180568695068359375,           // ln 2, upper
		0.28235290563031577122588448175013436025525412068e-12, // ln 2, lower
		0.0625,
		2.4801587301587301587e-5, 1.9841269841269841270e-4, 1.3888888888888888889e-3,
		8.3333333333333333333e-3, 4.1666666666666666667e-2, 1.6666666666666666667e-1,
		0.5, 1.0, 2.0,
		-700, 700,
	}
	for i, v := range vals {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	return c
}()
