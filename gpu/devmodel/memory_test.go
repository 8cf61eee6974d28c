package devmodel_test

import (
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// The training plan's buffers share memory where their lives do not meet
// (memory.go): training is bit for bit what it was with each buffer a
// pool block of its own (where the fake CUDA checks every buffer's
// bounds), held the whole step (each model of the zoo's layer types, a composed model
// with Dropout, BatchNorm1d and Tanh; fp32, and the mlp and gpt under
// bf16 with the producers' copies; 3 steps of SGD with momentum, an
// evaluation between), and the plan holds less. A layout that shares
// memory between buffers whose lives meet fails it (every shared buffer
// at one offset: the cnn-bn's, gpt's and composed model's losses differ,
// the bf16 products refuse to write over a provided copy).
func TestSharedPlanSameBits(t *testing.T) {
	cudafake.RequireCUDA(t)
	composed := func() (*nn.Model, error) {
		block := nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: 24}, &nn.Linear{In: 24, Out: 48}, nn.GELU{}, &nn.Dropout{P: 0.2, Seed: 9}, &nn.Linear{In: 48, Out: 24})}
		return nn.New("composed", nn.Seq(&nn.Linear{In: 40, Out: 24}, nn.BatchNorm1d(24), nn.ReLU{}, &block, nn.Tanh{}, &nn.Linear{In: 24, Out: 10}), []int{40}, 4)
	}
	// views first in a function: a Dropout of 0 (the identity) before a
	// Linear that reads its input in backward, in a Residual's function
	// and in a Sequential of its own, over LayerNorms' outputs (which
	// nothing else reads in backward)
	views := func() (*nn.Model, error) {
		return nn.New("views", nn.Seq(&nn.Linear{In: 40, Out: 24}, &nn.LayerNorm{C: 24},
			&nn.Residual{Fn: nn.Seq(&nn.Dropout{}, &nn.Linear{In: 24, Out: 24})}, &nn.LayerNorm{C: 24},
			nn.Seq(&nn.Dropout{}, &nn.Linear{In: 24, Out: 24}), nn.ReLU{}, &nn.Linear{In: 24, Out: 10}), []int{40}, 4)
	}
	cases := append(everyLayer(), zooCase{"composed", composed, func(i int) ([]float32, []int32) { return devtest.Images(i, 6, 40) }},
		zooCase{"views", views, func(i int) ([]float32, []int32) { return devtest.Images(i, 6, 40) }})
	for _, c := range cases {
		for _, prec := range []gemm.Precision{gemm.FP32, gemm.BF16} {
			if prec == gemm.BF16 && c.name != "gpt" && c.name != "mlp" {
				continue
			}
			t.Run(c.name+"/"+string(prec), func(t *testing.T) {
				run := func(share bool) (losses, params, evals []float32, plan int64) {
					defer devmodel.SetPlanRegion(share)()
					m, err := c.model()
					if err != nil {
						t.Fatal(err)
					}
					x, _ := c.batch(0)
					d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: len(x) / m.InputSize(), Precision: prec,
						Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}})
					if err != nil {
						t.Fatal(err)
					}
					defer d.Close()
					for i := 0; i < 3; i++ {
						x, y := c.batch(i)
						l, err := d.Step(x, y)
						if err != nil {
							t.Fatal(err)
						}
						losses = append(losses, l)
						if i == 1 {
							l, _, err := d.Eval(x, y)
							if err != nil {
								t.Fatal(err)
							}
							evals = append(evals, l)
						}
					}
					return losses, devtest.Floats(t, dev, d.Params, d.N), evals, devmodel.TrainPlanBytes(d)
				}
				l0, p0, e0, whole := run(false)
				l1, p1, e1, shared := run(true)
				if i, ok := bitsEqual(l1, l0); !ok {
					t.Errorf("step %d: loss %v shared, %v held whole", i, l1[i], l0[i])
				}
				if i, ok := bitsEqual(e1, e0); !ok {
					t.Errorf("evaluation loss %v shared, %v held whole", e1[i], e0[i])
				}
				if i, ok := bitsEqual(p1, p0); !ok {
					t.Errorf("parameter %d: %v shared, %v held whole", i, p1[i], p0[i])
				}
				t.Logf("training plan %d bytes (a pool block each, the whole step: %d)", shared, whole)
				if shared >= whole {
					t.Errorf("the shared plan holds %d bytes, not less than %d", shared, whole)
				}
			})
		}
	}
}

