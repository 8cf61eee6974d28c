package devmodel_test

import (
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// evalTol is Eval's tolerance against the CPU's evaluation of the same
// weights: the whole-model tolerance of TestZooMatchesCPU (the loss within
// 2e-5 relative to max(1, loss)); a row's logits within it relative to
// max(1, |logit|), so that its prediction may differ from the CPU's only
// where its two largest logits are within twice that.
const evalTol = 2e-5

// cpuEval is train's Evaluate on one batch of n samples: nn's evaluation
// graph for the placed batch (the batch zero-padded, as train pads a last
// batch), the mean cross-entropy of the n samples' labels (nn's, float64)
// and how many are their logits' first argmax; ties counts the rows whose
// two largest logits are within 2 evalTol of each other.
func cpuEval(t *testing.T, m *nn.Model, placed int, x []float32, y []int32) (loss float64, correct, ties int) {
	t.Helper()
	placed = max(placed, len(x)/m.InputSize()) // a batch larger than the placed one: a graph of its size
	g, err := m.NewGraph(placed, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	in := make([]float32, placed*m.InputSize())
	copy(in, x)
	logits, err := g.Logits(in)
	if err != nil {
		t.Fatal(err)
	}
	k := m.Classes()
	logits = logits[:len(y)*k]
	for i := range y {
		row := logits[i*k : (i+1)*k]
		best := 0
		for j := 1; j < k; j++ {
			if row[j] > row[best] {
				best = j
			}
		}
		if int32(best) == y[i] {
			correct++
		}
		for j, v := range row {
			if j != best && float64(row[best]-v) <= 2*evalTol*math.Max(1, math.Abs(float64(row[best]))) {
				ties++
				break
			}
		}
	}
	return nn.CrossEntropy(logits, y, k), correct, ties
}

// state is everything Eval must leave alone, read back from the device:
// parameters, gradients, the optimizer's state, batch norm's running
// statistics and counts (through CopyToHost), the step count.
func state(t *testing.T, d *devmodel.Model) map[string][]float32 {
	t.Helper()
	s := map[string][]float32{"params": devtest.Floats(t, dev, d.Params, d.N), "grads": devtest.Floats(t, dev, d.Grads, d.N), "steps": {float32(d.Steps())}}
	for name, p := range d.StateBuffers() {
		s[name] = devtest.Floats(t, dev, p, d.N)
	}
	if err := d.CopyToHost(); err != nil {
		t.Fatal(err)
	}
	for i, b := range d.Host.BNs {
		s["bn mean "+string(rune('0'+i))] = append([]float32(nil), b.RunningMean...)
		s["bn var "+string(rune('0'+i))] = append([]float32(nil), b.RunningVar...)
		s["bn batches "+string(rune('0'+i))] = []float32{float32(b.NumBatches)}
	}
	return s
}

func sameBits(t *testing.T, what string, a, b map[string][]float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d state buffers, then %d", what, len(a), len(b))
	}
	for name, v := range a {
		w := b[name]
		if len(v) != len(w) {
			t.Fatalf("%s: %s: %d values, then %d", what, name, len(v), len(w))
		}
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(w[i]) {
				t.Fatalf("%s: %s[%d] was %v, is %v", what, name, i, v[i], w[i])
			}
		}
	}
}

