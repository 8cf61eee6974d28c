package devmodel_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// sameRuns reports (t.Errorf, each message led by at) every step whose
// loss in l1 differs in its bits from l0's and the first parameter of p1
// that differs from p0's, naming the runs a1 and a0; it returns whether
// the losses and parameters are all the same bits.
func sameRuns(t *testing.T, at string, l1, l0 []float64, p1, p0 []float32, a1, a0 string) bool {
	t.Helper()
	ok := true
	for i := range l0 {
		if math.Float64bits(l1[i]) != math.Float64bits(l0[i]) {
			t.Errorf("%sstep %d: loss %v %s, %v %s", at, i, l1[i], a1, l0[i], a0)
			ok = false
		}
	}
	if i, same := bitsEqual(p1, p0); !same {
		t.Errorf("%sparameter %d: %v %s, %v %s", at, i, p1[i], a1, p0[i], a0)
		ok = false
	}
	return ok
}

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
			return gptModel(t, gpt, 3)
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
				sameRuns(t, "", l1, l0, p1, p0, "in regions", "in pool blocks")
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

// StageMemoryPlan, without a device, is what a placed stage holds: its
// Peak is the stage's PeakBytes after placement and after a micro-batch's
// forward and backward pass and an update (a gpt of 4 blocks with AdamW
// and the cnn with momentum, in 2 and 3 stages, micro-batch 3; a second
// micro-batch size adds its own plan's region: the sum of both plans).
func TestStageMemoryPlanIsPeak(t *testing.T) {
	cudafake.RequireCUDA(t)
	gpt := models.GPT{Layers: 4, Dim: 16, Heads: 2, Context: 8}
	for _, c := range []struct {
		name  string
		mk    func() *nn.Model
		opt   optim.Config
		batch func(i int) ([]float32, []int32)
	}{
		{"gpt", func() *nn.Model {
			return gptModel(t, gpt, 3)
		}, optim.Config{Name: "adamw", LR: 3e-3}, func(i int) ([]float32, []int32) { return text(i, 3, gpt.Context) }},
		{"cnn", func() *nn.Model { return zoo(t, "cnn") }, optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9},
			func(i int) ([]float32, []int32) { return devtest.Images(i, 3, 784) }},
	} {
		m := c.mk()
		n := m.NumLayers()
		b, err := pipelineBalance(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, bounds := range [][]int{b, {0, n / 3, 2 * n / 3, n}} {
			for s := 0; s+1 < len(bounds); s++ {
				from, to := bounds[s], bounds[s+1]
				cfg := devmodel.Config{Device: dev, Batch: 3, Optim: c.opt}
				want, err := devmodel.StageMemoryPlan(m, from, to, 3, cfg)
				if err != nil {
					t.Fatal(err)
				}
				one, err := devmodel.StageMemoryPlan(m, from, to, 1, cfg)
				if err != nil {
					t.Fatal(err)
				}
				st, err := devmodel.PlaceStage(m, from, to, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if got := st.PeakBytes(); got != want.Peak {
					t.Errorf("%s stage [%d, %d): PeakBytes %d placed; StageMemoryPlan says %d:\n%s", c.name, from, to, got, want.Peak, want)
				}
				x, y := c.batch(0)
				in := devtest.Upload(t, dev, x)
				for _, mb := range []int{3, 1} {
					a := in
					if from > 0 {
						a = devtest.Alloc(t, dev, st.InSize(mb), 4)
					}
					if _, err := st.Forward(a, mb); err != nil {
						t.Fatal(err)
					}
					if st.Last {
						_, err = st.LossBackward(y[:mb*m.LabelsPerSample()], 1)
					} else {
						_, err = st.Backward(devtest.Alloc(t, dev, st.OutSize(mb), 4), mb)
					}
					if err != nil {
						t.Fatal(err)
					}
					if err := st.Update(); err != nil {
						t.Fatal(err)
					}
					if err := st.Stream().Synchronize(); err != nil {
						t.Fatal(err)
					}
					if mb == 3 {
						if got := st.PeakBytes(); got != want.Peak {
							t.Errorf("%s stage [%d, %d): PeakBytes %d after a step; StageMemoryPlan says %d", c.name, from, to, got, want.Peak)
						}
					}
				}
				if got, sum := st.PeakBytes(), want.Peak+one.Plan; got != sum {
					t.Errorf("%s stage [%d, %d): PeakBytes %d after micro-batches of 3 and 1; want %d (+ the second plan's region %d)", c.name, from, to, got, sum, one.Plan)
				}
			}
		}
	}
}

// gpt2SmallStages is GPT-2 small (12 blocks of 768, 12 heads, context
// 1024) with the default attention (its P and dS kept) for t, and its
// bounds for 2 pipeline stages (pipelineBalance).
func gpt2SmallStages(t *testing.T) (models.GPT, *nn.Model, []int) {
	t.Helper()
	t.Setenv(kernels.EnvAttention, "") // the default attention's P and dS
	g := models.GPT{Layers: 12, Dim: 768, Heads: 12, Context: 1024}
	m := gptModel(t, g, 1)
	bounds, err := pipelineBalance(m)
	if err != nil {
		t.Fatal(err)
	}
	return g, m, bounds
}

// GPT-2 small (AdamW, fp32) in 2 pipeline stages at micro-batch 8, as
// laid out without a device (-v prints each stage's table): each stage's
// predicted peak, below what the pool's power-of-two blocks of the same
// buffers held, by the formula (the blocks less the region); the
// numbers benchmarks/NOTES.md states.
func TestStageMemoryGPT2Small(t *testing.T) {
	_, m, bounds := gpt2SmallStages(t)
	whole, err := devmodel.MemoryPlan(m, 8, devmodel.Config{Optim: optim.Config{Name: "adamw", LR: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s+1 < len(bounds); s++ {
		b, err := devmodel.StageMemoryPlan(m, bounds[s], bounds[s+1], 8, devmodel.Config{Optim: optim.Config{Name: "adamw", LR: 1e-3}})
		if err != nil {
			t.Fatal(err)
		}
		var blocks int64
		for _, x := range b.Buffers {
			blocks += devmodel.BlockBytes(x.Bytes)
		}
		pool := b.Peak - b.Plan + blocks
		t.Logf("stage [%d, %d): peak %.3f GB (region %.3f GB; pool blocks: %.3f GB, peak %.3f GB)\n%s", bounds[s], bounds[s+1],
			float64(b.Peak)/1e9, float64(b.Plan)/1e9, float64(blocks)/1e9, float64(pool)/1e9, b)
		if !(b.Peak < pool && b.Peak < whole.Peak) {
			t.Errorf("stage [%d, %d): peak %d bytes; want below the pool blocks' %d and the whole model's %d", bounds[s], bounds[s+1], b.Peak, pool, whole.Peak)
		}
	}
	t.Logf("the whole model: %.3f GB", float64(whole.Peak)/1e9)
}
