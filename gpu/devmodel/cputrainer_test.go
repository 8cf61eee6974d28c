package devmodel_test

import (
	"context"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// cpuTrainer trains a model the CPU's way, the reference of the device's
// tests: nn's training graph on the whole batch, optim on the host,
// clipping as train's.
type cpuTrainer struct {
	m    *nn.Model
	g    *nn.Graph
	opt  optim.Optimizer
	clip float64
}

// newCPUTrainer builds m's training graph for batch samples and an
// optimizer of oc; clip > 0 clips the gradients' global norm to it.
// The test's cleanup closes the graph.
func newCPUTrainer(t *testing.T, m *nn.Model, batch int, oc optim.Config, clip float64) *cpuTrainer {
	t.Helper()
	g, err := m.NewGraph(batch, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	opt, err := optim.New(oc, m.NumParams())
	if err != nil {
		t.Fatal(err)
	}
	return &cpuTrainer{m: m, g: g, opt: opt, clip: clip}
}

// backward runs forward and backward on a batch: the loss; the gradients
// in m.Flat.Grad until update.
func (c *cpuTrainer) backward(t *testing.T, x []float32, y []int32) float32 {
	t.Helper()
	l, err := c.g.Step(context.Background(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// update clips, steps the optimizer and zeroes the gradients.
func (c *cpuTrainer) update() {
	if c.clip > 0 {
		devtest.ClipGrads(c.m.Flat.Grad, c.clip)
	}
	c.opt.Step(c.m.Flat.Value, c.m.Flat.Grad)
	c.m.ZeroGrad()
}

// step is backward then update: the loss.
func (c *cpuTrainer) step(t *testing.T, x []float32, y []int32) float32 {
	t.Helper()
	l := c.backward(t, x, y)
	c.update()
	return l
}
