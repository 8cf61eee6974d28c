package nccl_test

import (
	"context"
	"fmt"
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
	ref, err := pipelineRef()
	if err != nil {
		t.Fatal(err)
	}
	cs := newWorld(t, 2, comm.Options{}) // the registry's "nccl" stages host buffers to the rank's GPU
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		return pipelineStage(ctx, c, ref)
	})
	if err != nil {
		t.Fatal(err)
	}
}

const pipeSteps, pipeBatch = 3, 10

// pipeRef is the unsplit model's losses and parameters after training.
type pipeRef struct {
	data *data.Dataset
	loss []float64
	flat []float32
}

func pipeSGD(n int) (optim.Optimizer, error) {
	return optim.New(optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}, n)
}

// pipelineRef trains the unsplit mlp.
func pipelineRef() (*pipeRef, error) {
	d := data.Synthetic(pipeSteps*pipeBatch, 11)
	ref, err := models.New("mlp", 3)
	if err != nil {
		return nil, err
	}
	gr, err := ref.NewGraph(pipeBatch, true)
	if err != nil {
		return nil, err
	}
	defer gr.Close()
	in := ref.InputSize()
	opt, err := pipeSGD(len(ref.Flat.Value))
	if err != nil {
		return nil, err
	}
	out := &pipeRef{data: d}
	for s := 0; s < pipeSteps; s++ {
		l, err := gr.Step(context.Background(), d.Images[s*pipeBatch*in:(s+1)*pipeBatch*in], d.Labels[s*pipeBatch:(s+1)*pipeBatch])
		if err != nil {
			return nil, err
		}
		out.loss = append(out.loss, float64(l))
		opt.Step(ref.Flat.Value, ref.Flat.Grad)
		ref.ZeroGrad()
	}
	out.flat = ref.Flat.Value
	return out, nil
}

// pipelineStage runs c's stage of a 2-stage 1F1B pipeline of the mlp and
// checks its losses and parameters against the unsplit model's.
func pipelineStage(ctx context.Context, c comm.Comm, ref *pipeRef) error {
	d := ref.data
	m, err := models.New("mlp", 3)
	if err != nil {
		return err
	}
	in := m.InputSize()
	p, err := pipeline.New(ctx, c, m, pipeline.Config{Micro: 4, Schedule: pipeline.OneFOneB}, pipeBatch)
	if err != nil {
		return err
	}
	defer p.Close()
	_, n := p.Range()
	o, err := pipeSGD(n)
	if err != nil {
		return err
	}
	for s := 0; s < pipeSteps; s++ {
		l, err := p.Step(ctx, d.Images[s*pipeBatch*in:(s+1)*pipeBatch*in], d.Labels[s*pipeBatch:(s+1)*pipeBatch])
		if err != nil {
			return err
		}
		if w := ref.loss[s]; math.Abs(l-w) > 1e-5*math.Abs(w) {
			return fmt.Errorf("stage %d step %d: loss %v, unsplit %v", c.Rank(), s, l, w)
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
		got, want := m.Flat.Value[pi.Offset:pi.Offset+pi.Size], ref.flat[pi.Offset:pi.Offset+pi.Size]
		var diff, norm float64
		for i := range got {
			e := float64(got[i]) - float64(want[i])
			diff += e * e
			norm += float64(want[i]) * float64(want[i])
		}
		if math.Sqrt(diff) > 1e-5*math.Sqrt(norm) {
			return fmt.Errorf("stage %d: %s differs from the unsplit model", c.Rank(), pi.Name)
		}
	}
	return nil
}
