package cpu

import "testing"

func TestChooseKernels(t *testing.T) {
	for _, c := range []struct {
		have []string
		env  string
		want int
	}{
		{[]string{"go", "avx2", "avx512"}, "", 2},
		{[]string{"go", "avx2", "avx512"}, "go", 0},
		{[]string{"go", "avx2", "avx512"}, "avx2", 1},
		{[]string{"go", "avx2", "avx512"}, "avx512", 2},
		{[]string{"go", "avx2", "avx512"}, "bogus", 2},
		{[]string{"go", "avx512"}, "avx2", 0}, // a cap: no AVX-512
		{[]string{"go", "avx512"}, "avx512", 1},
		{[]string{"go"}, "avx512", 0},
		{[]string{"go", "avx2"}, "avx512", 1},
	} {
		if got := chooseKernels(c.have, c.env); got != c.want {
			t.Errorf("sets %v, GDIST_KERNELS=%q: chose %d, want %d", c.have, c.env, got, c.want)
		}
	}
}
