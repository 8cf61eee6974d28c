package devmodel_test

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// copyOnlyBytes sums the bytes of b's values kept as bf16 copies only:
// what the region holds less for them.
func copyOnlyBytes(b devmodel.MemoryBreakdown) int64 {
	var n int64
	for _, x := range b.Buffers {
		if x.Role == "values (bf16 copy only)" {
			n += x.Bytes
		}
	}
	return n
}

// A pipeline stage under bf16 autocast keeps no fp32 value of a
// LayerNorm's or GELU's output that only bf16 products in the stage read,
// as a Model's plan (memory.go's keepCopiesOnly, the same code), except
// its input and output, which the neighbouring stages send and receive
// in fp32: copyOnlyModel (TestCopyOnlyValues' model) split so that a
// LayerNorm's output read only by a Linear is a stage's output ([0, 3),
// [2, 3)) is kept there, and inside a stage ([2, 9)) is a copy only.
// Training (micro-batches 2, 2, 1, AdamW with clipping over the stages,
// 2 steps) is bit for bit the stages that keep every fp32 value, and
// each stage's peak is lower by the values' bytes, in each of its two
// plans (StageMemoryPlan's, as laid out without a device).
func TestStageCopyOnly(t *testing.T) {
	cudafake.RequireCUDA(t)
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	cfg := devmodel.Config{Device: dev, Precision: gemm.BF16, Optim: optim.Config{Name: "adamw", LR: 3e-3}}
	mk := func() *nn.Model {
		m, err := copyOnlyModel()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, c := range []struct {
		bounds []int
		want   []string // each stage's values kept as copies only
	}{
		{[]int{0, 2, 9}, []string{"[1.fn.0 1.fn.2]", "[2]"}},
		{[]int{0, 3, 9}, []string{"[1.fn.0 1.fn.2]", "[]"}},
		{[]int{0, 1, 2, 3, 9}, []string{"[]", "[1.fn.0 1.fn.2]", "[]", "[]"}},
	} {
		t.Run(fmt.Sprint(c.bounds), func(t *testing.T) {
			m := mk()
			saved := make([]int64, len(c.want)) // a stage's bytes less, its plans at 2 and 1
			for s := range c.want {
				from, to := c.bounds[s], c.bounds[s+1]
				for _, mb := range []int{2, 1} {
					on, err := devmodel.StageMemoryPlan(m, from, to, mb, cfg)
					if err != nil {
						t.Fatal(err)
					}
					restore := devmodel.SetCopyOnly(false)
					off, err := devmodel.StageMemoryPlan(m, from, to, mb, cfg)
					restore()
					if err != nil {
						t.Fatal(err)
					}
					if got := fmt.Sprint(copyOnly(on)); got != c.want[s] {
						t.Errorf("stage [%d, %d): values kept as bf16 copies only %s, want %s\n%s", from, to, got, c.want[s], on)
					}
					if len(copyOnly(off)) != 0 {
						t.Errorf("stage [%d, %d) with copy-only values off: %v", from, to, copyOnly(off))
					}
					if got, want := off.Peak-on.Peak, copyOnlyBytes(on); got != want {
						t.Errorf("stage [%d, %d) at %d: peak %d bytes, %d keeping every fp32 value: %d lower, want %d", from, to, mb, on.Peak, off.Peak, got, want)
					}
					saved[s] += copyOnlyBytes(on)
				}
			}
			run := func(only bool) ([]float64, []float32, []int64) {
				defer devmodel.SetCopyOnly(only)()
				m := mk()
				var peaks []int64
				loss := stageRun(t, m, c.bounds, cfg, []int{2, 2, 1}, 2, 1, func(i int) ([]float32, []int32) { return devtest.Images(i, 5, 40) }, func(st []*devmodel.Stage) {
					for _, s := range st {
						peaks = append(peaks, s.PeakBytes())
					}
				})
				return loss, m.Flat.Value, peaks
			}
			l0, p0, k0 := run(false)
			l1, p1, k1 := run(true)
			sameRuns(t, "", l1, l0, p1, p0, "with values as copies only", "with every fp32 value kept")
			for s := range saved {
				if got := k0[s] - k1[s]; got != saved[s] {
					t.Errorf("stage [%d, %d): peak %d bytes, %d keeping every fp32 value: %d lower, want %d", c.bounds[s], c.bounds[s+1], k1[s], k0[s], got, saved[s])
				}
			}
		})
	}
}

// A stage's Backward after an EvalForward (which withdraws the engine's
// copies) reads the values kept as bf16 copies only through their copies
// still: its gradients are bit for bit those of a stage that keeps every
// fp32 value and evaluates nothing between (copyOnlyModel's layers [0,
// 3) under bf16: 1.fn.0 and 1.fn.2 copies only). Before, the backward's
// weight-gradient products cast the key (the fake refused the launch).
func TestStageCopyOnlyEvalBetween(t *testing.T) {
	cudafake.RequireCUDA(t)
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	cfg := devmodel.Config{Device: dev, Batch: 3, Precision: gemm.BF16, Optim: optim.Config{Name: "sgd", LR: 0.01}}
	stageEvalBetween(t, func() *devmodel.Stage {
		m, err := copyOnlyModel()
		if err != nil {
			t.Fatal(err)
		}
		s, err := devmodel.PlaceStage(m, 0, 3, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, func(seed, n int) []float32 {
		x, _ := devtest.Images(seed, n, 40)
		return x
	})
}

// stageEvalBetween checks that the stage place makes (under
// SetCopyOnly(true): values kept as bf16 copies only) gives, after
// Forward (input(1, 3)), EvalForward (input(2, 5)) and Backward, the
// gradients of one placed under SetCopyOnly(false) (every fp32 value
// kept) with no EvalForward between, bit for bit.
func stageEvalBetween(t *testing.T, place func() *devmodel.Stage, input func(seed, n int) []float32) {
	t.Helper()
	grads := func(only, eval bool) []float32 {
		defer devmodel.SetCopyOnly(only)()
		s := place()
		defer s.Close()
		if _, err := s.Forward(devtest.Upload(t, dev, input(1, 3)), 3); err != nil {
			t.Fatal(err)
		}
		if eval {
			if _, err := s.EvalForward(devtest.Upload(t, dev, input(2, 5)), 5); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Backward(devtest.Upload(t, dev, devtest.Vals(3, s.OutSize(3), 0.1)), 3); err != nil {
			t.Fatal(err)
		}
		if err := s.Stream().Synchronize(); err != nil {
			t.Fatal(err)
		}
		return devtest.Floats(t, dev, s.Grads, s.N)
	}
	want, got := grads(false, false), grads(true, true)
	if i, ok := bitsEqual(got, want); !ok {
		t.Errorf("gradient %d: %v after Forward, EvalForward, Backward with values as copies only; %v keeping every fp32 value, no EvalForward", i, got[i], want[i])
	}
}

// GPT-2 small (AdamW, bf16) in 2 pipeline stages at micro-batch 8, laid
// out without a device (-v prints each stage's table): each stage's peak
// is lower than with every fp32 value kept by the formula: per block
// the attention's and the MLP's LayerNorm outputs (R C values each) and
// the GELU's output (4 R C), and the last LayerNorm's output where the
// head is in its stage (R = 8 x 1024 rows, C = 768; 4 bytes a value,
// each buffer 256-byte aligned); the numbers benchmarks/NOTES.md states.
func TestStageMemoryGPT2SmallBF16(t *testing.T) {
	g, m, bounds := gpt2SmallStages(t)
	const n = 8
	a := func(values int) int64 { return int64((4*values + 255) / 256 * 256) }
	R, C, L := n*g.Context, g.Dim, m.NumLayers()
	cfg := devmodel.Config{Precision: gemm.BF16, Optim: optim.Config{Name: "adamw", LR: 1e-3}}
	for s := 0; s+1 < len(bounds); s++ {
		from, to := bounds[s], bounds[s+1]
		var want int64
		for i := from; i < to; i++ {
			switch {
			case i >= 2 && i < L-2 && i%2 == 0: // a block's attention: its LayerNorm's output
				want += a(R * C)
			case i >= 2 && i < L-2: // its MLP: the LayerNorm's and GELU's outputs
				want += a(R*C) + a(4*R*C)
			case i == L-2 && to == L: // the last LayerNorm, the head after it
				want += a(R * C)
			}
		}
		on, err := devmodel.StageMemoryPlan(m, from, to, n, cfg)
		if err != nil {
			t.Fatal(err)
		}
		restore := devmodel.SetCopyOnly(false)
		off, err := devmodel.StageMemoryPlan(m, from, to, n, cfg)
		restore()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stage [%d, %d): peak %.3f GB, %.3f GB keeping every fp32 value (region %.3f GB, was %.3f)\n%s", from, to,
			float64(on.Peak)/1e9, float64(off.Peak)/1e9, float64(on.Plan)/1e9, float64(off.Plan)/1e9, on)
		if got := off.Peak - on.Peak; got != want || copyOnlyBytes(on) != want {
			t.Errorf("stage [%d, %d): peak %d bytes, %d keeping every fp32 value: %d lower (%d bytes of values as copies only), want %d", from, to, on.Peak, off.Peak, got, copyOnlyBytes(on), want)
		}
	}
}

// TestStagesRandomModelsCopyOnly: random models without batch norm or
// Dropout (TestStagesRandomModels'), under bf16, split into two stages
// at each top-level boundary, train bit for bit as the stages that keep
// every fp32 value (micro-batches 2, 2, 1; 2 steps of SGD with
// momentum); among them some stages keep values as bf16 copies only
// (StageMemoryPlan), the stages' inputs and outputs never.
func TestStagesRandomModelsCopyOnly(t *testing.T) {
	cudafake.RequireCUDA(t)
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	r := rand.New(rand.NewSource(31))
	cfg := devmodel.Config{Device: dev, Batch: 5, Precision: gemm.BF16, Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}}
	batch := func(k int) ([]float32, []int32) { return devtest.Images(k, 5, 8) }
	var kept int
	for i := 0; i < 8; i++ {
		ls, desc, mk := randomStageNet(t, r, i)
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			for b := 1; b < len(ls); b++ {
				bounds := []int{0, b, len(ls)}
				for s := 0; s < 2; s++ {
					p, err := devmodel.StageMemoryPlan(mk(), bounds[s], bounds[s+1], 2, cfg)
					if err != nil {
						t.Fatal(err)
					}
					for _, x := range p.Buffers {
						if x.Role == "values (bf16 copy only)" && x.Offset != -1 {
							t.Errorf("%s split at %d: %s in the region", desc, b, x.Layer)
						}
					}
					kept += len(copyOnly(p))
				}
				run := func(only bool) ([]float64, []float32) {
					defer devmodel.SetCopyOnly(only)()
					m := mk()
					return stageRun(t, m, bounds, cfg, []int{2, 2, 1}, 2, 0, batch), m.Flat.Value
				}
				l0, p0 := run(false)
				l1, p1 := run(true)
				if !sameRuns(t, fmt.Sprintf("%s split at %d: ", desc, b), l1, l0, p1, p0, "with values as copies only", "keeping every fp32 value") {
					t.FailNow()
				}
			}
			t.Logf("%s: every split bit for bit", desc)
		})
	}
	t.Logf("%d values kept as bf16 copies only over the stages", kept)
	if kept == 0 {
		t.Errorf("no stage kept a value as its bf16 copy only: the test proves nothing")
	}
}