// checkEval places two copies of a model (mk), trains both 3 steps
// (running statistics non-trivial) and runs a fourth forward and
// backward (gradients pending); then Eval on one copy over batches of
// sizes (the placed one and shorter) equals the CPU's evaluation graph
// on the same weights (cpuEval: the loss within evalTol relative to
// max(1, loss), the count of correct predictions exactly but for the
// rows with near ties), leaves its state bit for bit as it was, and
// both copies then train on bit for bit alike (Dropout's run count and
// batch norm's statistics untouched by Eval).
func checkEval(t *testing.T, mk func() *nn.Model, cfg devmodel.Config, batch func(i, n int) ([]float32, []int32), sizes []int) {
	t.Helper()
	cudafake.RequireCUDA(t)
	var ds [2]*devmodel.Model
	for i := range ds {
		d, err := devmodel.Place(mk(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		ds[i] = d
	}
	a, b := ds[0], ds[1]
	for i := 0; i < 4; i++ {
		x, y := batch(i, cfg.Batch)
		for _, d := range ds {
			var err error
			if i < 3 {
				_, err = d.Step(x, y)
			} else {
				_, err = d.ForwardBackward(x, y)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	before := state(t, a) // a.Host now holds the device's weights
	for j, n := range sizes {
		x, y := batch(100+j, n)
		loss, correct, err := a.Eval(x, y)
		if err != nil {
			t.Fatal(err)
		}
		want, wantCorrect, ties := cpuEval(t, a.Host, cfg.Batch, x, y)
		diff := math.Abs(float64(loss) - want)
		t.Logf("batch of %d (%d labels): loss device %.7f, CPU %.7f (difference %.2g); correct device %d, CPU %d (%d near ties)", n, len(y), loss, want, diff, correct, wantCorrect, ties)
		if !(diff <= evalTol*math.Max(1, math.Abs(want))) {
			t.Errorf("batch of %d: loss %v, CPU %v", n, loss, want)
		}
		if d := correct - wantCorrect; d > ties || -d > ties {
			t.Errorf("batch of %d: %d correct, CPU %d (%d near ties)", n, correct, wantCorrect, ties)
		}
	}
	sameBits(t, "after Eval", before, state(t, a))
	state(t, b) // the same CopyToHost on both
	x, y := batch(50, cfg.Batch)
	var losses [2]float32
	for i, d := range ds {
		if err := d.Update(); err != nil {
			t.Fatal(err)
		}
		if err := d.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
		var err error
		if losses[i], err = d.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	if math.Float32bits(losses[0]) != math.Float32bits(losses[1]) {
		t.Errorf("the next step's loss %v after Eval, %v without", losses[0], losses[1])
	}
	sameBits(t, "training on after Eval", state(t, b), state(t, a))
}

// Eval on the device equals the CPU's evaluation of the same weights
// (checkEval) for models' mlp, cnn (evaluated at 4 times the placed
// batch too: the convolutions' chunked workspace) and cnn-bn (batch norm
// on its running statistics), a small gpt (its logits per position) and
// a user's model with BatchNorm1d and Dropout (off in evaluation).
func TestEvalMatchesCPU(t *testing.T) {
	sgd := optim.Config{Name: "sgd", LR: 0.03, Momentum: 0.9, WeightDecay: 1e-4}
	images := func(in int) func(i, n int) ([]float32, []int32) {
		return func(i, n int) ([]float32, []int32) { return devtest.Images(i, n, in) }
	}
	t.Run("mlp", func(t *testing.T) {
		checkEval(t, func() *nn.Model { return zoo(t, "mlp") }, devmodel.Config{Device: dev, Batch: 8, Optim: sgd}, images(784), []int{8, 3, 1})
	})
	t.Run("cnn", func(t *testing.T) {
		if testing.Short() && cudafake.Mode() != "real" {
			t.Skip("-short: the cnns' emulated convolutions take a while")
		}
		checkEval(t, func() *nn.Model { return zoo(t, "cnn") }, devmodel.Config{Device: dev, Batch: 4, Optim: sgd}, images(784), []int{4, 16, 3})
	})
	t.Run("cnn-bn", func(t *testing.T) {
		if testing.Short() && cudafake.Mode() != "real" {
			t.Skip("-short: the cnns' emulated convolutions take a while")
		}
		checkEval(t, func() *nn.Model { return zoo(t, "cnn-bn") }, devmodel.Config{Device: dev, Batch: 8, Optim: sgd}, images(784), []int{8, 5})
	})
	t.Run("gpt", func(t *testing.T) {
		shape := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
		mk := func() *nn.Model {
			return gptModel(t, shape, 3)
		}
		cfg := devmodel.Config{Device: dev, Batch: 4, Optim: optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, ClipGrad: 1}
		checkEval(t, mk, cfg, func(i, n int) ([]float32, []int32) { return text(i, n, shape.Context) }, []int{4, 1})
	})
	t.Run("composed", func(t *testing.T) {
		mk := func() *nn.Model {
			m, err := nn.New("composed", nn.Seq(&nn.Linear{In: 40, Out: 24}, nn.BatchNorm1d(24), nn.ReLU{},
				&nn.Dropout{P: 0.3, Seed: 5}, &nn.Linear{In: 24, Out: 10}), []int{40}, 4)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		checkEval(t, mk, devmodel.Config{Device: dev, Batch: 6, Optim: sgd}, images(40), []int{6, 2})
	})
}
