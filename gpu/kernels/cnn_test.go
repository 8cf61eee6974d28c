package kernels_test

import (
	"context"
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

// devSeq runs a Sequential of nn's image and vector layers (Conv2d,
// BatchNorm, ReLU, MaxPool2d, Flatten, Linear: the zoo's mlp, cnn and
// cnn-bn) on one device, over the model's flat layout (parameters,
// gradients and momentum one device buffer each, every tensor at its
// nn.ParamInfo offset), a step at a time: per step only the batch goes
// up and the loss comes down.
type devSeq struct {
	dev     int
	k       *kernels.Kernels
	h       *cublas.Handle
	s       *cuda.Stream
	batch   int
	n       int // parameters
	params  uintptr
	grads   uintptr
	mom     uintptr
	bufs    []uintptr // bufs[0] the input, bufs[i+1] layer i's output
	dbufs   []uintptr // their gradients (dbufs[0] unused)
	fwd     []func() error
	bwd     []func() error // bwd[i]: layer i's backward, from dbufs[i+1]
	y       uintptr
	rowLoss uintptr
	loss    uintptr
	classes int
	bn      []bnDev
}

// bnDev is a batch-norm layer's running statistics on the device and on
// the CPU.
type bnDev struct {
	mean, vr uintptr
	cpu      *nn.BNLayer
}

func (d *devSeq) at(off int) uintptr { return uintptr(4 * off) }

func newDevSeq(t *testing.T, m *nn.Model, batch, dev int) *devSeq {
	t.Helper()
	k, s := setup(t, dev)
	d := &devSeq{dev: dev, k: k, h: cublasHandle(t, dev, s), s: s, batch: batch, n: m.NumParams()}
	d.params = devtest.Upload(t, dev, m.Flat.Value)
	d.grads = devtest.Alloc(t, dev, d.n, 4)
	d.mom = devtest.Upload(t, dev, make([]float32, d.n))
	seq, ok := m.Net.(*nn.Sequential)
	if !ok {
		t.Fatalf("%s is a %T, not a Sequential", m.Name, m.Net)
	}
	shape := append([]int{batch}, m.InputShape()...)
	size := func(s []int) int {
		n := 1
		for _, v := range s {
			n *= v
		}
		return n
	}
	d.bufs = []uintptr{devtest.Alloc(t, dev, size(shape), 4)}
	d.dbufs = []uintptr{0}
	pi, bni := 0, 0 // the next parameter, batch-norm layer
	param := func() uintptr {
		p := m.Params[pi]
		pi++
		return uintptr(p.Offset * 4)
	}
	var ws uintptr
	for i, l := range seq.Layers {
		in, din := d.bufs[i], d.dbufs[i]
		if i == 0 {
			din = 0 // the input's gradient: nobody reads it
		}
		var out uintptr
		var f, b func() error
		switch l := l.(type) {
		case *nn.Conv2d:
			g := kernels.ConvGeom{N: batch, C: shape[1], H: shape[2], W: shape[3], Cout: l.Out, K: l.K, Pad: l.Pad}
			ho, wo := g.Out()
			shape = []int{batch, l.Out, ho, wo}
			out = devtest.Alloc(t, dev, size(shape), 4)
			w, bias := param(), param()
			ws = devtest.Alloc(t, dev, g.Workspace(), 4)
			ws := ws
			f = func() error { return kernels.Conv2dForward(d.h, k, out, in, d.params+w, d.params+bias, ws, g) }
			dout := &d.dbufs
			b = func() error {
				return kernels.Conv2dBackward(d.h, k, din, d.grads+w, d.grads+bias, in, d.params+w, (*dout)[i+1], ws, g, false)
			}
		case *nn.BatchNorm:
			st := l.State()
			n, inner := shape[0], size(shape[2:])
			cfg := kernels.BatchNormConfig{C: st.C, Momentum: st.Momentum, Eps: st.Eps}
			out = devtest.Alloc(t, dev, size(shape), 4)
			xhat := devtest.Alloc(t, dev, size(shape), 4)
			bws := devtest.Alloc(t, dev, kernels.BatchNormWorkspace(st.C), 1)
			gamma, beta := param(), param()
			bd := bnDev{mean: devtest.Upload(t, dev, st.RunningMean), vr: devtest.Upload(t, dev, st.RunningVar), cpu: m.BNs[bni]}
			bni++
			d.bn = append(d.bn, bd)
			f = func() error {
				return k.BatchNormForward(s, out, xhat, in, d.params+gamma, d.params+beta, bd.mean, bd.vr, bws, n, inner, cfg, true)
			}
			b = func() error {
				return k.BatchNormBackward(s, din, d.grads+gamma, d.grads+beta, d.dbufs[i+1], xhat, d.params+gamma, bws, n, inner, cfg, false)
			}
		case nn.ReLU:
			n := size(shape)
			out = devtest.Alloc(t, dev, n, 4)
			f = func() error { return k.ReLU(s, out, in, n) }
			b = func() error { return k.ReLUBackward(s, din, d.dbufs[i+1], out, n) }
		case nn.MaxPool2d:
			planes, hh, ww := shape[0]*shape[1], shape[2], shape[3]
			shape = []int{shape[0], shape[1], hh / 2, ww / 2}
			out = devtest.Alloc(t, dev, size(shape), 4)
			arg := devtest.Alloc(t, dev, size(shape), 1)
			f = func() error { return k.MaxPool2d(s, out, arg, in, planes, hh, ww) }
			b = func() error { return k.MaxPool2dBackward(s, din, d.dbufs[i+1], arg, planes, hh, ww) }
		case nn.Flatten:
			shape = []int{shape[0], size(shape[1:])}
			out = in // a view
			f = func() error { return nil }
			b = func() error { return nil }
		case *nn.Linear:
			shape = []int{batch, l.Out}
			out = devtest.Alloc(t, dev, size(shape), 4)
			w, bias := param(), param()
			f = func() error {
				return kernels.LinearForward(d.h, k, out, in, d.params+w, d.params+bias, batch, l.In, l.Out)
			}
			b = func() error {
				return kernels.LinearBackward(d.h, k, din, d.grads+w, d.grads+bias, in, d.params+w, d.dbufs[i+1], batch, l.In, l.Out, false)
			}
		default:
			t.Fatalf("layer %d: no device kernels for %T", i, l)
		}
		dout := devtest.Alloc(t, dev, size(shape), 4)
		if _, ok := l.(nn.Flatten); ok {
			dout = din
			if i == 0 {
				dout = devtest.Alloc(t, dev, size(shape), 4)
			}
		}
		d.bufs, d.dbufs = append(d.bufs, out), append(d.dbufs, dout)
		d.fwd, d.bwd = append(d.fwd, f), append(d.bwd, b)
	}
	if pi != len(m.Params) {
		t.Fatalf("%d of %d parameters placed", pi, len(m.Params))
	}
	d.classes = shape[1]
	d.y, d.rowLoss, d.loss = devtest.Alloc(t, dev, batch, 4), devtest.Alloc(t, dev, batch, 4), devtest.Alloc(t, dev, 1, 4)
	return d
}

// step runs forward, loss, backward and update (SGD) on one batch and
// returns the mean loss.
func (d *devSeq) step(t *testing.T, x []float32, y []int32, cfg kernels.SGDConfig) float32 {
	t.Helper()
	devtest.Put(t, d.dev, d.bufs[0], x)
	devtest.Put(t, d.dev, d.y, y)
	for i, f := range d.fwd {
		if err := f(); err != nil {
			t.Fatalf("layer %d forward: %v", i, err)
		}
	}
	L := len(d.fwd)
	if err := d.k.CrossEntropy(d.s, d.loss, d.rowLoss, d.bufs[L], d.y, d.batch, d.classes); err != nil {
		t.Fatal(err)
	}
	if err := d.k.CrossEntropyBackward(d.s, d.dbufs[L], d.bufs[L], d.y, d.batch, d.classes, 1/float32(d.batch)); err != nil {
		t.Fatal(err)
	}
	for i := L - 1; i >= 0; i-- {
		if err := d.bwd[i](); err != nil {
			t.Fatalf("layer %d backward: %v", i, err)
		}
	}
	if err := d.k.SGD(d.s, d.params, d.grads, d.mom, d.n, cfg); err != nil {
		t.Fatal(err)
	}
	return devtest.Floats(t, d.dev, d.loss, 1)[0]
}

// images is batch i of 1x28x28 images a cnn learns in a few steps (the
// mlp test's task: a tenth of the rows brighter, the one the label names).
func images(i, batch int) ([]float32, []int32) { return devtest.Images(i, batch, 784) }

// models' cnn and cnn-bn trained on the device from the CPU path's
// weights and batches follow the CPU path (nn through gorgonia: its
// convolutions by im2col or Winograd, fused conv+ReLU+pool ops; optim's
// SGD) step by step: the loss of every step within cnnLossTol (relative
// to max(1, loss)), every parameter after the last step within
// cnnParamTol, batch norm's running statistics within cnnParamTol
// relative to max(1, |value|). The differences are summation orders
// (cuBLAS and the fake's loops against OpenBLAS and Winograd), grown over
// the steps.
func TestCNNMatchesCPU(t *testing.T) {
	const (
		dev         = 0
		batch       = 8
		steps       = 8
		cnnLossTol  = 2e-5
		cnnParamTol = 2e-5
	)
	for _, c := range []struct {
		name string
		lr   float64
	}{{"cnn", 0.1}, {"cnn-bn", 0.03}} {
		name := c.name
		t.Run(name, func(t *testing.T) {
			m, err := models.New(name, 5)
			if err != nil {
				t.Fatal(err)
			}
			d := newDevSeq(t, m, batch, dev)
			g, err := m.NewGraph(batch, true)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			cfg := optim.Config{Name: "sgd", LR: c.lr, Momentum: 0.9, WeightDecay: 1e-4}
			opt, err := optim.New(cfg, m.NumParams())
			if err != nil {
				t.Fatal(err)
			}
			dcfg := kernels.SGDConfig{LR: float32(cfg.LR), Momentum: float32(cfg.Momentum), WeightDecay: float32(cfg.WeightDecay)}
			var losses []float32
			for i := 0; i < steps; i++ {
				x, y := images(i, batch)
				cpu, err := g.Step(context.Background(), x, y)
				if err != nil {
					t.Fatal(err)
				}
				opt.Step(m.Flat.Value, m.Flat.Grad)
				m.ZeroGrad()
				gpu := d.step(t, x, y, dcfg)
				losses = append(losses, cpu)
				diff := math.Abs(float64(gpu) - float64(cpu))
				t.Logf("step %d: loss CPU %.7f, device %.7f (difference %.2g)", i, cpu, gpu, diff)
				if diff > cnnLossTol*math.Max(1, math.Abs(float64(cpu))) || math.IsNaN(float64(gpu)) {
					t.Errorf("step %d: device loss %v, CPU %v", i, gpu, cpu)
				}
			}
			got := devtest.Floats(t, dev, d.params, d.n)
			var worst float64
			at := 0
			for i, v := range got {
				if diff := math.Abs(float64(v) - float64(m.Flat.Value[i])); diff > worst || math.IsNaN(diff) {
					worst, at = diff, i
				}
			}
			t.Logf("after %d steps: largest parameter difference %.3g (element %d)", steps, worst, at)
			if worst > cnnParamTol || math.IsNaN(worst) {
				t.Errorf("parameter %d: device %v, CPU %v", at, got[at], m.Flat.Value[at])
			}
			if first, last := losses[0], losses[len(losses)-1]; !(last < 0.9*first) {
				t.Errorf("the loss went from %v to %v: the test does not train", first, last)
			}
			for j, bn := range d.bn {
				c := bn.cpu.C
				for what, pair := range map[string][2][]float32{
					"mean":     {devtest.Floats(t, dev, bn.mean, c), bn.cpu.RunningMean},
					"variance": {devtest.Floats(t, dev, bn.vr, c), bn.cpu.RunningVar},
				} {
					for i := range pair[0] {
						if d := math.Abs(float64(pair[0][i] - pair[1][i])); !(d <= cnnParamTol*math.Max(1, math.Abs(float64(pair[1][i])))) {
							t.Errorf("batch norm %d running %s [%d]: device %v, CPU %v", j, what, i, pair[0][i], pair[1][i])
						}
					}
				}
			}
		})
	}
}