// wholeStep is the bytes of b's buffers held the whole step.
func wholeStep(b devmodel.MemoryBreakdown) int64 {
	var n int64
	for _, x := range b.Buffers {
		if x.Whole {
			n += x.Bytes
		}
	}
	return n
}

// gptWholeStep is what a gpt of shape g at batch n holds the whole step
// of a training step (each buffer 256-byte aligned): the batch's ids,
// labels and row losses, the loss, the logits and their gradient, the
// last LayerNorm's output, normalized input and 1/std; per layer both
// LayerNorms' (4 R C + 2 R), qkv (3 R C), attention's output (R C) and
// P (N H T^2), the MLP's hidden before and after GELU (8 R C); under
// bf16 the Linears' copies of the LayerNorms' and GELU's outputs (2
// bytes each: (1 + 6 L) R C) instead of their fp32 values (4 bytes
// each), which only the Linears' bf16 products read (memory.go's
// copyOnly).
func gptWholeStep(g models.GPT, n int, prec gemm.Precision) int64 {
	a := func(values, size int) int64 { return int64((size*values + 255) / 256 * 256) }
	R, C, V := n*g.Context, g.Dim, models.Vocab
	want := a(R, 4) + 2*a(R*V, 4) + 2*a(R, 4) + a(2, 4) + a(R*C, 4) + a(R*C, 4) + a(R, 4)
	layer := 2*(a(R*C, 4)+a(R*C, 4)+a(R, 4)) + a(3*R*C, 4) + a(R*C, 4) + a(n*g.Heads*g.Context*g.Context, 4) + 2*a(4*R*C, 4)
	if prec == gemm.BF16 {
		want += a(R*C, 2) - a(R*C, 4)                                  // the head's input
		layer += 2*a(R*C, 2) + a(4*R*C, 2) - 2*a(R*C, 4) - a(4*R*C, 4) // attention's and the MLP's inputs, GELU's output
	}
	return want + int64(g.Layers)*layer
}

