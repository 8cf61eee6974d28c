package kernels_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/kernels"
)

// Attention's products reading and writing the heads in place (through
// a gemm.Engine on a cuBLAS with cublasGemmBatchedEx: no copies into
// (N H, T, D) matrices and back) give the copy path's out and dqkv
// ($GDIST_ATTENTION_HEADS=copy) bit for bit on the fake, and within
// kernels.AttentionTol (bf16: 2 gemm.BF16Tol) of the largest value on a
// GPU, for fp32, TF32, bf16 autocast (operands cast by the kernel: the
// same values cast, 7 N T C + 3 Scores; or rounded inside cuBLAS), over
// block-causal geometries (13 rows in blocks of 4, blocks of 1, a block
// longer than T). The tiled kernel and a plain cuBLAS handle keep the
// copy path.
func TestAttentionInPlace(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	t.Setenv(gemm.EnvAutocastCache, "1")
	os.Unsetenv(kernels.EnvAttentionHeads)
	if kernels.AttentionInPlace(cublasHandle(t, dev, s)) {
		t.Error("a plain cuBLAS handle reads the heads in place")
	}
	for _, c := range []struct {
		name string
		cfg  gemm.Config
	}{
		{"fp32", gemm.Config{}},
		{"tf32", gemm.Config{Precision: gemm.TF32}},
		{"bf16", gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastKernel}},
		{"bf16 in cuBLAS", gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastInCUBLAS}},
		{"tiled", gemm.Config{Tiled: true}},
	} {
		e := gemmEngine(t, dev, s, c.cfg)
		if want := !c.cfg.Tiled; kernels.AttentionInPlace(e) != want {
			t.Fatalf("%s: AttentionInPlace %v, want %v (%s)", c.name, !want, want, e.Backend())
		}
		for _, g := range []kernels.AttentionGeom{
			{N: 2, T: 13, C: 12, H: 3, Block: 4},
			{N: 2, T: 12, C: 8, H: 2, Block: 4},
			{N: 2, T: 9, C: 6, H: 1, Block: 1},
			{N: 1, T: 5, C: 4, H: 1, Block: 7},
			{N: 3, T: 6, C: 16, H: 4, Block: 0},
		} {
			t.Run(fmt.Sprintf("%s/N%d-T%d-H%d-Tb%d", c.name, g.N, g.T, g.H, g.Block), func(t *testing.T) {
				t.Setenv(kernels.EnvAttentionHeads, "copy")
				ref, refCasts := attentionRun(t, k, e, g)
				os.Unsetenv(kernels.EnvAttentionHeads)
				got, casts := attentionRun(t, k, e, g)
				if casts != refCasts {
					t.Errorf("%d values cast in place, %d by the copy path", casts, refCasts)
				}
				for i, what := range []string{"out", "dqkv"} {
					if cudafake.Mode() != "fake" {
						if c.cfg.Precision == gemm.BF16 {
							byMaxTol(t, what, got[i], ref[i], 2*gemm.BF16Tol)
						} else {
							nearByMax(t, what, got[i], ref[i])
						}
						continue
					}
					for j := range ref[i] {
						if math.Float32bits(got[i][j]) != math.Float32bits(ref[i][j]) {
							t.Fatalf("%s[%d]: %v in place, %v by the copy path", what, j, got[i][j], ref[i][j])
						}
					}
				}
			})
		}
	}
}

// A $GDIST_ATTENTION_HEADS other than inplace or copy is refused, naming
// the variable, before anything is queued.
func TestAttentionHeadsBad(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	e := gemmEngine(t, dev, s, gemm.Config{})
	t.Setenv(kernels.EnvAttentionHeads, "copies")
	g := kernels.AttentionGeom{N: 1, T: 4, C: 4, H: 1}
	if err := kernels.AttentionForward(e, k, 0, 0, 0, 0, g); err == nil || !strings.Contains(err.Error(), kernels.EnvAttentionHeads) {
		t.Errorf("$%s=copies: %v", kernels.EnvAttentionHeads, err)
	}
	if err := kernels.AttentionBackward(e, k, 0, 0, 0, 0, 0, g); err == nil || !strings.Contains(err.Error(), kernels.EnvAttentionHeads) {
		t.Errorf("$%s=copies: %v", kernels.EnvAttentionHeads, err)
	}
}
