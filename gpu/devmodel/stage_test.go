package devmodel_test

import (
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// stageRun trains m split at the layer boundaries bounds into device
// stages, run in turn in this process as a GPipe pipeline would: every
// micro-batch forward through the stages (the first stage's input
// uploaded), the loss on the last, then the backward passes in reverse
// order, each stage but the last first recomputing its forward pass from
// the saved input where its plan for the micro-batch's size holds
// another's activations (with sizes 3, 3, 2: the last two backward
// passes run on the activations their forward passes left, the first is
// recomputed); with clip > 0 the global norm from every stage's
// GradNorm and ClipGrads on each; then Update and ZeroGrad. It returns
// each step's mean loss over the batch (the micro-batches' losses
// weighted by their sizes) and leaves the parameters in m. Each inspect
// is called with the stages after the last step, before they close.
func stageRun(t *testing.T, m *nn.Model, bounds []int, cfg devmodel.Config, micro []int, steps int, clip float64, batch func(i int) ([]float32, []int32), inspect ...func(st []*devmodel.Stage)) []float64 {
	t.Helper()
	k := len(bounds) - 1
	st := make([]*devmodel.Stage, k)
	for s := range st {
		c := cfg
		c.Batch = micro[0]
		var err error
		if st[s], err = devmodel.PlaceStage(m, bounds[s], bounds[s+1], c); err != nil {
			t.Fatal(err)
		}
		defer st[s].Close()
	}
	total := 0
	for _, b := range micro {
		total += b
	}
	in, per := m.InputSize(), m.LabelsPerSample()
	// keep copies n float32s at src into a buffer of the test's (a
	// stage's output lives until its next Forward), on the legacy default
	// stream: after the work queued on stage s's stream (non-blocking:
	// the device synchronized first), before what the next stage queues
	// on its own (synchronized again).
	keep := func(s int, src uintptr, n int) uintptr {
		dst := devtest.Alloc(t, dev, n, 4)
		if err := cuda.DeviceSynchronize(dev); err != nil {
			t.Fatal(err)
		}
		if err := cuda.CopyDtoD(dev, dst, src, 4*n); err != nil {
			t.Fatal(err)
		}
		if err := cuda.DeviceSynchronize(dev); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	var losses []float64
	for i := 0; i < steps; i++ {
		x, y := batch(i)
		dx := devtest.Upload(t, dev, x)
		var sum float64
		inputs := make([][]uintptr, len(micro)) // inputs[j][s]: stage s's input of micro-batch j
		grads := make([]uintptr, len(micro))    // the last stage's input gradient
		first := 0
		for j, b := range micro {
			a := dx + uintptr(4*first*in)
			for s := range st {
				inputs[j] = append(inputs[j], a)
				out, err := st[s].Forward(a, b)
				if err != nil {
					t.Fatal(err)
				}
				if s < k-1 {
					a = keep(s, out, st[s].OutSize(b))
				}
			}
			// every other micro-batch's labels go up first
			// (LossBackwardAt, as the device pipeline does)
			var d uintptr
			var err error
			if yj := y[first*per : (first+b)*per]; j%2 == 0 {
				d, err = st[k-1].LossBackward(yj, float32(b)/float32(total))
			} else {
				if err := st[k-1].CheckLabels(yj); err != nil {
					t.Fatal(err)
				}
				at := devtest.Alloc(t, dev, len(yj), 4)
				if err := cuda.CopyHtoD(dev, at, unsafe.Slice((*byte)(unsafe.Pointer(&yj[0])), 4*len(yj))); err != nil {
					t.Fatal(err)
				}
				if err := cuda.DeviceSynchronize(dev); err != nil { // the stage's stream is non-blocking
					t.Fatal(err)
				}
				d, err = st[k-1].LossBackwardAt(at, len(yj), float32(b)/float32(total))
			}
			if err != nil {
				t.Fatal(err)
			}
			if k > 1 {
				grads[j] = keep(k-1, d, st[k-1].InSize(b))
			}
			l, err := st[k-1].Loss()
			if err != nil {
				t.Fatal(err)
			}
			sum += float64(l) * float64(b)
			first += b
		}
		// lastOf[s][b]: the micro-batch whose activations stage s's plan
		// for b samples holds (each size has its own)
		lastOf := make([]map[int]int, k)
		for s := range lastOf {
			lastOf[s] = map[int]int{}
			for j, b := range micro {
				lastOf[s][b] = j
			}
		}
		for j := len(micro) - 1; j >= 0; j-- {
			g := grads[j]
			for s := k - 2; s >= 0; s-- {
				// recompute where the plan holds another micro-batch's
				// activations
				if lastOf[s][micro[j]] != j {
					if _, err := st[s].Forward(inputs[j][s], micro[j]); err != nil {
						t.Fatal(err)
					}
					lastOf[s][micro[j]] = j
				}
				d, err := st[s].Backward(g, micro[j])
				if err != nil {
					t.Fatal(err)
				}
				if (d == 0) != (s == 0) {
					t.Fatalf("stage %d: input gradient at %#x", s, d)
				}
				if s > 0 {
					g = keep(s, d, st[s].InSize(micro[j]))
				}
			}
		}
		if clip > 0 {
			var ss float64
			for _, s := range st {
				n, err := s.GradNorm()
				if err != nil {
					t.Fatal(err)
				}
				ss += n * n
			}
			for _, s := range st {
				if err := s.ClipGrads(math.Sqrt(ss), clip); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, s := range st {
			if err := s.Update(); err != nil {
				t.Fatal(err)
			}
			if err := s.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
		}
		losses = append(losses, sum/float64(total))
	}
	for _, s := range st {
		if err := s.CopyToHost(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range inspect {
		f(st)
	}
	return losses
}

// cpuRun trains m on the CPU path (nn's training graph on the whole
// batch, optim on the host, clipping as train's) and returns the losses.
func cpuRun(t *testing.T, m *nn.Model, cfg devmodel.Config, batchSize, steps int, clip float64, batch func(i int) ([]float32, []int32)) []float64 {
	t.Helper()
	c := newCPUTrainer(t, m, batchSize, cfg.Optim, clip)
	var out []float64
	for i := 0; i < steps; i++ {
		x, y := batch(i)
		out = append(out, float64(c.step(t, x, y)))
	}
	return out
}

// wholeRun trains m placed whole on the device (Model.Step).
func wholeRun(t *testing.T, m *nn.Model, cfg devmodel.Config, steps int, clip float64, batch func(i int) ([]float32, []int32)) []float64 {
	t.Helper()
	cfg.ClipGrad = clip
	d, err := devmodel.Place(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var out []float64
	for i := 0; i < steps; i++ {
		x, y := batch(i)
		l, err := d.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, float64(l))
	}
	if err := d.CopyToHost(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A model split into device stages (2 stages at every boundary of the
// mlp, and 3; 2 stages of a gpt with AdamW and clipping; of the cnn)
// trains as the model placed whole on the device and as the CPU path:
// a batch of 8 in micro-batches of 3, 3 and 2 (two plans per stage, the
// activations recomputed before each backward pass), 4 steps; every
// step's loss within 2e-5 of both (relative to max(1, loss)), every
// parameter within paramTol (2e-5; lr with AdamW, as TestGPTMatchesCPU
// says why).
func TestStagesMatchWhole(t *testing.T) {
	cudafake.RequireCUDA(t)
	gpt := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	mlpBounds := [][]int{}
	for b := 1; b < zoo(t, "mlp").NumLayers(); b++ {
		mlpBounds = append(mlpBounds, []int{0, b, zoo(t, "mlp").NumLayers()})
	}
	mlpBounds = append(mlpBounds, []int{0, 1, 3, zoo(t, "mlp").NumLayers()})
	for _, c := range []struct {
		name     string
		mk       func() *nn.Model
		bounds   [][]int
		opt      optim.Config
		clip     float64
		paramTol float64
		batch    func(i int) ([]float32, []int32)
	}{
		{"mlp", func() *nn.Model { return zoo(t, "mlp") }, mlpBounds, optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4}, 0, 2e-5,
			func(i int) ([]float32, []int32) { return devtest.Images(i, 8, 784) }},
		{"cnn", func() *nn.Model { return zoo(t, "cnn") }, nil, optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}, 0, 2e-5,
			func(i int) ([]float32, []int32) { return devtest.Images(i, 8, 784) }},
		{"gpt", func() *nn.Model {
			return gptModel(t, gpt, 3)
		}, nil, optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, 1, 3e-3,
			func(i int) ([]float32, []int32) { return text(i, 8, gpt.Context) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.name == "cnn" && cudafake.Mode() != "real" {
				t.Skip("-short: the cnn's emulated convolutions take a while")
			}
			bounds := c.bounds
			if bounds == nil {
				m := c.mk()
				b, err := pipelineBalance(m)
				if err != nil {
					t.Fatal(err)
				}
				bounds = [][]int{b}
			}
			const steps = 4
			cfg := devmodel.Config{Device: dev, Batch: 8, Optim: c.opt}
			cpu, whole := c.mk(), c.mk()
			cpuLoss := cpuRun(t, cpu, cfg, 8, steps, c.clip, c.batch)
			wholeLoss := wholeRun(t, whole, cfg, steps, c.clip, c.batch)
			for _, b := range bounds {
				m := c.mk()
				loss := stageRun(t, m, b, cfg, []int{3, 3, 2}, steps, c.clip, c.batch)
				for i := range loss {
					for _, ref := range []struct {
						what string
						v    float64
					}{{"CPU", cpuLoss[i]}, {"whole on the device", wholeLoss[i]}} {
						if d := math.Abs(loss[i] - ref.v); !(d <= 2e-5*math.Max(1, math.Abs(ref.v))) {
							t.Errorf("stages %v, step %d: loss %v, %s %v", b, i, loss[i], ref.what, ref.v)
						}
					}
				}
				for _, ref := range []struct {
					what string
					m    *nn.Model
				}{{"CPU", cpu}, {"whole on the device", whole}} {
					if w, at := worst(m.Flat.Value, ref.m.Flat.Value, 1); !(w <= c.paramTol) {
						t.Errorf("stages %v: parameter %d: %v, %s %v", b, at, m.Flat.Value[at], ref.what, ref.m.Flat.Value[at])
					}
				}
				w, _ := worst(m.Flat.Value, whole.Flat.Value, 1)
				t.Logf("stages %v: losses %.7f ... %.7f (whole %.7f ... %.7f); largest parameter difference from the whole model %.3g",
					b, loss[0], loss[steps-1], wholeLoss[0], wholeLoss[steps-1], w)
			}
		})
	}
}

// pipelineBalance splits m into 2 stages of about equal parameter counts
// (package pipeline's Balance, written out: devmodel's tests do not
// import the pipeline).
func pipelineBalance(m *nn.Model) ([]int, error) {
	n := m.NumLayers()
	_, total := m.StageRange(0, n)
	best, at := math.MaxInt, 1
	for b := 1; b < n; b++ {
		_, a := m.StageRange(0, b)
		if w := max(a, total-a); w < best {
			best, at = w, b
		}
	}
	return []int{0, at, n}, nil
}

// A stage refuses, by name, what it cannot hold: batch norm, a range
// that is not one, a negative clipping bound; CheckStage says the same
// with no device.
func TestStageRefused(t *testing.T) {
	bn := zoo(t, "cnn-bn")
	if err := devmodel.CheckStage(bn, 0, bn.NumLayers()); err == nil || !strings.Contains(err.Error(), "batch norm cannot be in a pipeline stage") {
		t.Errorf("cnn-bn: %v", err)
	}
	m := zoo(t, "mlp")
	for _, r := range [][2]int{{1, 1}, {-1, 2}, {0, m.NumLayers() + 1}} {
		if err := devmodel.CheckStage(m, r[0], r[1]); err == nil || !strings.Contains(err.Error(), "not a non-empty range") {
			t.Errorf("mlp [%d, %d): %v", r[0], r[1], err)
		}
	}
	if err := devmodel.CheckStage(m, 1, m.NumLayers()); err != nil {
		t.Errorf("mlp [1, %d): %v", m.NumLayers(), err)
	}
	_, err := devmodel.PlaceStage(m, 0, 1, devmodel.Config{Batch: 2, Optim: optim.Config{Name: "sgd", LR: 0.1}, ClipGrad: -1})
	if err == nil || !strings.Contains(err.Error(), "Config.ClipGrad -1") {
		t.Errorf("ClipGrad -1: %v", err)
	}
}
