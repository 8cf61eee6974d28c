package devmodel_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// The fusions across layers (a Linear's bias with the GELU after it,
// forward and backward; with the Residual's add that ends its function,
// attention's out-projection's too) train bit for bit as the layers on
// their own: every loss and parameter over 4 steps, a gpt in fp32 and
// bf16 autocast (the producers' bf16 copies written by the fused
// kernels), with ZeRO-3 units of one layer (the fused work stays in the
// Linear's unit), and a user's model of Residuals whose GELU and
// Linear sit among LayerNorm and Dropout; an evaluation in between.
func TestFusedSameBits(t *testing.T) {
	cudafake.RequireCUDA(t)
	gpt := func() *nn.Model {
		return gptModel(t, bf16Shape, 3)
	}
	composed := func() *nn.Model {
		block := func(c int) nn.Layer {
			return &nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: c}, &nn.Linear{In: c, Out: 2 * c}, nn.GELU{}, &nn.Dropout{P: 0.2, Seed: 9}, &nn.Linear{In: 2 * c, Out: c})}
		}
		m, err := nn.New("composed", nn.Seq(&nn.Linear{In: 40, Out: 24}, nn.GELU{}, block(24), &nn.Residual{Fn: &nn.Linear{In: 24, Out: 24}}, &nn.Linear{In: 24, Out: 10}), []int{40}, 4)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// attention whose out-projection a GELU follows: the GELU takes that
	// bias too, so attention's backward must run the GELU's backward
	// first and leave the bias's gradient to it
	attnGELU := func() *nn.Model {
		m, err := nn.New("attn-gelu", nn.Seq(&nn.CausalSelfAttention{Dim: 8, Heads: 2}, nn.GELU{}, nn.Flatten{}, &nn.Linear{In: 32, Out: 10}), []int{4, 8}, 5)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	text2 := func(i int) ([]float32, []int32) { return text(i, 2, bf16Shape.Context) }
	adamw := optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}
	for _, c := range []struct {
		name  string
		model func() *nn.Model
		cfg   func(n int) devmodel.Config
		x     func(i int) ([]float32, []int32)
	}{
		{"gpt", gpt, func(int) devmodel.Config {
			return devmodel.Config{Device: dev, Batch: 2, Optim: adamw, ClipGrad: 1}
		}, text2},
		{"gpt-bf16", gpt, func(int) devmodel.Config {
			return devmodel.Config{Device: dev, Batch: 2, Optim: adamw, ClipGrad: 1, Precision: gemm.BF16}
		}, text2},
		{"gpt-zero3", gpt, func(n int) devmodel.Config {
			return devmodel.Config{Device: dev, Batch: 2, Optim: adamw, Shard: devmodel.Range{Lo: 0, Hi: n}, ShardGrads: true, ShardParams: true, UnitFloats: 1}
		}, text2},
		{"composed", composed, func(int) devmodel.Config {
			return devmodel.Config{Device: dev, Batch: 6, Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}}
		}, func(i int) ([]float32, []int32) { return devtest.Images(i, 6, 40) }},
		{"attention-gelu", attnGELU, func(int) devmodel.Config {
			return devmodel.Config{Device: dev, Batch: 3, Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}}
		}, func(i int) ([]float32, []int32) { return devtest.Images(i, 3, 32) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			place := func(on bool) *devmodel.Model {
				restore := devmodel.SetFuse(on)
				defer restore()
				m := c.model()
				d, err := devmodel.Place(m, c.cfg(len(m.Flat.Value)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				x, y := c.x(0)
				if _, err := d.Step(x, y); err != nil { // the plan compiled now
					t.Fatal(err)
				}
				return d
			}
			fused, plain := place(true), place(false)
			for i := 1; i < 4; i++ {
				if i == 2 {
					x, y := c.x(50)
					lf, nf, err := fused.Eval(x, y)
					if err != nil {
						t.Fatal(err)
					}
					lp, np, err := plain.Eval(x, y)
					if err != nil {
						t.Fatal(err)
					}
					if math.Float32bits(lf) != math.Float32bits(lp) || nf != np {
						t.Fatalf("evaluation: loss %v (%d correct) fused, %v (%d) unfused", lf, nf, lp, np)
					}
				}
				x, y := c.x(i)
				lf, err := fused.Step(x, y)
				if err != nil {
					t.Fatal(err)
				}
				lp, err := plain.Step(x, y)
				if err != nil {
					t.Fatal(err)
				}
				if math.Float32bits(lf) != math.Float32bits(lp) {
					t.Fatalf("step %d: loss %v fused, %v unfused", i, lf, lp)
				}
				a, b := devtest.Floats(t, dev, fused.ParamShard(), fused.N), devtest.Floats(t, dev, plain.ParamShard(), plain.N) // the shard: the whole here
				if j, ok := bitsEqual(a, b); !ok {
					t.Fatalf("step %d: parameter %d: %v fused, %v unfused", i, j, a[j], b[j])
				}
			}
			t.Log(fmt.Sprintf("%s: 4 steps bit for bit", c.name))
		})
	}
}
