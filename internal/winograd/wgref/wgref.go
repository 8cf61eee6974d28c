// Package wgref holds the float64 references of Winograd's transforms for
// the tests of internal/winograd and nn: the matrices of Lavin and Gray
// (2015) and the products that apply them.
package wgref

import "math"

// Mats are one tile size's matrices: B^T (A x A), G (A x 3) and A^T (M x
// A), A = M+2.
type Mats struct{ BT, G, AT [][]float64 }

// Matrices are F(2x2, 3x3)'s and F(4x4, 3x3)'s (interpolation points 0,
// -1, 1, -2, 2 and infinity), by M.
var Matrices = map[int]Mats{
	2: {
		BT: [][]float64{{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
		G:  [][]float64{{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}},
		AT: [][]float64{{1, 1, 1, 0}, {0, 1, -1, -1}},
	},
	4: {
		BT: [][]float64{
			{4, 0, -5, 0, 1, 0},
			{0, -4, -4, 1, 1, 0},
			{0, 4, -4, -1, 1, 0},
			{0, -2, -1, 2, 1, 0},
			{0, 2, -1, -2, 1, 0},
			{0, 4, 0, -5, 0, 1},
		},
		G: [][]float64{
			{1.0 / 4, 0, 0},
			{-1.0 / 6, -1.0 / 6, -1.0 / 6},
			{-1.0 / 6, 1.0 / 6, -1.0 / 6},
			{1.0 / 24, 1.0 / 12, 1.0 / 6},
			{1.0 / 24, -1.0 / 12, 1.0 / 6},
			{0, 0, 1},
		},
		AT: [][]float64{{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}},
	},
}

// Sandwich returns L X R^T (L: r x c, X: c x c', R: r' x c'); with abs,
// the same of |L|, |X|, |R| (a bound of every partial sum's magnitude).
func Sandwich(l, x, r [][]float64, abs bool) [][]float64 {
	f := func(v float64) float64 {
		if abs {
			return math.Abs(v)
		}
		return v
	}
	t := make([][]float64, len(l))
	for i := range l {
		t[i] = make([]float64, len(x[0]))
		for j := range x[0] {
			for k := range x {
				t[i][j] += f(l[i][k]) * f(x[k][j])
			}
		}
	}
	out := make([][]float64, len(l))
	for i := range l {
		out[i] = make([]float64, len(r))
		for j := range r {
			for k := range r[j] {
				out[i][j] += t[i][k] * f(r[j][k])
			}
		}
	}
	return out
}

// Transpose returns m's transpose.
func Transpose(m [][]float64) [][]float64 {
	t := make([][]float64, len(m[0]))
	for i := range t {
		t[i] = make([]float64, len(m))
		for j := range m {
			t[i][j] = m[j][i]
		}
	}
	return t
}
