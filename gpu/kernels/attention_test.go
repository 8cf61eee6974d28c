package kernels_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// Block-causal attention (AttentionGeom.Block: blocks of Tb rows, only
// the key blocks at or left of the diagonal computed) gives what the
// whole T x T products give (Block = T, the path of before the blocks):
// the output and dqkv bit for bit on the fake, for fp32 through cuBLAS,
// fp32 through gdist's tiled kernel and bf16 autocast (each dot product
// sums its terms in the same order; the blocks only drop the masked
// terms, exact zeros at the start or the end of the sum), within
// kernels.AttentionTol of the largest value on a real GPU (cuBLAS picks
// its kernels by shape; bf16: within 2 gemm.BF16Tol, as P's rounding to
// bf16 may flip where its sums' order differs); T a multiple of Tb and not (13 in blocks of 4),
// blocks of one row and blocks longer than T. The probabilities' and
// the score gradients' blocks above the diagonal, filled with NaN
// before, are still NaN after (never written) and the results have none
// (never read). Under bf16 the engine casts 7 N T C + 3 Scores values
// (Q, K, V and dO once each, held; P's blocks once forward and once
// backward; dS's once for its two products), not 7 N T C + 3 N H T^2.
func TestAttentionBlocks(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	fp32 := cublasHandle(t, dev, s)
	eng := func(cfg gemm.Config) kernels.Products { return gemmEngine(t, dev, s, cfg) }
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	t.Setenv(gemm.EnvAutocastCache, "1")
	products := []struct {
		name string
		h    func() kernels.Products
	}{
		{"fp32", func() kernels.Products { return fp32 }},
		{"tiled", func() kernels.Products { return eng(gemm.Config{Tiled: true}) }},
		{"bf16", func() kernels.Products { return eng(gemm.Config{Precision: gemm.BF16}) }},
	}
	for _, g := range []kernels.AttentionGeom{
		{N: 2, T: 13, C: 12, H: 3, Block: 4},
		{N: 2, T: 12, C: 8, H: 2, Block: 4},
		{N: 1, T: 33, C: 16, H: 2, Block: 8},
		{N: 2, T: 9, C: 6, H: 1, Block: 1},
		{N: 1, T: 5, C: 4, H: 1, Block: 7},
	} {
		for _, pr := range products {
			t.Run(fmt.Sprintf("%s/T%d-Tb%d", pr.name, g.T, g.Block), func(t *testing.T) {
				whole := g
				whole.Block = g.T
				h := pr.h()
				ref, refCasts := attentionRun(t, k, h, whole)
				got, casts := attentionRun(t, k, h, g)
				for i, what := range []string{"out", "dqkv"} {
					if cudafake.Mode() != "fake" {
						if pr.name == "bf16" { // P's bf16 rounding may flip with the sums' order
							byMaxTol(t, what, got[i], ref[i], 2*gemm.BF16Tol)
						} else {
							nearByMax(t, what, got[i], ref[i])
						}
						continue
					}
					for j := range ref[i] {
						if math.Float32bits(got[i][j]) != math.Float32bits(ref[i][j]) && got[i][j] != ref[i][j] {
							t.Fatalf("%s[%d]: %v in blocks of %d, %v whole", what, j, got[i][j], g.BlockSize(), ref[i][j])
						}
					}
				}
				if e, ok := h.(*gemm.Engine); ok && e.Precision() == gemm.BF16 && e.CUBLAS() {
					ntc := int64(g.N * g.T * g.C)
					if want := 7*ntc + 3*int64(g.Scores()); casts != want {
						t.Errorf("blocks: %d values cast, want 7 N T C + 3 Scores = %d", casts, want)
					}
					if want := 7*ntc + 3*int64(g.Probs()); refCasts != want {
						t.Errorf("whole: %d values cast, want 7 N T C + 3 N H T^2 = %d", refCasts, want)
					}
				}
			})
		}
	}
}

