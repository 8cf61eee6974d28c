package gemm_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// BF16Cast CastInCUBLAS: the products read the fp32 operands with
// CUBLAS_COMPUTE_32F_FAST_16BF and cast nothing (no values cast, no
// scratch): every product within BF16Tol + GemmTol(k) of the fp32
// inputs' product; on the fake, whose cuBLAS rounds such inputs to bf16
// as the cast kernel does, the same bits as CastKernel's engine. A bad
// name, in Config or $GDIST_BF16_CAST, is refused naming both choices.
func TestBF16CastInCUBLAS(t *testing.T) {
	in := engine(t, gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastInCUBLAS})
	kern := engine(t, gemm.Config{Precision: gemm.BF16})
	if !in.CUBLAS() {
		t.Skip(in.Backend())
	}
	if in.BF16Cast() != gemm.CastInCUBLAS || kern.BF16Cast() != gemm.CastKernel {
		t.Fatalf("BF16Cast: %q and %q", in.BF16Cast(), kern.BF16Cast())
	}
	for _, p := range problems() {
		got, want32, mag32 := run(t, in, p, identity)
		within(t, p.String(), got, want32, mag32, func(int) float64 { return gemm.BF16Tol + kernels.GemmTol(p.k) })
		if cudafake.Mode() != "fake" {
			continue
		}
		ref, _, _ := run(t, kern, p, identity)
		for i := range ref {
			if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
				t.Fatalf("%v: [%d] = %v inside cuBLAS, %v with the cast kernel", p, i, got[i], ref[i])
			}
		}
	}
	if s := in.CastStats(); s.Values() != 0 || in.ScratchBytes() != 0 {
		t.Errorf("cast inside cuBLAS: %+v values cast, %d bytes of scratch; want none", s, in.ScratchBytes())
	}
	if _, err := gemm.ParseBF16Cast("fast"); err == nil || !strings.Contains(err.Error(), `"kernel"`) || !strings.Contains(err.Error(), `"cublas"`) {
		t.Errorf("ParseBF16Cast(fast): %v", err)
	}
	t.Setenv(gemm.EnvBF16Cast, "fast")
	if _, err := gemm.New(dev, devtest.Stream(t, dev), gemm.Config{Precision: gemm.BF16}); err == nil || !strings.Contains(err.Error(), gemm.EnvBF16Cast) {
		t.Errorf("$%s=fast: %v", gemm.EnvBF16Cast, err)
	}
	t.Setenv(gemm.EnvBF16Cast, "cublas")
	e := engine(t, gemm.Config{Precision: gemm.BF16})
	if e.BF16Cast() != gemm.CastInCUBLAS {
		t.Errorf("$%s=cublas: %q", gemm.EnvBF16Cast, e.BF16Cast())
	}
}

// The cast kernel, four values a thread where the operand is 16-byte
// aligned and one by one where not, for every alignment and every
// length's remainder mod 4 of the operand: on the fake the same bits as
// cuBLAS's own rounding (CastInCUBLAS), the values cast counted once
// each.
func TestCastKernelAlignments(t *testing.T) {
	kern := engine(t, gemm.Config{Precision: gemm.BF16, NoWeightCache: true})
	in := engine(t, gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastInCUBLAS})
	if !kern.CUBLAS() || cudafake.Mode() != "fake" {
		t.Skip("needs the fake's cuBLAS: ", kern.Backend())
	}
	const n = 3
	for m := 1; m <= 5; m++ {
		for k := 1; k <= 9; k += 4 { // m k % 4 takes every value
			a := devtest.Vals(80+m, m*k+3, 1)
			b := devtest.Vals(90+k, k*n, 1)
			A, B := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b)
			for off := 0; off < 4; off++ {
				c1, c2 := devtest.Alloc(t, dev, m*n, 4), devtest.Alloc(t, dev, m*n, 4)
				before := kern.Casts()
				if err := kern.MatMul(false, false, m, n, k, 1, A+uintptr(4*off), B, 0, c1); err != nil {
					t.Fatal(err)
				}
				if got := kern.Casts() - before; got != int64(m*k+k*n) {
					t.Errorf("m %d k %d offset %d: %d values cast, want %d", m, k, off, got, m*k+k*n)
				}
				if err := in.MatMul(false, false, m, n, k, 1, A+uintptr(4*off), B, 0, c2); err != nil {
					t.Fatal(err)
				}
				for _, e := range []*gemm.Engine{kern, in} {
					if err := e.Stream().Synchronize(); err != nil {
						t.Fatal(err)
					}
				}
				got, want := devtest.Floats(t, dev, c1, m*n), devtest.Floats(t, dev, c2, m*n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("m %d k %d offset %d: [%d] = %v cast by the kernel, %v rounded by cuBLAS", m, k, off, i, got[i], want[i])
					}
				}
			}
		}
	}
}
