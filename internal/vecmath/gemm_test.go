package vecmath

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"syscall"
	"testing"
)

// TestGemmTiles: GemmTiles against its tile's definition (gemmTileGo: fused
// multiply-adds in order, then alpha), bit for bit, with A row-major and
// transposed, leading dimensions wider than the matrices, and C's
// elements outside the m x n block untouched; shapes it declines leave C
// as it was.
func TestGemmTiles(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	rv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	did := false
	for _, m := range []int{8, 32} {
		for _, n := range []int{32, 96} {
			for _, k := range []int{0, 1, 7, 64, 128} {
				for _, trans := range []bool{false, true} {
					lda, ldb, ldc := k+3, n+5, n+7
					sai, sak := lda, 1
					a := rv(max(m*lda, 1))
					if trans {
						lda = m + 3
						sai, sak = 1, lda
						a = rv(max(k*lda, 1))
					}
					b, c := rv(max(k*ldb, 1)), rv(m*ldc)
					want := append([]float32(nil), c...)
					for i := 0; i < m; i += 8 {
						for j := 0; j < n; j += 32 {
							var at, bt []float32
							if k > 0 {
								at, bt = a[i*sai:], b[j:]
							}
							gemmTileGo(at, sai, sak, bt, ldb, want[i*ldc+j:], ldc, k, 0.125)
						}
					}
					if !GemmTiles(m, n, k, 0.125, a, sai, sak, b, ldb, c, ldc) {
						if active.name == "avx512" && haveGemmAsm {
							t.Fatalf("m %d n %d k %d: declined on avx512", m, n, k)
						}
						continue
					}
					did = true
					for i := range c {
						if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
							t.Fatalf("m %d n %d k %d transposed %v: c[%d] = %v, want %v", m, n, k, trans, i, c[i], want[i])
						}
					}
					// and close to the plain float64 product
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							var s float64
							for l := 0; l < k; l++ {
								s += float64(a[i*sai+l*sak]) * float64(b[l*ldb+j])
							}
							if d := math.Abs(0.125*s - float64(c[i*ldc+j])); d > 1e-5*(1+math.Abs(s)) {
								t.Fatalf("m %d n %d k %d: c[%d,%d] = %v, float64 %v", m, n, k, i, j, c[i*ldc+j], 0.125*s)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("kernels %s, tiles run: %v", KernelSet(), did)
	c := []float32{1, 2, 3}
	for _, s := range [][3]int{{7, 32, 4}, {8, 48, 4}, {8, 32, 4}} { // shapes, or a C too short
		if GemmTiles(s[0], s[1], s[2], 1, make([]float32, 1000), 4, 1, make([]float32, 1000), 64, c, 64) {
			t.Fatalf("GemmTiles(%v) with a 3-element C did it", s)
		}
	}
	if c[0] != 1 || c[2] != 3 {
		t.Fatalf("declined GemmTiles wrote C: %v", c)
	}
}

// BenchmarkGemmTiles: attention's shapes at gpt-L4-D256-H4-T128 (heads of
// 64, blocks of 32 rows; ld 768 as in the (N T, 3C) activations), in
// GFLOP/s of this thread's CPU time (the operands stay in cache here, so
// this is the kernel's own rate; 210-250 on this Zen 5 at load 12, where
// an unrolled variant with broadcasting FMAs gave 175-200).
func BenchmarkGemmTiles(b *testing.B) {
	for _, s := range [][3]int{{32, 128, 64}, {32, 64, 128}, {32, 64, 32}} {
		m, n, k := s[0], s[1], s[2]
		a, bb, c := make([]float32, m*768+k), make([]float32, k*768+n), make([]float32, m*768+n)
		{
			b.Run(fmt.Sprintf("%dx%dx%d", m, n, k), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c0 := threadCPU()
				for i := 0; i < b.N; i++ {
					if !GemmTiles(m, n, k, 1, a, 768, 1, bb, 768, c, 768) {
						b.Skip("tiles not available")
					}
				}
				b.ReportMetric(float64(2*m*n*k)*float64(b.N)/(threadCPU()-c0)/1e9, "GFLOP/s-cpu")
			})
		}
	}
}

// threadCPU is this thread's CPU time in seconds (RUSAGE_THREAD): on a
// busy machine a steadier measure than the wall clock.
func threadCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(1, &ru) // RUSAGE_THREAD
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
