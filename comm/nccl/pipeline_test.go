package nccl_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/pipeline"
)

// TestPipelineOverNCCL: a 2-stage 1F1B pipeline of the mlp over the nccl
// backend (host activations staged to each rank's GPU) trains exactly as
// the unsplit model does: the pipeline's send/recv pattern (two tags per
// micro-batch, receives posted ahead) on NCCL's per-pair communicators.
func TestPipelineOverNCCL(t *testing.T) {
	cudafake.RequireFake(t)
	const k, steps, batch = 2, 3, 10
	d := data.Synthetic(steps*batch, 11)
	sgd := func(n int) optim.Optimizer {
		o, err := optim.New(optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}, n)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	// The unsplit model.
	ref, err := models.New("mlp", 3)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := ref.NewGraph(batch, true)
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	in := ref.InputSize()
	opt := sgd(len(ref.Flat.Value))
	var refLoss []float64
	for s := 0; s < steps; s++ {
		l, err := gr.Step(context.Background(), d.Images[s*batch*in:(s+1)*batch*in], d.Labels[s*batch:(s+1)*batch])
		if err != nil {
			t.Fatal(err)
		}
		refLoss = append(refLoss, float64(l))
		opt.Step(ref.Flat.Value, ref.Flat.Grad)
		ref.ZeroGrad()
	}

	cs := newWorld(t, k, comm.Options{}) // the registry's "nccl" stages host buffers to the rank's GPU
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		m, err := models.New("mlp", 3)
		if err != nil {
			return err
		}
		p, err := pipeline.New(ctx, c, m, pipeline.Config{Micro: 4, Schedule: pipeline.OneFOneB}, batch)
		if err != nil {
			return err
		}
		defer p.Close()
		_, n := p.Range()
		o := sgd(n)
		for s := 0; s < steps; s++ {
			l, err := p.Step(ctx, d.Images[s*batch*in:(s+1)*batch*in], d.Labels[s*batch:(s+1)*batch])
			if err != nil {
				return err
			}
			if w := refLoss[s]; math.Abs(l-w) > 1e-5*math.Abs(w) {
				t.Errorf("stage %d step %d: loss %v, unsplit %v", c.Rank(), s, l, w)
			}
			p.Update(o)
		}
		from, to := p.Layers()
		first, _, _ := m.LayerParamRange(from)
		end := len(m.Params)
		if to < m.NumLayers() {
			end, _, _ = m.LayerParamRange(to)
		}
		for _, pi := range m.Params[first:end] {
			got, want := m.Flat.Value[pi.Offset:pi.Offset+pi.Size], ref.Flat.Value[pi.Offset:pi.Offset+pi.Size]
			var diff, norm float64
			for i := range got {
				e := float64(got[i]) - float64(want[i])
				diff += e * e
				norm += float64(want[i]) * float64(want[i])
			}
			if math.Sqrt(diff) > 1e-5*math.Sqrt(norm) {
				t.Errorf("stage %d: %s differs from the unsplit model", c.Rank(), pi.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
