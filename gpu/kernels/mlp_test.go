package kernels_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// devMLP trains an nn model made of Linear layers with a ReLU between each
// two (models' "mlp") on one device: parameters, gradients and momentum in
// one device buffer each, in the model's flat layout (nn.Model.Params:
// "0.weight" [in, out], "0.bias" [out], "2.weight", ...); per step only the
// batch goes up and the loss comes down.
type devMLP struct {
	dev     int
	k       *kernels.Kernels
	h       *cublas.Handle
	s       *cuda.Stream
	batch   int
	widths  []int
	w, b    []int // element offsets of each layer's weight and bias
	n       int   // parameters
	params  uintptr
	grads   uintptr
	mom     uintptr
	x, y    uintptr
	act     []uintptr // each layer's output (after its ReLU), [batch, widths[l+1]]
	dact    []uintptr // the gradients of act
	rowLoss uintptr
	loss    uintptr
}

func newDevMLP(t *testing.T, m *nn.Model, batch, dev int) *devMLP {
	t.Helper()
	k, s := setup(t, dev)
	h, err := cublas.New(dev, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	d := &devMLP{dev: dev, k: k, h: h, s: s, batch: batch, n: m.NumParams()}
	for i := 0; i < len(m.Params); i += 2 {
		pw, pb := m.Params[i], m.Params[i+1]
		l := 2 * (i / 2) // Sequential index: Linear, ReLU, Linear, ...
		if pw.Name != fmt.Sprintf("%d.weight", l) || pb.Name != fmt.Sprintf("%d.bias", l) || len(pw.Shape) != 2 || pb.Size != pw.Shape[1] {
			t.Fatalf("not an mlp of Linear/ReLU pairs: %s %v, %s %v", pw.Name, pw.Shape, pb.Name, pb.Shape)
		}
		if i == 0 {
			d.widths = append(d.widths, pw.Shape[0])
		} else if pw.Shape[0] != d.widths[len(d.widths)-1] {
			t.Fatalf("%s is %v after a layer of %d", pw.Name, pw.Shape, d.widths[len(d.widths)-1])
		}
		d.widths = append(d.widths, pw.Shape[1])
		d.w, d.b = append(d.w, pw.Offset), append(d.b, pb.Offset)
	}
	d.params = devtest.Upload(t, dev, m.Flat.Value)
	d.grads = devtest.Alloc(t, dev, d.n, 4)
	d.mom = devtest.Upload(t, dev, make([]float32, d.n))
	d.x, d.y = devtest.Alloc(t, dev, batch*d.widths[0], 4), devtest.Alloc(t, dev, batch, 4)
	for _, w := range d.widths[1:] {
		d.act = append(d.act, devtest.Alloc(t, dev, batch*w, 4))
		d.dact = append(d.dact, devtest.Alloc(t, dev, batch*w, 4))
	}
	d.rowLoss, d.loss = devtest.Alloc(t, dev, batch, 4), devtest.Alloc(t, dev, 1, 4)
	return d
}

func (d *devMLP) at(off int) uintptr { return uintptr(off * 4) }

// step runs forward, loss, backward and the SGD update on one batch and
// returns the mean loss.
func (d *devMLP) step(t *testing.T, x []float32, y []int32, cfg kernels.SGDConfig) float32 {
	t.Helper()
	devtest.Put(t, d.dev, d.x, x)
	devtest.Put(t, d.dev, d.y, y)
	L := len(d.act)
	in := d.x
	for l := 0; l < L; l++ {
		err := kernels.LinearForward(d.h, d.k, d.act[l], in, d.params+d.at(d.w[l]), d.params+d.at(d.b[l]), d.batch, d.widths[l], d.widths[l+1])
		if err != nil {
			t.Fatal(err)
		}
		if l < L-1 {
			if err := d.k.ReLU(d.s, d.act[l], d.act[l], d.batch*d.widths[l+1]); err != nil {
				t.Fatal(err)
			}
		}
		in = d.act[l]
	}
	classes := d.widths[L]
	if err := d.k.CrossEntropy(d.s, d.loss, d.rowLoss, d.act[L-1], d.y, d.batch, classes); err != nil {
		t.Fatal(err)
	}
	if err := d.k.CrossEntropyBackward(d.s, d.dact[L-1], d.act[L-1], d.y, d.batch, classes, 1/float32(d.batch)); err != nil {
		t.Fatal(err)
	}
	for l := L - 1; l >= 0; l-- {
		if l < L-1 {
			if err := d.k.ReLUBackward(d.s, d.dact[l], d.dact[l], d.act[l], d.batch*d.widths[l+1]); err != nil {
				t.Fatal(err)
			}
		}
		input, dx := d.x, uintptr(0)
		if l > 0 {
			input, dx = d.act[l-1], d.dact[l-1]
		}
		err := kernels.LinearBackward(d.h, d.k, dx, d.grads+d.at(d.w[l]), d.grads+d.at(d.b[l]), input,
			d.params+d.at(d.w[l]), d.dact[l], d.batch, d.widths[l], d.widths[l+1], false)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := d.k.SGD(d.s, d.params, d.grads, d.mom, d.n, cfg); err != nil {
		t.Fatal(err)
	}
	return devtest.Floats(t, d.dev, d.loss, 1)[0]
}

// The mlp trained on the device from the same initial weights and batches
// as the CPU path (nn through gorgonia, optim's SGD) follows it while it
// learns: the loss of every step within lossTol (relative to max(1,
// loss): it falls to about 0.07), every
// parameter after the last step within paramTol (absolute; the weights
// are of order 0.05, so about 2e-4 relative). Both compute in float32; the
// differences are rounding orders (cuBLAS and the reductions sum in
// another order than OpenBLAS or gonum, the CPU's cross-entropy is
// float64): about 1e-7 relative per operation, grown over the steps.
// Measured after 12 steps: 5e-8 on the fake, 6e-8 on an H200.
func TestMLPMatchesCPU(t *testing.T) {
	const (
		dev      = 0
		seed     = 3
		batch    = 32
		steps    = 12
		lossTol  = 2e-5
		paramTol = 1e-5
	)
	m, err := models.New("mlp", seed)
	if err != nil {
		t.Fatal(err)
	}
	d := newDevMLP(t, m, batch, dev)
	g, err := m.NewGraph(batch, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cfg := optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4}
	opt, err := optim.New(cfg, m.NumParams())
	if err != nil {
		t.Fatal(err)
	}
	dcfg := kernels.SGDConfig{LR: float32(cfg.LR), Momentum: float32(cfg.Momentum), WeightDecay: float32(cfg.WeightDecay)}
	var worst float64
	var losses []float32
	for i := 0; i < steps; i++ {
		x, y := devtest.Images(i, batch, m.InputSize())
		cpu, err := g.Step(context.Background(), x, y)
		if err != nil {
			t.Fatal(err)
		}
		opt.Step(m.Flat.Value, m.Flat.Grad)
		m.ZeroGrad()
		gpu := d.step(t, x, y, dcfg)
		losses = append(losses, cpu)
		rel := math.Abs(float64(gpu)-float64(cpu)) / math.Max(1, math.Abs(float64(cpu)))
		worst = math.Max(worst, rel)
		t.Logf("step %d: loss CPU %.7f, device %.7f (difference %.2g)", i, cpu, gpu, math.Abs(float64(gpu)-float64(cpu)))
		if rel > lossTol || math.IsNaN(float64(gpu)) {
			t.Errorf("step %d: device loss %v, CPU %v", i, gpu, cpu)
		}
	}
	got := devtest.Floats(t, dev, d.params, d.n)
	var maxDiff float64
	at := 0
	for i, v := range got {
		if diff := math.Abs(float64(v) - float64(m.Flat.Value[i])); diff > maxDiff || math.IsNaN(diff) {
			maxDiff, at = diff, i
		}
	}
	t.Logf("after %d steps: largest parameter difference %.3g (element %d), largest loss difference %.2g relative", steps, maxDiff, at, worst)
	if first, last := losses[0], losses[len(losses)-1]; !(last < 0.9*first) {
		t.Errorf("the loss went from %v to %v: the test does not train", first, last)
	}
	if maxDiff > paramTol || math.IsNaN(maxDiff) {
		t.Errorf("parameter %d: device %v, CPU %v", at, got[at], m.Flat.Value[at])
	}
}