// The breakdown at GPT-2 small's shape, batch 8, AdamW, fp32 and bf16, a
// plan laid out without a device (no step runs; -v prints the table):
// the whole step's buffers are the formula's, and the peak is below
// what benchmarks/NOTES.md states (11.82 GB fp32, 10.98 GB bf16 without
// the products' scratch: 12.81 while the LayerNorms' and GELU's fp32
// outputs were kept beside their bf16 copies; 25.19 GB measured
// before).
func TestMemoryGPT2Small(t *testing.T) {
	t.Setenv(kernels.EnvAttention, "") // the default attention's P and dS
	g := models.GPT{Layers: 12, Dim: 768, Heads: 12, Context: 1024}
	m := gptModel(t, g, 1)
	for _, c := range []struct {
		p    gemm.Precision
		most int64
	}{{gemm.FP32, 11.82e9}, {gemm.BF16, 10.98e9}} {
		b, err := devmodel.MemoryPlan(m, 8, devmodel.Config{Precision: c.p, Optim: optim.Config{Name: "adamw", LR: 1e-3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s:\n%s", c.p, b)
		if w, want := wholeStep(b), gptWholeStep(g, 8, c.p); w != want {
			t.Errorf("%s: %d bytes held the whole step; want %d", c.p, w, want)
		}
		if b.Peak > c.most {
			t.Errorf("%s: peak %d bytes laid out; NOTES.md says %d at most", c.p, b.Peak, c.most)
		}
	}
}

// Where a gpt's device memory goes (Model.Memory) adds up to PeakBytes
// after training steps and an evaluation, fp32 and bf16 (the products'
// scratch and the evaluation arena as the model holds them); MemoryPlan
// lays the plan out the same without a device; the buffers held the
// whole step are the activations the backward reads (per layer: both
// LayerNorms' outputs, normalized inputs and 1/std, qkv, attention's
// output and P, the MLP's hidden before and after GELU; under bf16 the
// copies the Linears read of the LayerNorms' and GELU's outputs), the
// batch's input, labels and logits; and the layout before the region
// (each buffer a pool block of a power of two, the whole step: fixed +
// the sum of BlockBytes + scratch) holds more.
func TestMemoryIsPeak(t *testing.T) {
	cudafake.RequireCUDA(t)
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	t.Setenv(kernels.EnvAttention, "")      // the default attention's P and dS
	t.Setenv(kernels.EnvAttentionHeads, "") // in place, as MemoryPlan takes it
	g := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	const n = 3
	for _, prec := range []gemm.Precision{gemm.FP32, gemm.BF16} {
		t.Run(string(prec), func(t *testing.T) {
			cfg := devmodel.Config{Device: dev, Batch: n, Precision: prec, Optim: optim.Config{Name: "adamw", LR: 1e-3}, ClipGrad: 1}
			place := func() *devmodel.Model {
				m := gptModel(t, g, 3)
				d, err := devmodel.Place(m, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				for i := 0; i < 2; i++ {
					x, y := text(i, n, g.Context)
					if _, err := d.Step(x, y); err != nil {
						t.Fatal(err)
					}
				}
				x, y := text(5, 2*n, g.Context)
				if _, _, err := d.Eval(x, y); err != nil {
					t.Fatal(err)
				}
				return d
			}
			d := place()
			if !strings.Contains(d.Products(), "cuBLAS") {
				t.Skip(d.Products()) // MemoryPlan takes cuBLAS's paths
			}
			b := d.Memory()
			t.Logf("%s", b)
			if b.Peak != d.PeakBytes() {
				t.Errorf("the breakdown adds up to %d bytes; PeakBytes %d", b.Peak, d.PeakBytes())
			}
			if o, ok := b.Fixed["other placement buffers"]; ok {
				t.Errorf("%d bytes of the placement not named", o)
			}
			defer func() { // a short batch: planned again in the same region
				x, y := text(7, n-1, g.Context)
				if _, err := d.Step(x, y); err != nil {
					t.Fatal(err)
				}
				if s := d.Memory(); s.Peak != d.PeakBytes() || s.Plan != b.Plan {
					t.Errorf("after a batch of %d: the breakdown adds up to %d bytes, its region %d; PeakBytes %d, the region %d", n-1, s.Peak, s.Plan, d.PeakBytes(), b.Plan)
				}
			}()
			dry, err := devmodel.MemoryPlan(d.Host, n, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if dry.Plan != b.Plan || len(dry.Buffers) != len(b.Buffers) {
				t.Errorf("MemoryPlan lays out %d buffers in %d bytes; the device %d in %d", len(dry.Buffers), dry.Plan, len(b.Buffers), b.Plan)
			}
			whole, want := wholeStep(b), gptWholeStep(g, n, prec)
			var old int64
			for _, x := range b.Buffers {
				old += devmodel.BlockBytes(x.Bytes)
			}
			if whole != want {
				t.Errorf("%d bytes held the whole step; want %d", whole, want)
			}
			t.Logf("region %d bytes: %d held the whole step, %d shared by the rest (%d bytes unshared)", b.Plan, whole, b.Plan-whole, b.PlanUnshared)

			defer devmodel.SetPlanRegion(false)()
			before := place()
			var fixed int64
			for _, v := range b.Fixed {
				fixed += v
			}
			scratch, arena := b.Fixed["matrix products' scratch"], b.Fixed["evaluation arena"]
			fixed -= scratch + arena
			if got := before.PeakBytes() - before.EvalBytes(); got != fixed+old+scratch {
				t.Errorf("before the region: peak %d bytes; want %d (fixed) + %d (blocks) + %d (scratch)", got, fixed, old, scratch)
			}
			t.Logf("peak: %d bytes, before the region %d", d.PeakBytes(), before.PeakBytes())
			if d.PeakBytes() >= before.PeakBytes() {
				t.Errorf("peak %d bytes, not below the %d before", d.PeakBytes(), before.PeakBytes())
			}
		})
	}
}
