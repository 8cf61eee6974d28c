package winograd

import "testing"

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
