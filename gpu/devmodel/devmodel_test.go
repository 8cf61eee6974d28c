package devmodel_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

// TestRealGPU skips unless the tests run on a real GPU (verify.sh's sign
// that they did).
func TestRealGPU(t *testing.T) { cudafake.RequireReal(t) }

const dev = 0

// text is batch i of byte sequences of t positions and their next bytes
// (a repeating pattern a gpt learns).
func text(i, batch, t int) ([]float32, []int32) {
	x, y := make([]float32, batch*t), make([]int32, batch*t)
	for j := range x {
		c := (j*7 + i*13) % 23
		x[j], y[j] = float32('a'+c), int32('a'+(c+7)%23)
	}
	return x, y
}

// worst is the largest |a - b| / max(floor, |b|) and where.
func worst(a, b []float32, floor float64) (float64, int) {
	var w float64
	at := -1
	for i := range a {
		d := math.Abs(float64(a[i])-float64(b[i])) / math.Max(floor, math.Abs(float64(b[i])))
		if d > w || math.IsNaN(d) {
			w, at = d, i
		}
	}
	return w, at
}

// worstOfLargest is worst relative to b's largest magnitude: a tensor's
// error measured against its scale.
func worstOfLargest(a, b []float32) (float64, int) {
	big := 0.0
	for _, v := range b {
		big = math.Max(big, math.Abs(float64(v)))
	}
	return worst(a, b, big)
}

// follow trains cpu on the CPU path (nn's training graphs through
// gorgonia, optim's optimizer on the host) and the same model placed on
// the device from the same weights and batches, steps steps, and checks
// that the device follows: every step's loss within lossTol (relative to
// max(1, loss)), every parameter and running statistic after the last
// step within paramTol (absolute, or relative to values above 1), the
// parameters copied back equal to the device's and to what CopyToHost
// left in the host model.
func follow(t *testing.T, cpu, gpu *nn.Model, cfg devmodel.Config, steps int, batch func(i int) ([]float32, []int32), lossTol, paramTol float64) *devmodel.Model {
	t.Helper()
	cudafake.RequireCUDA(t)
	d, err := devmodel.Place(gpu, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := newCPUTrainer(t, cpu, cfg.Batch, cfg.Optim, cfg.ClipGrad)
	var losses []float32
	var peak int64
	for i := 0; i < steps; i++ {
		x, y := batch(i)
		want := c.step(t, x, y)
		got, err := d.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, want)
		diff := math.Abs(float64(got) - float64(want))
		t.Logf("step %d: loss CPU %.7f, device %.7f (difference %.2g)", i, want, got, diff)
		if !(diff <= lossTol*math.Max(1, math.Abs(float64(want)))) {
			t.Errorf("step %d: device loss %v, CPU %v", i, got, want)
		}
		if i == 0 {
			peak = d.PeakBytes()
		} else if d.PeakBytes() != peak {
			t.Errorf("step %d: peak %d bytes, %d after the first step: a step allocated", i, d.PeakBytes(), peak)
		}
	}
	if first, last := losses[0], losses[len(losses)-1]; !(last < 0.95*first) {
		t.Errorf("the loss went from %v to %v: the test does not train", first, last)
	}
	dev := devtest.Floats(t, dev, d.Params, d.N)
	if err := d.CopyToHost(); err != nil {
		t.Fatal(err)
	}
	for i := range dev {
		if math.Float32bits(dev[i]) != math.Float32bits(gpu.Flat.Value[i]) {
			t.Fatalf("parameter %d copied back: %v, the device holds %v", i, gpu.Flat.Value[i], dev[i])
		}
	}
	w, at := worst(gpu.Flat.Value, cpu.Flat.Value, 1)
	t.Logf("after %d steps: largest parameter difference %.3g (element %d); peak device memory %d bytes", steps, w, at, d.PeakBytes())
	if !(w <= paramTol) {
		t.Errorf("parameter %d: device %v, CPU %v", at, gpu.Flat.Value[at], cpu.Flat.Value[at])
	}
	for j, bn := range gpu.BNs {
		c := cpu.BNs[j]
		if bn.NumBatches != c.NumBatches {
			t.Errorf("batch norm %d: %d batches tracked, CPU %d", j, bn.NumBatches, c.NumBatches)
		}
		for what, pair := range map[string][2][]float32{"mean": {bn.RunningMean, c.RunningMean}, "variance": {bn.RunningVar, c.RunningVar}} {
			if w, at := worst(pair[0], pair[1], 1); !(w <= paramTol) {
				t.Errorf("batch norm %d running %s [%d]: device %v, CPU %v", j, what, at, pair[0][at], pair[1][at])
			}
		}
	}
	return d
}

