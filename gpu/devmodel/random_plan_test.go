package devmodel_test

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// randomNet builds a random stack of the device's layers over (N, C) rows
// (or (N, T, C) sequences with attention), C kept by Residuals, nested
// Sequentials, views (Flatten, a Dropout of 0) anywhere, Linears followed
// by GELUs (the fusions) or not, ending in a Linear to 10 classes.
type randomNet struct {
	r     *rand.Rand
	seq   bool // (N, T, C) input: attention, no batch norm
	stage bool // neither batch norm nor Dropout (a pipeline stage's)
	c     int
	s     []string // the layers, for the failure message
}

func (g *randomNet) layers(depth, n int) []nn.Layer {
	var out []nn.Layer
	for i := 0; i < n; i++ {
		out = append(out, g.layer(depth))
	}
	return out
}

func (g *randomNet) layer(depth int) nn.Layer {
	c := g.c
	k := g.r.Intn(12)
	if depth > 2 && k >= 9 {
		k = g.r.Intn(9)
	}
	switch k {
	case 0, 1:
		if g.seq && g.r.Intn(2) == 0 {
			g.s = append(g.s, "attention")
			return &nn.CausalSelfAttention{Dim: c, Heads: 2}
		}
		out := []int{c, 2 * c, 12}[g.r.Intn(3)]
		g.c = out
		g.s = append(g.s, fmt.Sprintf("Linear(%d,%d)", c, out))
		return &nn.Linear{In: c, Out: out}
	case 2:
		g.s = append(g.s, "GELU")
		return nn.GELU{}
	case 3:
		if g.r.Intn(2) == 0 {
			g.s = append(g.s, "ReLU")
			return nn.ReLU{}
		}
		g.s = append(g.s, "Tanh")
		return nn.Tanh{}
	case 4:
		g.s = append(g.s, fmt.Sprintf("LayerNorm(%d)", c))
		return &nn.LayerNorm{C: c}
	case 5:
		if g.stage {
			g.s = append(g.s, "Flatten")
			return nn.Flatten{}
		}
		g.s = append(g.s, "Dropout(0)")
		return &nn.Dropout{}
	case 6:
		if g.stage {
			g.s = append(g.s, "GELU")
			return nn.GELU{}
		}
		if !g.seq && g.r.Intn(2) == 0 {
			g.s = append(g.s, fmt.Sprintf("BatchNorm1d(%d)", c))
			return nn.BatchNorm1d(c)
		}
		g.s = append(g.s, "Dropout(0.2)")
		return &nn.Dropout{P: 0.2, Seed: uint64(g.r.Intn(100))}
	case 7:
		if g.seq {
			g.s = append(g.s, "Dropout(0)")
			return &nn.Dropout{}
		}
		g.s = append(g.s, "Flatten")
		return nn.Flatten{}
	case 8:
		out := []int{c, 2 * c}[g.r.Intn(2)]
		g.s = append(g.s, fmt.Sprintf("Linear(%d,%d)", c, out), "GELU")
		g.c = out
		return nn.Seq(&nn.Linear{In: c, Out: out}, nn.GELU{})
	case 9, 10:
		g.s = append(g.s, "Residual[")
		ls := g.layers(depth+1, 1+g.r.Intn(3))
		if g.c != c { // back to c
			g.s = append(g.s, fmt.Sprintf("Linear(%d,%d)", g.c, c))
			ls = append(ls, &nn.Linear{In: g.c, Out: c})
			g.c = c
		}
		g.s = append(g.s, "]")
		var fn nn.Layer = nn.Seq(ls...)
		if len(ls) == 1 && g.r.Intn(2) == 0 {
			fn = ls[0]
		}
		return &nn.Residual{Fn: fn}
	}
	g.s = append(g.s, "Seq[")
	ls := g.layers(depth+1, 1+g.r.Intn(3))
	g.s = append(g.s, "]")
	return nn.Seq(ls...)
}

