package devmodel_test

import (
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// The training plan's buffers share memory where their lives do not meet
// (memory.go): training is bit for bit what it is with every buffer held
// the whole step (each model of the zoo's layer types, a composed model
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
	cases := append(everyLayer(), zooCase{"composed", composed, func(i int) ([]float32, []int32) { return devtest.Images(i, 6, 40) }})
	for _, c := range cases {
		for _, prec := range []gemm.Precision{gemm.FP32, gemm.BF16} {
			if prec == gemm.BF16 && c.name != "gpt" && c.name != "mlp" {
				continue
			}
			t.Run(c.name+"/"+string(prec), func(t *testing.T) {
				run := func(share bool) (losses, params, evals []float32, plan int64) {
					defer devmodel.SetShareMemory(share)()
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
					return losses, devtest.Floats(t, dev, d.Params, d.N), evals, d.Memory().Plan
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
				t.Logf("training plan %d bytes (every buffer the whole step: %d)", shared, whole)
				if shared >= whole {
					t.Errorf("the shared plan holds %d bytes, not less than %d", shared, whole)
				}
			})
		}
	}
}

// The breakdown at GPT-2 small's shape, batch 8, fp32 and bf16: a plan
// laid out without a device (no step runs).
func TestMemoryGPT2Small(t *testing.T) {
	m, err := models.New("gpt-L12-D768-H12-T1024", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []gemm.Precision{gemm.FP32, gemm.BF16} {
		b, err := devmodel.MemoryPlan(m, 8, devmodel.Config{Precision: p, Optim: optim.Config{Name: "adamw", LR: 1e-3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s:\n%s", p, b)
	}
}
