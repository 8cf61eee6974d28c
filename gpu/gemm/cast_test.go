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