// attentionRun runs AttentionForward and AttentionBackward of g through h
// over inputs that are functions of the shape, with p and the workspace
// filled with NaN; it checks that the blocks above the diagonal of P and
// of dS are still NaN and returns out and dqkv, and the values h cast.
func attentionRun(t *testing.T, k *kernels.Kernels, h kernels.Products, g kernels.AttentionGeom) ([2][]float32, int64) {
	t.Helper()
	const dev = 0
	rows, c := g.N*g.T, g.C
	nan := func(n int) uintptr {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.NaN())
		}
		return devtest.Upload(t, dev, v)
	}
	qkv, dout := devtest.Upload(t, dev, devtest.Vals(150, rows*3*c, 1)), devtest.Upload(t, dev, devtest.Vals(151, rows*c, 1))
	out, dqkv := nan(rows*c), nan(rows*3*c)
	wsn := g.Workspace()
	if kernels.AttentionInPlace(h) {
		wsn = g.InPlaceWorkspace() // all it may touch
	}
	p, ws := nan(g.Probs()), nan(wsn)
	var casts0 int64
	e, _ := h.(*gemm.Engine)
	if e != nil {
		casts0 = e.Casts()
	}
	if err := kernels.AttentionForward(h, k, out, p, qkv, ws, g); err != nil {
		t.Fatal(err)
	}
	if err := kernels.AttentionBackward(h, k, dqkv, dout, qkv, p, ws, g); err != nil {
		t.Fatal(err)
	}
	var casts int64
	if e != nil {
		casts = e.Casts() - casts0
	}
	tb, tt := g.BlockSize(), g.T*g.T
	dp := ws // in place: g.InPlaceWorkspace()
	if !kernels.AttentionInPlace(h) {
		dp += uintptr(4 * 7 * g.N * g.T * g.C)
	}
	for what, ptr := range map[string]uintptr{"P": p, "dS": dp} {
		v := devtest.Floats(t, dev, ptr, g.Probs())
		for z := 0; z < g.N*g.H; z++ {
			for r := 0; r < g.T; r++ {
				end := min((r/tb+1)*tb, g.T)
				for j := 0; j < g.T; j++ {
					x := v[z*tt+r*g.T+j]
					if above := j >= end; above != math.IsNaN(float64(x)) {
						t.Fatalf("%s of head %d, row %d, key %d (blocks of %d): %v", what, z, r, j, tb, x)
					}
				}
			}
		}
	}
	res := [2][]float32{devtest.Floats(t, dev, out, rows*c), devtest.Floats(t, dev, dqkv, rows*3*c)}
	for i, v := range res {
		for j, x := range v {
			if math.IsNaN(float64(x)) {
				t.Fatalf("result %d [%d] is NaN: a masked block was read", i, j)
			}
		}
	}
	return res, casts
}

// byMaxTol checks every value within tol of want's largest magnitude.
func byMaxTol(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	var m float64
	for _, v := range want {
		m = math.Max(m, math.Abs(float64(v)))
	}
	tols := make([]float64, len(want))
	for i := range tols {
		tols[i] = tol * m
	}
	w := make([]float64, len(want))
	for i, v := range want {
		w[i] = float64(v)
	}
	near(t, what, got, w, tols)
}

// A bad block is refused before anything is queued, naming the problem:
// a negative AttentionGeom.Block, a $GDIST_ATTENTION_BLOCK that is not a
// positive number.
func TestAttentionBlockBad(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	h := cublasHandle(t, dev, s)
	g := kernels.AttentionGeom{N: 1, T: 4, C: 4, H: 1, Block: -1}
	if err := kernels.AttentionForward(h, k, 0, 0, 0, 0, g); err == nil || !strings.Contains(err.Error(), "Block -1") {
		t.Errorf("Block -1: %v", err)
	}
	g.Block = 0
	for _, v := range []string{"x", "0", "-2"} {
		t.Setenv(kernels.EnvAttentionBlock, v)
		if err := kernels.AttentionBackward(h, k, 0, 0, 0, 0, 0, g); err == nil || !strings.Contains(err.Error(), kernels.EnvAttentionBlock) {
			t.Errorf("$%s=%s: %v", kernels.EnvAttentionBlock, v, err)
		}
	}
}
