package winograd

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/gdist/gdist/internal/winograd/wgref"
)

// The transform tests: the go set against the transforms' definitions in
// float64, and every kernel set this machine has (the go set alone with
// -tags purego or off amd64) against the go set.

// withSet runs fn with s active.
func withSet(s *kernelSet, fn func()) {
	old := active
	active = s
	defer func() { active = old }()
	fn()
}

// lxr returns L X R^T and the same of |L|, |X|, |R| (the bound of every
// partial sum's magnitude).
func lxr(l, x, r [][]float64) (v, bound [][]float64) {
	return wgref.Sandwich(l, x, r, false), wgref.Sandwich(l, x, r, true)
}

// plane is a case's input: n planes of h x w at a stride with a gap
// between them, and the value at (s, y, x), 0 outside the plane.
type plane struct {
	h, w, n, stride int
	x               []float32
}

func newPlane(r *rand.Rand, h, w, n int) plane {
	p := plane{h: h, w: w, n: n, stride: h*w + 5}
	p.x = make([]float32, (n-1)*p.stride+h*w)
	for i := range p.x {
		p.x[i] = float32(r.NormFloat64())
	}
	return p
}

func (p plane) at(s, y, x int) float64 {
	if y < 0 || y >= p.h || x < 0 || x >= p.w {
		return 0
	}
	return float64(p.x[s*p.stride+y*p.w+x])
}

const u32 = 1.0 / (1 << 24) // float32's unit roundoff

// within fails unless got is ref to within 12 roundings of bound: the
// transforms' sums take at most 8 sequential operations a value.
func within(t *testing.T, what string, got float32, ref, bound float64) {
	t.Helper()
	if d := math.Abs(float64(got) - ref); !(d <= 12*u32*bound) {
		t.Fatalf("%s = %v, defined %v (bound %v)", what, got, ref, bound)
	}
}

var sizes = [][2]int{{1, 1}, {1, 2}, {3, 5}, {7, 13}, {14, 14}, {28, 28}, {37, 35}, {2, 70}}

