package devmodel_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// A stage's training plans lay their buffers out in a region each, of
// the exact size, shared by lives (memory.go, as a Model's plan):
// training is bit for bit what it was with each buffer a pool block of
// its own, held the whole time (where the fake CUDA checks every
// buffer's bounds): a gpt of 4 blocks (AdamW, clipping over the stages)
// and the cnn (SGD with momentum), each split into 2 and into 3 stages,
// micro-batches of 2, 2 and 1 (two plans a stage; the first stages' plans
// for 2 samples recomputed before the last backward pass), 2 steps:
// every loss and parameter. And each stage's PeakBytes is lower by the
// formula: the pool's blocks of its plans' buffers (a power of two
// each) less its plans' regions.
func TestStageSharedPlanSameBits(t *testing.T) {
	cudafake.RequireCUDA(t)
	gpt := models.GPT{Layers: 4, Dim: 16, Heads: 2, Context: 8}
	for _, c := range []struct {
		name   string
		mk     func() *nn.Model
		bounds [][]int
		opt    optim.Config
		clip   float64
		batch  func(i int) ([]float32, []int32)
	}{
		{"gpt", func() *nn.Model {
			m, err := models.NewGPT(gpt.Name(), gpt, 3)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, nil, optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, 1,
			func(i int) ([]float32, []int32) { return text(i, 5, gpt.Context) }},
		{"cnn", func() *nn.Model { return zoo(t, "cnn") }, nil, optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}, 0,
			func(i int) ([]float32, []int32) { return devtest.Images(i, 5, 784) }},
	} {
		bounds := c.bounds
		if bounds == nil { // 2 stages balanced, and 3 of a third of the layers
			n := c.mk().NumLayers()
			b, err := pipelineBalance(c.mk())
			if err != nil {
				t.Fatal(err)
			}
			bounds = [][]int{b, {0, n / 3, 2 * n / 3, n}}
		}
		for _, b := range bounds {
			t.Run(fmt.Sprintf("%s/%v", c.name, b), func(t *testing.T) {
				type stageMem struct{ peak, region, blocks int64 }
				run := func(share bool) ([]float64, []float32, []stageMem) {
					defer devmodel.SetPlanRegion(share)()
					m := c.mk()
					var mem []stageMem
					loss := stageRun(t, m, b, devmodel.Config{Device: dev, Optim: c.opt}, []int{2, 2, 1}, 2, c.clip, c.batch, func(st []*devmodel.Stage) {
						for _, s := range st {
							r, bl := devmodel.StagePlanBytes(s)
							mem = append(mem, stageMem{s.PeakBytes(), r, bl})
						}
					})
					return loss, m.Flat.Value, mem
				}
				l0, p0, m0 := run(false)
				l1, p1, m1 := run(true)
				for i := range l0 {
					if math.Float64bits(l1[i]) != math.Float64bits(l0[i]) {
						t.Errorf("step %d: loss %v in regions, %v in pool blocks", i, l1[i], l0[i])
					}
				}
				if i, ok := bitsEqual(p1, p0); !ok {
					t.Errorf("parameter %d: %v in regions, %v in pool blocks", i, p1[i], p0[i])
				}
				for s := range m1 {
					saved := m1[s].blocks - m1[s].region
					t.Logf("stage [%d, %d): peak %d bytes (pool blocks: %d): plans' regions %d, their buffers' blocks %d",
						b[s], b[s+1], m1[s].peak, m0[s].peak, m1[s].region, m1[s].blocks)
					if !(m1[s].region > 0 && saved > 0) {
						t.Errorf("stage [%d, %d): regions %d bytes, blocks %d: want regions, smaller", b[s], b[s+1], m1[s].region, m1[s].blocks)
					}
					if got := m0[s].peak - m1[s].peak; got != saved {
						t.Errorf("stage [%d, %d): peak %d bytes, %d with pool blocks: %d lower, want %d (blocks %d - regions %d)",
							b[s], b[s+1], m1[s].peak, m0[s].peak, got, saved, m1[s].blocks, m1[s].region)
					}
				}
			})
		}
	}
}