func zoo(t *testing.T, name string) *nn.Model {
	t.Helper()
	m, err := models.New(name, 5)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gptModel is models' GPT of shape g, its parameters drawn from seed.
func gptModel(t testing.TB, g models.GPT, seed int64) *nn.Model {
	t.Helper()
	m, err := models.NewGPT(g.Name(), g, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// models' mlp, cnn and cnn-bn placed on the device train as on the CPU
// path (SGD with momentum and weight decay; batch 8, 8 steps): the
// tolerances of gpu/kernels' TestMLPMatchesCPU and TestCNNMatchesCPU
// (losses within 2e-5 relative to max(1, loss), parameters and running
// statistics within 2e-5).
func TestZooMatchesCPU(t *testing.T) {
	for _, c := range []struct {
		name string
		lr   float64
	}{{"mlp", 0.1}, {"cnn", 0.1}, {"cnn-bn", 0.03}} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.name != "mlp" && cudafake.Mode() != "real" {
				t.Skip("-short: the cnns' emulated convolutions take a while")
			}
			cfg := devmodel.Config{Device: dev, Batch: 8, Optim: optim.Config{Name: "sgd", LR: c.lr, Momentum: 0.9, WeightDecay: 1e-4}}
			in := 784
			follow(t, zoo(t, c.name), zoo(t, c.name), cfg, 8, func(i int) ([]float32, []int32) { return devtest.Images(i, 8, in) }, 2e-5, 2e-5)
		})
	}
}

// A small gpt (2 layers, dimension 16, 2 heads, context 8: every layer
// type of the zoo's gpt) trained on the device as on the CPU path, with
// SGD and with AdamW and clipping (train's gpt defaults): losses within
// 2e-5 relative to max(1, loss); parameters within 2e-5 with SGD, and
// within lr (3e-3) with AdamW, whose step is lr m / sqrt(v), about lr in
// size whatever the gradient's: a gradient that is rounding noise on
// both paths (a bias before a normalization) moves its parameter by up to
// lr either way. TestUpdateMatchesOptim checks the device's updates
// themselves against optim's.
func TestGPTMatchesCPU(t *testing.T) {
	shape := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	for _, c := range []struct {
		name     string
		opt      optim.Config
		clip     float64
		paramTol float64
	}{
		{"sgd", optim.Config{Name: "sgd", LR: 0.3, Momentum: 0.9}, 0, 2e-5},
		{"adamw", optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, 1, 3e-3},
	} {
		t.Run(c.name, func(t *testing.T) {
			mk := func() *nn.Model {
				return gptModel(t, shape, 3)
			}
			cfg := devmodel.Config{Device: dev, Batch: 2, Optim: c.opt, ClipGrad: c.clip}
			d := follow(t, mk(), mk(), cfg, 6, func(i int) ([]float32, []int32) { return text(i, 2, shape.Context) }, 2e-5, c.paramTol)
			if c.clip > 0 {
				n, err := d.GradNorm()
				if err != nil || !(n > 0) {
					t.Errorf("gradient norm %v, %v", n, err)
				}
			}
		})
	}
}

// A user's model built of nn's layers (a helper returning nn.Seq and
// nn.Residual of Linear, LayerNorm, GELU, ReLU, Dropout, BatchNorm1d)
// runs on the device unchanged and follows the CPU path, Dropout's masks
// included (SGD: the tolerances of TestZooMatchesCPU); a last batch of
// another size is planned again from the pool.
func TestComposedMatchesCPU(t *testing.T) {
	block := func(c int) nn.Layer {
		return &nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: c}, &nn.Linear{In: c, Out: 2 * c}, nn.GELU{}, &nn.Dropout{P: 0.2, Seed: 9}, &nn.Linear{In: 2 * c, Out: c})}
	}
	mk := func() *nn.Model {
		m, err := nn.New("composed", nn.Seq(&nn.Linear{In: 40, Out: 24}, nn.BatchNorm1d(24), nn.ReLU{}, block(24), block(24), &nn.Linear{In: 24, Out: 10}), []int{40}, 4)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	cfg := devmodel.Config{Device: dev, Batch: 6, Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}}
	d := follow(t, mk(), mk(), cfg, 8, func(i int) ([]float32, []int32) { return devtest.Images(i, 6, 40) }, 2e-5, 2e-5)
	// a last batch of 3: planned again, the same peak or more
	peak := d.PeakBytes()
	x, y := devtest.Images(9, 3, 40)
	loss, err := d.ForwardBackward(x, y)
	if err != nil || math.IsNaN(float64(loss)) {
		t.Fatalf("a batch of 3: %v, %v", loss, err)
	}
	if d.PeakBytes() < peak {
		t.Errorf("peak fell from %d to %d", peak, d.PeakBytes())
	}
}

