package winograd

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// TestKernelsMatchGo: the assembly kernels give the Go kernels' values
// (to float32 rounding: they fuse multiply-adds and sum in another
// order) for planes from 1x1 to 37x35, chunks of 1 to 3 images; they
// write every output of the plane and nothing past it.
func TestKernelsMatchGo(t *testing.T) {
	if !SetAsm(true) {
		t.Skip("no AVX-512 here: the Go kernels run")
	}
	r := rand.New(rand.NewSource(1))
	for _, m := range []int{2, 4} {
		for _, sz := range [][2]int{{1, 1}, {1, 2}, {3, 5}, {7, 13}, {14, 14}, {28, 28}, {37, 35}, {2, 70}} {
			for _, n := range []int{1, 3} {
				h, w := sz[0], sz[1]
				p := NewPlan(m, h, w, n)
				a2 := p.A * p.A
				stride := h*w + 5 // planes not contiguous
				x := make([]float32, (n-1)*stride+h*w)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				vs := p.PP + 16
				run := func(asm bool) (v, q, y []float32) {
					SetAsm(asm)
					v = make([]float32, (a2-1)*vs+p.PP)
					q = make([]float32, len(v))
					p.Input(v, vs, x, stride)
					p.GradOutput(q, vs, x, stride)
					y = make([]float32, len(x)+40)
					for i := range y {
						y[i] = float32(math.NaN())
					}
					p.Output(y[:len(x)], stride, v, vs, 0.5)
					return v, q, y
				}
				v1, q1, y1 := run(true)
				v0, q0, y0 := run(false)
				name := fmt.Sprintf("F%d %dx%d n%d", m, h, w, n)
				for xi := 0; xi < a2; xi++ { // columns past P: no meaning
					for c := p.P; c < p.PP; c++ {
						v1[xi*vs+c], v0[xi*vs+c], q1[xi*vs+c], q0[xi*vs+c] = 0, 0, 0, 0
					}
				}
				near(t, name+" input", v1[:len(v0)], v0, 1e-6)
				near(t, name+" grad", q1[:len(q0)], q0, 1e-6)
				for s := 0; s < n; s++ {
					for i := 0; i < h*w; i++ {
						if math.IsNaN(float64(y1[s*stride+i])) {
							t.Fatalf("%s output: image %d, %d not written", name, s, i)
						}
					}
					if s < n-1 {
						for i := h * w; i < stride; i++ {
							if !math.IsNaN(float64(y1[s*stride+i])) {
								t.Fatalf("%s output: wrote between planes", name)
							}
						}
					}
				}
				for i := len(x); i < len(y1); i++ {
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
	SetAsm(true)
}

func near(t *testing.T, what string, a, b []float32, tol float64) {
	t.Helper()
	var sc float64
	for _, v := range b {
		sc = math.Max(sc, math.Abs(float64(v)))
	}
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); !(d <= tol*sc) {
			t.Fatalf("%s: [%d] = %v, Go kernels %v", what, i, a[i], b[i])
		}
	}
}

// BenchmarkKernels times the transforms of one chunk of the cnn's second
// convolution (14x14) per channel: Input and GradOutput per input
// channel, Output per output channel, with everything in cache.
func BenchmarkKernels(b *testing.B) {
	for _, m := range []int{2, 4} {
		for _, n := range []int{1, 4, 8} {
			p := NewPlan(m, 14, 14, n)
			x := make([]float32, n*32*196)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			a2 := p.A * p.A
			v := make([]float32, a2*p.PP)
			for _, k := range []string{"input", "grad", "output"} {
				b.Run(fmt.Sprintf("F%d/n%d/%s", m, n, k), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						switch k {
						case "input":
							p.Input(v, p.PP, x, 32*196)
						case "grad":
							p.GradOutput(v, p.PP, x, 32*196)
						case "output":
							p.Output(x, 32*196, v, p.PP, 0)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n*196), "ns/pixel")
				})
			}
		}
	}
}
