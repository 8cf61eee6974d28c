package nn

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gorgonia.org/tensor"
)

// blasImpl is blas32's implementation (OpenBLAS's sgemm after UseBLAS).
func blasImpl() sgemmer { return blas32.Implementation() }

// TestConvGemm checks convBLAS's products (OpenBLAS's small-matrix kernels
// where they run) against float64 for NoTrans x NoTrans and NoTrans x
// Trans, the shapes of the cnn's convolutions and odd ones, leading
// dimensions past the rows, beta 0 (C, full of NaN, not read), 1 and
// 0.5: each element within k+2 float32 roundings of sum |a b| (+ |beta
// c|), and nothing written in C's padding. Other transposes go to blas32.
func TestConvGemm(t *testing.T) {
	if !smallGemmOK() {
		t.Logf("no small-matrix kernels here (%s): convBLAS is blas32", BLAS)
	}
	UseBLAS()
	r := newRNG(61)
	impl := convBLAS()
	for _, c := range []struct{ m, n, k int }{
		{64, 98, 32}, {32, 98, 64}, {64, 32, 98}, {32, 784, 9}, {32, 9, 784},
		{1, 1, 1}, {1, 17, 3}, {7, 5, 13}, {17, 33, 1}, {33, 130, 70}, {5, 200, 16},
		{64, 64, 4200}, // NoTrans x Trans above smallNTMax: blas32
	} {
		for _, tb := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			for _, beta := range []float32{0, 1, 0.5} {
				name := fmt.Sprintf("%dx%dx%d tb %c beta %g", c.m, c.n, c.k, tb, beta)
				lda, ldc := c.k+3, c.n+5
				bRows, bCols := c.k, c.n
				if tb == blas.Trans {
					bRows, bCols = c.n, c.k
				}
				ldb := bCols + 2
				a := randSlice(r, (c.m-1)*lda+c.k)
				b := randSlice(r, (bRows-1)*ldb+bCols)
				cc := randSlice(r, c.m*ldc)
				if beta == 0 {
					for i := range cc {
						cc[i] = float32(math.NaN())
					}
				}
				old := append([]float32(nil), cc...)
				const alpha = 0.75
				impl.Sgemm(blas.NoTrans, tb, c.m, c.n, c.k, alpha, a, lda, b, ldb, beta, cc, ldc)
				for i := 0; i < c.m; i++ {
					for j := 0; j < ldc; j++ {
						got := cc[i*ldc+j]
						if j >= c.n {
							if math.Float32bits(got) != math.Float32bits(old[i*ldc+j]) {
								t.Fatalf("%s: C[%d][%d] past n written", name, i, j)
							}
							continue
						}
						var s, sabs float64
						for p := 0; p < c.k; p++ {
							var bv float32
							if tb == blas.Trans {
								bv = b[j*ldb+p]
							} else {
								bv = b[p*ldb+j]
							}
							prod := float64(a[i*lda+p]) * float64(bv)
							s += prod
							sabs += math.Abs(prod)
						}
						want := alpha * s
						bound := alpha * sabs
						if beta != 0 {
							want += float64(beta) * float64(old[i*ldc+j])
							bound += math.Abs(float64(beta) * float64(old[i*ldc+j]))
						}
						if tol := float64(c.k+2) * 0x1p-24 * bound * 1.01; math.Abs(float64(got)-want) > tol {
							t.Fatalf("%s: C[%d][%d] = %g, want %g (tolerance %.3g)", name, i, j, got, want, tol)
						}
					}
				}
			}
		}
	}
}

// BenchmarkConvGemm times the convolutions' products of the cnn at batch
// 64 on blas32 (OpenBLAS's sgemm after UseBLAS) and on convBLAS (its
// small-matrix kernels where they run). Run with OPENBLAS_NUM_THREADS=1.
// Names: shape/blas|small.
func BenchmarkConvGemm(b *testing.B) {
	UseBLAS()
	r := newRNG(62)
	for _, c := range []struct {
		name    string
		tb      blas.Transpose
		m, n, k int
		beta    float32
	}{
		{"winograd-fwd-64x98x32", blas.NoTrans, 64, 98, 32, 0},
		{"winograd-dx-32x98x64", blas.NoTrans, 32, 98, 64, 0},
		{"winograd-dw-64x32x98", blas.Trans, 64, 32, 98, 1},
		{"conv1-fwd-32x784x9", blas.NoTrans, 32, 784, 9, 0},
		{"conv1-dw-32x9x784", blas.Trans, 32, 9, 784, 1},
	} {
		a := randSlice(r, c.m*c.k)
		bb := randSlice(r, c.k*c.n)
		cc := randSlice(r, c.m*c.n)
		ldb := c.n
		if c.tb == blas.Trans {
			ldb = c.k
		}
		for _, impl := range []struct {
			name string
			s    sgemmer
		}{{"blas", blasImpl()}, {"small", convBLAS()}} {
			b.Run(c.name+"/"+impl.name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					impl.s.Sgemm(blas.NoTrans, c.tb, c.m, c.n, c.k, 1, a, c.k, bb, ldb, c.beta, cc, c.n)
				}
				b.ReportMetric(2*float64(c.m*c.n*c.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestConvGemmEnv: GDIST_CONV_GEMM unset or "blas" is taken; a value it
// does not know (a typo, another case, "0") is refused naming it, not
// silently taken for the default small kernels.
func TestConvGemmEnv(t *testing.T) {
	for v, small := range map[string]bool{"": true, "blas": false} {
		if got, err := convGemmEnv(v); err != nil || got != small {
			t.Errorf("GDIST_CONV_GEMM=%q: small kernels %v, %v; want %v", v, got, err, small)
		}
	}
	for _, v := range []string{"BLAS", "0", "off", "small", " blas"} {
		if _, err := convGemmEnv(v); err == nil || !strings.Contains(err.Error(), "GDIST_CONV_GEMM="+strconv.Quote(v)) {
			t.Errorf("GDIST_CONV_GEMM=%q: error %v, want one naming it", v, err)
		}
	}
}

// TestConvGemmEnvRefused: with a GDIST_CONV_GEMM it does not know, the
// convolution's forward op returns an error naming it (no panic, no
// product on the kernels the user meant to turn off).
func TestConvGemmEnvRefused(t *testing.T) {
	t.Setenv("GDIST_CONV_GEMM", "off")
	op := newConv2d(3, 1)
	x := tensor.New(tensor.WithShape(1, 1, 4, 4), tensor.WithBacking(make([]float32, 16)))
	w := tensor.New(tensor.WithShape(2, 1, 3, 3), tensor.WithBacking(make([]float32, 18)))
	if _, err := op.Do(x, w); err == nil || !strings.Contains(err.Error(), `GDIST_CONV_GEMM="off"`) {
		t.Fatalf("conv2d with GDIST_CONV_GEMM=off: error %v, want one naming it", err)
	}
}