// A layer without device kernels is refused when the model is placed (and
// by Check, without a device), by its name and type; nothing runs.
func TestRefused(t *testing.T) {
	user := nn.Func(nil, func(b *nn.Builder, x *G.Node) (*G.Node, error) { return G.Square(x) })
	for _, c := range []struct {
		net  nn.Layer
		want []string
	}{
		{nn.Seq(&nn.Linear{In: 4, Out: 8}, sigmoid{}, &nn.Linear{In: 8, Out: 3}), []string{`layer "1"`, "devmodel_test.sigmoid", "no device kernels"}},
		{nn.Seq(&nn.Linear{In: 4, Out: 8}, &nn.Residual{Fn: nn.Seq(user)}, &nn.Linear{In: 8, Out: 3}), []string{`layer "1.fn.0"`, "funcLayer"}},
	} {
		m, err := nn.New("refused", c.net, []int{4}, 1)
		if err != nil {
			t.Fatal(err)
		}
		err = devmodel.Check(m)
		if err == nil {
			t.Fatalf("%v: Check accepted it", c.want)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Check: %v: does not say %q", err, w)
			}
		}
		if cudafake.Mode() == "none" {
			continue
		}
		_, err = devmodel.Place(m, devmodel.Config{Device: dev, Batch: 2, Optim: optim.Config{Name: "sgd", LR: 0.1}})
		if err == nil || !strings.Contains(err.Error(), c.want[0]) {
			t.Errorf("Place: %v; want it refused naming %s", err, c.want[0])
		}
	}
	for _, name := range []string{"mlp", "cnn", "cnn-bn", "gpt", "gpt-large", "gpt-L12-D768-H12-T1024"} {
		if err := devmodel.Check(zoo(t, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The device's optimizer state and step count copied to a host optimizer
// and back; parameters copied up from the host model (a resumed
// checkpoint) are what the device then holds.
func TestCopies(t *testing.T) {
	cudafake.RequireCUDA(t)
	m := zoo(t, "mlp")
	cfg := devmodel.Config{Device: dev, Batch: 4, Optim: optim.Config{Name: "adamw", LR: 1e-3, WeightDecay: 0.1}}
	d, err := devmodel.Place(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := 0; i < 2; i++ {
		x, y := devtest.Images(i, 4, 784)
		if _, err := d.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	o, err := optim.New(cfg.Optim, d.N)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OptimStateToHost(o); err != nil {
		t.Fatal(err)
	}
	st, step := o.State()
	if step != 2 || d.Steps() != 2 {
		t.Errorf("steps: host %d, device %d; want 2", step, d.Steps())
	}
	for name, p := range d.StateBuffers() {
		got := devtest.Floats(t, dev, p, d.N)
		if w, _ := worst(st[name], got, 1); w != 0 {
			t.Errorf("%s differs from the device's", name)
		}
		for i := range st[name] {
			st[name][i] = float32(i % 7)
		}
	}
	o.SetStep(7)
	if err := d.OptimStateFromHost(o); err != nil {
		t.Fatal(err)
	}
	if d.Steps() != 7 || devtest.Floats(t, dev, d.StateBuffers()["exp_avg"], d.N)[13] != 6 {
		t.Errorf("the host's state did not go up")
	}
	for i := range m.Flat.Value {
		m.Flat.Value[i] = float32(i%11) / 8
	}
	if err := d.CopyFromHost(); err != nil {
		t.Fatal(err)
	}
	if w, at := worst(devtest.Floats(t, dev, d.Params, d.N), m.Flat.Value, 1); w != 0 {
		t.Errorf("parameter %d: not the host's after CopyFromHost", at)
	}
	grads := make([]float32, d.N)
	if err := d.GradsToHost(grads); err != nil {
		t.Fatal(err)
	}
	for i, g := range grads {
		if g != 0 {
			t.Fatalf("gradient %d is %v after a step (Step zeroes them)", i, g)
		}
	}
}

// The device's updates (clipping, SGD with momentum, Adam, AdamW) applied
// to the device's own gradients equal package optim's on the host given
// the same parameters and gradients (and train's clipping): within 1e-6
// relative (the kernels are optim's operation for operation; the clipping
// norm's float64 sum is in another order, NormTol).
func TestUpdateMatchesOptim(t *testing.T) {
	cudafake.RequireCUDA(t)
	shape := models.GPT{Layers: 1, Dim: 16, Heads: 2, Context: 8}
	for _, c := range []struct {
		opt  optim.Config
		clip float64
	}{
		{optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-3}, 0.5},
		{optim.Config{Name: "adam", LR: 1e-2, WeightDecay: 1e-2}, 0},
		{optim.Config{Name: "adamw", LR: 1e-2, WeightDecay: 0.1}, 0.5},
	} {
		m := gptModel(t, shape, 3)
		d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: 2, Optim: c.opt, ClipGrad: c.clip})
		if err != nil {
			t.Fatal(err)
		}
		opt, err := optim.New(c.opt, d.N)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			x, y := text(i, 2, shape.Context)
			if _, err := d.ForwardBackward(x, y); err != nil {
				t.Fatal(err)
			}
			p, g := devtest.Floats(t, dev, d.Params, d.N), make([]float32, d.N)
			if err := d.GradsToHost(g); err != nil {
				t.Fatal(err)
			}
			if c.clip > 0 {
				devtest.ClipGrads(g, c.clip)
			}
			opt.Step(p, g)
			if err := d.Update(); err != nil {
				t.Fatal(err)
			}
			if err := d.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
			if w, at := worst(devtest.Floats(t, dev, d.Params, d.N), p, 1e-3); !(w <= 1e-6) {
				t.Errorf("%s step %d: parameter %d differs from optim's by %.3g relative", c.opt.Name, i, at, w)
			}
		}
		d.Close()
	}
}
