package winograd

import (
	"fmt"
	"testing"
)

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

// BenchmarkFilter times Filter on the cnn's second convolution's filters
// (64 x 32).
func BenchmarkFilter(b *testing.B) {
	w := make([]float32, 64*32*9)
	for i := range w {
		w[i] = float32(i%11) - 5
	}
	for _, m := range []int{2, 4} {
		u := make([]float32, (m+2)*(m+2)*64*32)
		b.Run(map[int]string{2: "F2", 4: "F4"}[m], func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Filter(m, u, 64*32, 32, w, 64, 32, 32, 1, false)
			}
		})
	}
}