// TestSharedPlanRandomModels: random compositions of the device's layers
// train bit for bit as with each buffer a pool block of its own held the
// whole step, and as without the fusions across layers, and half of them
// as ZeRO-3 units of one layer on one rank too (4 steps of SGD with
// momentum, a short batch among them, an evaluation between; fp32, some
// under bf16 autocast):
// a buffer's life computed too short, or a fusion where its pattern does
// not hold, changes the bits.
func TestSharedPlanRandomModels(t *testing.T) {
	cudafake.RequireCUDA(t)
	r := rand.New(rand.NewSource(28))
	for i := 0; i < 60; i++ {
		seq := i%3 == 2
		g := &randomNet{r: r, seq: seq, c: 8}
		ls := g.layers(0, 2+r.Intn(4))
		in := []int{8}
		batch := func(k int) ([]float32, []int32) {
			x, y := devtest.Images(k, 5, 8)
			return x, y
		}
		if seq {
			in = []int{4, 8}
			batch = func(k int) ([]float32, []int32) { return devtest.Images(k, 5, 32) }
			if g.c != 8 {
				ls = append(ls, &nn.Linear{In: g.c, Out: 8})
				g.s = append(g.s, fmt.Sprintf("Linear(%d,8)", g.c))
			}
			ls = append(ls, nn.Flatten{})
			g.s = append(g.s, "Flatten")
			g.c = 32
		}
		ls = append(ls, &nn.Linear{In: g.c, Out: 10})
		g.s = append(g.s, fmt.Sprintf("Linear(%d,10)", g.c))
		prec := gemm.FP32
		if i%4 == 3 {
			prec = gemm.BF16
		}
		desc := strings.Join(g.s, " ")
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			run := func(region, fuse, zero3 bool) (losses, params []float32) {
				defer devmodel.SetPlanRegion(region)()
				defer devmodel.SetFuse(fuse)()
				m, err := nn.New("random", nn.Seq(ls...), in, int64(i))
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				cfg := devmodel.Config{Device: dev, Batch: 5, Precision: prec, Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}}
				if zero3 { // units of one layer: a unit's ops and buffers on their own
					cfg = shardAll(cfg, m, true)
				}
				d, err := devmodel.Place(m, cfg)
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				defer d.Close()
				for k := 0; k < 4; k++ {
					x, y := batch(k)
					if k == 2 { // a short batch: planned again in the region
						x, y = x[:3*len(x)/5], y[:3]
					}
					l, err := d.Step(x, y)
					if err != nil {
						t.Fatalf("%s: %v", desc, err)
					}
					losses = append(losses, l)
					if k == 1 {
						l, _, err := d.Eval(x, y)
						if err != nil {
							t.Fatalf("%s: %v", desc, err)
						}
						losses = append(losses, l)
					}
				}
				return losses, devtest.Floats(t, dev, d.ParamShard(), d.N)
			}
			l0, p0 := run(false, false, false)
			for _, c := range []struct{ region, fuse, zero3 bool }{{true, false, false}, {false, true, false}, {true, true, false}, {true, true, i%2 == 1}} {
				l1, p1 := run(c.region, c.fuse, c.zero3)
				if j, ok := bitsEqual(l1, l0); !ok {
					t.Fatalf("%s (%s): region %v, fused %v, zero3 %v: loss %d %v; each buffer whole, unfused: %v", desc, prec, c.region, c.fuse, c.zero3, j, l1[j], l0[j])
				}
				if j, ok := bitsEqual(p1, p0); !ok || math.IsNaN(float64(p0[0])) {
					t.Fatalf("%s (%s): region %v, fused %v, zero3 %v: parameter %d %v; each buffer whole, unfused: %v", desc, prec, c.region, c.fuse, c.zero3, j, p1[j], p0[j])
				}
			}
			t.Logf("%s (%s): bit for bit", desc, prec)
		})
	}
}

// randomStageNet draws a random model of TestStagesRandomModels' kind
// from r (no batch norm or Dropout: a pipeline stage's layers; at least
// two top-level layers and a Linear to 10 classes last): its top-level
// layers, its description, and a constructor of the model with the
// layers' parameters drawn from seed.
func randomStageNet(t *testing.T, r *rand.Rand, seed int) (ls []nn.Layer, desc string, mk func() *nn.Model) {
	g := &randomNet{r: r, stage: true, c: 8}
	ls = g.layers(0, 2+r.Intn(4))
	ls = append(ls, &nn.Linear{In: g.c, Out: 10})
	g.s = append(g.s, fmt.Sprintf("Linear(%d,10)", g.c))
	desc = strings.Join(g.s, " ")
	return ls, desc, func() *nn.Model {
		m, err := nn.New("random", nn.Seq(ls...), []int{8}, int64(seed))
		if err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		return m
	}
}

// TestStagesRandomModels: random models without batch norm or Dropout
// split into two pipeline stages at each top-level boundary (between a
// Linear and the GELU after it among them: no fusion across a stage's
// edge) train as the whole model on the device (micro-batches 2, 2, 1 of
// 5; 3 steps of SGD with momentum; within TestStagesMatchWhole's
// tolerances: the micro-batches sum the gradients in another order).
func TestStagesRandomModels(t *testing.T) {
	cudafake.RequireCUDA(t)
	r := rand.New(rand.NewSource(29))
	cfg := devmodel.Config{Device: dev, Batch: 5, Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}}
	batch := func(k int) ([]float32, []int32) { return devtest.Images(k, 5, 8) }
	for i := 0; i < 12; i++ {
		ls, desc, mk := randomStageNet(t, r, i)
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			whole := mk()
			wl := wholeRun(t, whole, cfg, 3, 0, batch)
			for b := 1; b < len(ls); b++ {
				m := mk()
				sl := stageRun(t, m, []int{0, b, len(ls)}, cfg, []int{2, 2, 1}, 3, 0, batch)
				for k := range sl {
					if d := math.Abs(sl[k] - wl[k]); !(d <= 2e-5*math.Max(1, math.Abs(wl[k]))) {
						t.Fatalf("%s split at %d: step %d: loss %v; the whole model %v", desc, b, k, sl[k], wl[k])
					}
				}
				if w, at := worst(m.Flat.Value, whole.Flat.Value, 1); !(w <= 2e-5) {
					t.Fatalf("%s split at %d: parameter %d: %v; the whole model %v", desc, b, at, m.Flat.Value[at], whole.Flat.Value[at])
				}
			}
			t.Logf("%s: every split as the whole model", desc)
		})
	}
}
