package kernels_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// Adam and AdamW are bit for bit optim's (PyTorch's formulas; AdamW as
// vecmath's kernel), with and without weight decay, over five steps: the
// parameters and both moments. Aligned buffers (four values a thread,
// 10007 % 4 after them) and the moment v 4 bytes off 16-byte alignment
// (one a thread).
func TestAdam(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for i, name := range []string{"adam", "adamw", "adamw"} {
		for _, wd := range []float64{0, 0.01} {
			const n = 10007
			shift := i / 2
			cfg := optim.Config{Name: name, LR: 3e-3, WeightDecay: wd, Beta1: 0.85, Beta2: 0.995, Eps: 1e-7}
			opt, err := optim.New(cfg, n)
			if err != nil {
				t.Fatal(err)
			}
			p := devtest.Vals(150, n, 1)
			dp, dg := devtest.Upload(t, dev, p), devtest.Alloc(t, dev, n, 4)
			dm, dv := devtest.Upload(t, dev, make([]float32, n)), devtest.Alloc(t, dev, n+shift, 4)+uintptr(4*shift)
			devtest.Put(t, dev, dv, make([]float32, n))
			ac := kernels.AdamConfig{LR: cfg.LR, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: wd, Decoupled: name == "adamw"}
			for step := int64(1); step <= 5; step++ {
				g := devtest.Vals(151+int(step), n, 0.5)
				g[3] = 0
				devtest.Put(t, dev, dg, g)
				opt.Step(p, g)
				if err := k.Adam(s, dp, dg, dm, dv, n, ac, step); err != nil {
					t.Fatal(err)
				}
			}
			what := fmt.Sprintf("%s wd %v (v off by %d): ", name, wd, 4*shift)
			st, _ := opt.State()
			same(t, what+"params", devtest.Floats(t, dev, dp, n), p)
			same(t, what+"exp_avg", devtest.Floats(t, dev, dm, n), st["exp_avg"])
			same(t, what+"exp_avg_sq", devtest.Floats(t, dev, dv, n), st["exp_avg_sq"])
		}
	}
}

// ClipGradNorm clips by the global norm as train does: the norm within
// kernels.NormTol of the float64 sum's (a deterministic two-level tree
// on the device), the gradients bit for bit (the same float32 factor);
// nothing changes below the limit or for a norm that is not finite.
func TestClipGradNorm(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	ws := devtest.Alloc(t, dev, kernels.ClipWorkspace, 1)
	for _, c := range []struct {
		n   int
		max float64
		bad float32
	}{{100003, 1, 0}, {100003, 1e6, 0}, {1, 0.25, 0}, {7, 0.5, float32(math.Inf(1))}, {300, 0.5, float32(math.NaN())}, {0, 1, 0}} {
		g := devtest.Vals(160, c.n, 0.5)
		if c.bad != 0 {
			g[c.n/2] = c.bad
		}
		dg := devtest.Upload(t, dev, g)
		if err := k.ClipGradNorm(s, dg, c.n, c.max, ws); err != nil {
			t.Fatal(err)
		}
		norm := devtest.ClipGrads(g, c.max)
		got := devtest.Floats(t, dev, dg, c.n)
		what := fmt.Sprintf("n %d max %v", c.n, c.max)
		same(t, what, got, g)
		var dnorm [1]float64
		if err := copyD(dev, &dnorm, ws); err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(dnorm[0] - norm); !(d <= kernels.NormTol*norm) && !(math.IsNaN(norm) && math.IsNaN(dnorm[0])) && dnorm[0] != norm {
			t.Errorf("%s: norm %v, CPU %v", what, dnorm[0], norm)
		}
	}
}

// Dropout keeps what nn's Dropout keeps (its mask, a hash of the seed,
// the graph's run and the element's place in the global batch), read from
// nn's training graphs of one sample each (at sample offsets 5, 6, 7, as
// three ranks): a Linear with identity weights after the dropout has a
// zero weight-gradient row exactly where the dropout dropped. The kept
// values are scaled by float32(1/(1-p)) bit for bit, about 1-p of them
// are kept, and the backward applies the same mask.
func TestDropout(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	const d, batch, p, seed, offset = 64, 3, 0.3, 12345, 5
	x := devtest.Vals(170, batch*d, 1)
	var models []*nn.Model
	var graphs []*nn.Graph
	for n := 0; n < batch; n++ {
		m, err := nn.New("drop", nn.Seq(&nn.Dropout{P: p, Seed: seed}, &nn.Linear{In: d, Out: d}), []int{d}, 1)
		if err != nil {
			t.Fatal(err)
		}
		w := m.Params[0]
		clear(m.Flat.Value)
		for i := 0; i < d; i++ {
			m.Flat.Value[w.Offset+i*d+i] = 1
		}
		gr, err := m.NewGraph(1, true)
		if err != nil {
			t.Fatal(err)
		}
		defer gr.Close()
		gr.SampleOffset = offset + n
		models, graphs = append(models, m), append(graphs, gr)
	}
	dX, y, dx := devtest.Upload(t, dev, x), devtest.Alloc(t, dev, batch*d, 4), devtest.Alloc(t, dev, batch*d, 4)
	for run := int64(1); run <= 2; run++ {
		if err := k.Dropout(s, y, dX, batch*d, p, seed, run, offset*d); err != nil {
			t.Fatal(err)
		}
		if err := k.Dropout(s, dx, dX, batch*d, p, seed, run, offset*d); err != nil { // backward: the same
			t.Fatal(err)
		}
		got, gotB := devtest.Floats(t, dev, y, batch*d), devtest.Floats(t, dev, dx, batch*d)
		for n, gr := range graphs {
			m := models[n]
			m.ZeroGrad()
			if _, err := gr.Step(context.Background(), x[n*d:(n+1)*d], []int32{int32(n)}); err != nil {
				t.Fatal(err)
			}
			w := m.Params[0]
			for i := 0; i < d; i++ {
				zero := true
				for _, g := range m.Flat.Grad[w.Offset+i*d : w.Offset+(i+1)*d] {
					zero = zero && g == 0
				}
				if zero != (got[n*d+i] == 0) {
					t.Errorf("run %d, sample %d, element %d: nn dropped it %v, the device %v", run, offset+n, i, zero, got[n*d+i] == 0)
				}
			}
		}
		scale, kept := float32(1/(1-p)), 0
		for i, v := range got {
			if v != 0 {
				kept++
				if v != x[i]*scale {
					t.Fatalf("run %d: y[%d] = %v, want %v", run, i, v, x[i]*scale)
				}
			}
			if gotB[i] != v {
				t.Fatalf("run %d: backward [%d] = %v, forward %v", run, i, gotB[i], v)
			}
		}
		if f := float64(kept) / float64(len(got)); math.Abs(f-(1-p)) > 0.1 {
			t.Errorf("run %d: kept %.2f, want about %.2f", run, f, 1-p)
		}
	}
}