// With $GDIST_ATTENTION=fused, a gpt's stages under bf16 keep values as
// bf16 copies only as with the default attention (the attention's input
// LayerNorm's output: its QKV product reads the copy, in its forward
// and, provided again, in its backward) and train bit for bit as the
// stages that keep every fp32 value (AdamW, clipping over the stages,
// micro-batches 2, 2, 1): split inside the blocks, before the last
// LayerNorm (its output inside the stage, a copy only) and after it (the
// stage's output: kept). A Backward after an EvalForward gives the
// gradients of a stage that keeps every fp32 value and evaluates nothing.
func TestStageCopyOnlyFused(t *testing.T) {
	cudafake.RequireCUDA(t)
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	t.Setenv(kernels.EnvAttention, "fused")
	cfg := devmodel.Config{Device: dev, Precision: gemm.BF16, Optim: optim.Config{Name: "adamw", LR: 3e-3}}
	m0, _ := fusedGPT(t, 8)
	L := m0.NumLayers()
	kept := 0
	for _, b := range []int{3, L - 2, L - 1} {
		bounds := []int{0, b, L}
		for s := 0; s < 2; s++ {
			p, err := devmodel.StageMemoryPlan(m0, bounds[s], bounds[s+1], 2, cfg)
			if err != nil {
				t.Fatal(err)
			}
			kept += len(copyOnly(p))
			// the last LayerNorm's output (layer L-2's): a copy only
			// where the head is in its stage, kept as its stage's output
			last := slices.Contains(copyOnly(p), fmt.Sprint(L-2))
			if inside := s == 1 && b <= L-2; last != inside {
				t.Errorf("stage [%d, %d): %v kept as bf16 copies only; the last LayerNorm's output (%d) among them: %v, want %v", bounds[s], bounds[s+1], copyOnly(p), L-2, last, inside)
			}
		}
		run := func(only bool) ([]float64, []float32) {
			defer devmodel.SetCopyOnly(only)()
			m, _ := fusedGPT(t, 8)
			return stageRun(t, m, bounds, cfg, []int{2, 2, 1}, 2, 0.5, func(i int) ([]float32, []int32) { return text(i, 5, 8) }), m.Flat.Value
		}
		l0, p0 := run(false)
		l1, p1 := run(true)
		sameRuns(t, fmt.Sprintf("split at %d: ", b), l1, l0, p1, p0, "with values as copies only", "keeping every fp32 value")
	}
	if kept == 0 {
		t.Errorf("no value kept as a bf16 copy only: the test proves nothing")
	}
	cfg = devmodel.Config{Device: dev, Batch: 3, Precision: gemm.BF16, Optim: optim.Config{Name: "sgd", LR: 0.01}}
	stageEvalBetween(t, func() *devmodel.Stage {
		m, _ := fusedGPT(t, 8)
		s, err := devmodel.PlaceStage(m, 0, L-1, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, func(seed, n int) []float32 {
		x, _ := text(seed, n, 8)
		return x
	})
}