// TestTransformsMatchDefinition, on every set: Input is B^T d B of each
// tile (d zero outside the plane, columns P to PP zero), GradOutput A e
// A^T of each tile of dy, Output A^T m A + bias clipped to the plane, in
// float64 to float32 rounding.
func TestTransformsMatchDefinition(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, set := range kernelSets() {
		for _, m := range []int{2, 4} {
			mt := wgref.Matrices[m]
			a := wgref.Transpose(mt.AT) // A (A x M)
			for _, sz := range sizes {
				for _, n := range []int{1, 3} {
					pl := newPlane(r, sz[0], sz[1], n)
					p := NewPlan(m, pl.h, pl.w, n)
					a2, vs := p.A*p.A, p.PP+16
					v, q := make([]float32, (a2-1)*vs+p.PP), make([]float32, (a2-1)*vs+p.PP)
					mm := make([]float32, len(v))
					for i := range mm {
						mm[i] = float32(r.NormFloat64())
					}
					y := make([]float32, len(pl.x))
					withSet(set, func() {
						p.Input(v, vs, pl.x, pl.stride)
						p.GradOutput(q, vs, pl.x, pl.stride)
						p.Output(y, pl.stride, mm, vs, 0.5)
					})
					name := fmt.Sprintf("%s F%d %dx%d n%d", set.name, m, pl.h, pl.w, n)
					for tile := 0; tile < p.PP; tile++ {
						if tile >= p.P {
							for xi := 0; xi < a2; xi++ {
								if v[xi*vs+tile] != 0 || q[xi*vs+tile] != 0 {
									t.Fatalf("%s: column %d past P not zero", name, tile)
								}
							}
							continue
						}
						s, y0, x0 := p.tile(tile)
						d := make([][]float64, p.A)
						for i := range d {
							d[i] = make([]float64, p.A)
							for j := range d[i] {
								d[i][j] = pl.at(s, y0+i, x0+j)
							}
						}
						e := make([][]float64, m)
						mt2 := make([][]float64, p.A)
						for i := range e {
							e[i] = make([]float64, m)
							for j := range e[i] {
								e[i][j] = pl.at(s, y0+1+i, x0+1+j)
							}
						}
						for i := range mt2 {
							mt2[i] = make([]float64, p.A)
							for j := range mt2[i] {
								mt2[i][j] = float64(mm[(i*p.A+j)*vs+tile])
							}
						}
						vr, vb := lxr(mt.BT, d, mt.BT)
						qr, qb := lxr(a, e, a)
						yr, yb := lxr(mt.AT, mt2, mt.AT)
						for i := 0; i < p.A; i++ {
							for j := 0; j < p.A; j++ {
								xi := i*p.A + j
								within(t, fmt.Sprintf("%s: tile %d Input[%d]", name, tile, xi), v[xi*vs+tile], vr[i][j], vb[i][j])
								within(t, fmt.Sprintf("%s: tile %d GradOutput[%d]", name, tile, xi), q[xi*vs+tile], qr[i][j], qb[i][j])
							}
						}
						for i := 0; i < m; i++ {
							for j := 0; j < m; j++ {
								if yy, xx := y0+1+i, x0+1+j; yy < pl.h && xx < pl.w {
									within(t, fmt.Sprintf("%s: tile %d Output(%d, %d)", name, tile, i, j), y[s*pl.stride+yy*pl.w+xx], yr[i][j]+0.5, yb[i][j]+0.5)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestKernelsMatchGo: the assembly transforms give the go set's values
// (to float32 rounding: they fuse multiply-adds and sum in another order)
// for planes from 1x1 to 37x35, chunks of 1 to 3 images; they write every
// output of the plane and nothing past it or between the planes.
func TestKernelsMatchGo(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, set := range kernelSets()[1:] {
		for _, m := range []int{2, 4} {
			for _, sz := range sizes {
				for _, n := range []int{1, 3} {
					pl := newPlane(r, sz[0], sz[1], n)
					p := NewPlan(m, pl.h, pl.w, n)
					v1, q1, y1 := runTransforms(set, p, pl.x, pl.stride)
					v0, q0, y0 := runTransforms(goKernels, p, pl.x, pl.stride)
					name := fmt.Sprintf("%s F%d %dx%d n%d", set.name, m, pl.h, pl.w, n)
					near(t, name+" input", v1, v0, 1e-6)
					near(t, name+" grad", q1, q0, 1e-6)
					for s := 0; s < n; s++ {
						for i := 0; i < pl.h*pl.w; i++ {
							if math.IsNaN(float64(y1[s*pl.stride+i])) {
								t.Fatalf("%s output: image %d, %d not written", name, s, i)
							}
						}
						if s < n-1 {
							for i := pl.h * pl.w; i < pl.stride; i++ {
								if !math.IsNaN(float64(y1[s*pl.stride+i])) {
									t.Fatalf("%s output: wrote between planes", name)
								}
							}
						}
					}
					for i := len(pl.x); i < len(y1); i++ {
						if !math.IsNaN(float64(y1[i])) {
							t.Fatalf("%s output: wrote past the planes", name)
						}
					}
					for i := range y1 { // compare what is written
						if math.IsNaN(float64(y0[i])) {
							y0[i], y1[i] = 0, 0
						}
					}
					near(t, name+" output", y1, y0, 1e-6)
				}
			}
		}
	}
}

// runTransforms runs Input and GradOutput of x, and Output of Input's
// values into a NaN-filled y with 40 more values past the planes, on set;
// the columns past P are zeroed (they mean nothing).
func runTransforms(set *kernelSet, p *Plan, x []float32, stride int) (v, q, y []float32) {
	a2, vs := p.A*p.A, p.PP+16
	v = make([]float32, (a2-1)*vs+p.PP)
	q = make([]float32, len(v))
	y = make([]float32, len(x)+40)
	for i := range y {
		y[i] = float32(math.NaN())
	}
	withSet(set, func() {
		p.Input(v, vs, x, stride)
		p.GradOutput(q, vs, x, stride)
		p.Output(y[:len(x)], stride, v, vs, 0.5)
	})
	for xi := 0; xi < a2; xi++ {
		for c := p.P; c < p.PP; c++ {
			v[xi*vs+c], q[xi*vs+c] = 0, 0
		}
	}
	return v, q, y
}

func near(t *testing.T, what string, a, b []float32, tol float64) {
	t.Helper()
	var sc float64
	for _, v := range b {
		sc = math.Max(sc, math.Abs(float64(v)))
	}
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); !(d <= tol*sc) {
			t.Fatalf("%s: [%d] = %v, go set %v", what, i, a[i], b[i])
		}
	}
}

// TestFilter: Filter is G g G^T and FilterGrad G^T s G (the gradient
// w.r.t. G g G^T), in float64 rounded once, for both layouts (flip).
func TestFilter(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, m := range []int{2, 4} {
		mt := wgref.Matrices[m]
		a := m + 2
		const rows, cols = 3, 19 // two groups of 16 filters, the second partial
		w := make([]float32, rows*cols*9)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		for _, flip := range []bool{false, true} {
			ld, ustride := cols+1, rows*(cols+1)+2
			u := make([]float32, (a*a-1)*ustride+rows*ld)
			Filter(m, u, ustride, ld, w, rows, cols, cols, 1, flip)
			for rr := 0; rr < rows; rr++ {
				for c := 0; c < cols; c++ {
					f := make([][]float64, 3)
					for i := range f {
						f[i] = make([]float64, 3)
						for j := range f[i] {
							k := i*3 + j
							if flip {
								k = 8 - k
							}
							f[i][j] = float64(w[(rr*cols+c)*9+k])
						}
					}
					ref, bound := lxr(mt.G, f, mt.G)
					for xi := 0; xi < a*a; xi++ {
						within(t, fmt.Sprintf("F%d flip %v filter (%d, %d) [%d]", m, flip, rr, c, xi), u[xi*ustride+rr*ld+c], ref[xi/a][xi%a], bound[xi/a][xi%a]/8)
					}
				}
			}
		}
		// FilterGrad from s = u's layout without flip
		ld, sstride := cols, rows*cols
		s := make([]float32, a*a*sstride)
		for i := range s {
			s[i] = float32(r.NormFloat64())
		}
		dw := make([]float32, rows*cols*9)
		FilterGrad(m, dw, s, sstride, ld, rows, cols)
		gt := wgref.Transpose(mt.G)
		for rr := 0; rr < rows; rr++ {
			for c := 0; c < cols; c++ {
				e := make([][]float64, a)
				for i := range e {
					e[i] = make([]float64, a)
					for j := range e[i] {
						e[i][j] = float64(s[(i*a+j)*sstride+rr*ld+c])
					}
				}
				ref, bound := lxr(gt, e, gt)
				for k := 0; k < 9; k++ {
					within(t, fmt.Sprintf("F%d FilterGrad (%d, %d) [%d]", m, rr, c, k), dw[(rr*cols+c)*9+k], ref[k/3][k%3], bound[k/3][k%3]/8)
				}
			}
		}
	}
}

// FuzzTransforms: every set against the go set on arbitrary sizes (the
// first four bytes) and values (small multiples of 1/16, the rest of the
// bytes: every sum is then exact, whatever the order and the fusing, so
// the sets agree exactly), every output written and nothing past it.
func FuzzTransforms(f *testing.F) {
	f.Add([]byte{1, 13, 7, 2, 1, 2, 3, 0xff, 0x80, 0x7f, 9})
	f.Add([]byte{3, 14, 14, 1, 0x10, 0x20, 0xf0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		m := []int{2, 4}[data[0]%2]
		h, w, n := 1+int(data[1])%40, 1+int(data[2])%40, 1+int(data[3])%3
		vals := data[4:]
		x := make([]float32, n*h*w)
		for i := range x {
			var b byte
			if len(vals) > 0 {
				b = vals[i%len(vals)] + byte(i/len(vals))
			}
			x[i] = float32(int8(b)) / 16
		}
		p := NewPlan(m, h, w, n)
		vg, qg, yg := runTransforms(goKernels, p, x, h*w)
		for _, set := range kernelSets()[1:] {
			v, q, y := runTransforms(set, p, x, h*w)
			for i := range vg {
				if v[i] != vg[i] || q[i] != qg[i] {
					t.Fatalf("%s F%d %dx%d n%d: transformed value %d: %v %v, go set %v %v", set.name, m, h, w, n, i, v[i], q[i], vg[i], qg[i])
				}
			}
			for i := range yg {
				if !(y[i] == yg[i] || math.IsNaN(float64(y[i])) && math.IsNaN(float64(yg[i]))) {
					t.Fatalf("%s F%d %dx%d n%d: output %d: %v, go set %v", set.name, m, h, w, n, i, y[i], yg[i])
				}
			}
		}
		for i, v := range yg {
			if math.IsNaN(float64(v)) != (i >= len(x)) {
				t.Fatalf("go set F%d %dx%d n%d: output %d = %v", m, h, w, n, i, v)
			}
		}
	})
}
