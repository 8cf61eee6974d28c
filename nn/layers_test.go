package nn

import (
	"strings"

	"context"
	G "gorgonia.org/gorgonia"
	"math"
	"math/rand/v2"
	"testing"
)

// layerCase is a small model around a layer under test.
type layerCase struct {
	name string
	net  func() Layer
	in   []int
	// input value j of sample i
	x func(i, j int) float32
}

func smooth(i, j int) float32 { return float32(math.Sin(float64(i*31+j)*0.37)) * 1.5 }

func layerCases() []layerCase {
	return []layerCase{
		{"gelu", func() Layer { return Seq(&Linear{6, 8}, GELU{}, &Linear{8, 3}) }, []int{6}, smooth},
		{"tanh", func() Layer { return Seq(&Linear{6, 8}, Tanh{}, &Linear{8, 3}) }, []int{6}, smooth},
		{"layernorm", func() Layer { return Seq(&Linear{6, 8}, &LayerNorm{C: 8}, &Linear{8, 3}) }, []int{6}, smooth},
		{"batchnorm1d", func() Layer { return Seq(&Linear{6, 8}, BatchNorm1d(8), &Linear{8, 3}) }, []int{6}, smooth},
		{"residual", func() Layer {
			return Seq(&Linear{6, 8}, &Residual{Fn: Seq(&Linear{8, 8}, Tanh{})}, &Linear{8, 3})
		}, []int{6}, smooth},
		{"attention", func() Layer {
			return Seq(&Embedding{Num: 11, Dim: 8}, &CausalSelfAttention{Dim: 8, Heads: 2}, &LayerNorm{C: 8}, GELU{}, Flatten{}, &Linear{40, 3})
		}, []int{5}, func(i, j int) float32 { return float32((i*7 + j*3) % 11) }},
		{"positions", func() Layer {
			return Seq(&Embedding{Num: 11, Dim: 4}, &PositionEmbedding{T: 5, Dim: 4, Std: 0.5}, Tanh{}, Flatten{}, &Linear{20, 3})
		}, []int{5}, func(i, j int) float32 { return float32((i*3 + j*5) % 11) }},
	}
}

func (c layerCase) batch(m *Model, n int) ([]float32, []int32) {
	per := m.InputSize()
	x := make([]float32, n*per)
	for i := range x {
		x[i] = c.x(i/per, i%per)
	}
	y := make([]int32, n)
	for i := range y {
		y[i] = int32(i % m.Classes())
	}
	return x, y
}

// TestLayerGradients checks every parameter tensor's gradient against
// central differences of the loss along a random direction in that
// tensor, for models of each layer (and the gradients flowing through
// each layer to the ones before it).
func TestLayerGradients(t *testing.T) {
	for _, c := range layerCases() {
		t.Run(c.name, func(t *testing.T) {
			m, err := New(c.name, c.net(), c.in, 3)
			if err != nil {
				t.Fatal(err)
			}
			gr, err := m.NewGraph(4, true)
			if err != nil {
				t.Fatal(err)
			}
			x, y := c.batch(m, 4)
			ctx := context.Background()
			if _, err := gr.Step(ctx, x, y); err != nil {
				t.Fatal(err)
			}
			grad := append([]float32(nil), m.Flat.Grad...)
			r := rand.New(rand.NewPCG(7, 0))
			base := append([]float32(nil), m.Flat.Value...)
			for _, p := range m.Params {
				d := make([]float64, p.Size)
				var norm float64
				for i := range d {
					d[i] = 2*r.Float64() - 1
					norm += d[i] * d[i]
				}
				var gd float64
				for i := range d {
					d[i] /= math.Sqrt(norm)
					gd += d[i] * float64(grad[p.Offset+i])
				}
				const eps = 1e-2
				loss := func(s float64) float64 {
					for i := range d {
						m.Flat.Value[p.Offset+i] = float32(float64(base[p.Offset+i]) + s*d[i])
					}
					l, err := gr.Step(ctx, x, y)
					if err != nil {
						t.Fatal(err)
					}
					return float64(l)
				}
				num := (loss(eps) - loss(-eps)) / (2 * eps)
				copy(m.Flat.Value, base)
				if rel := math.Abs(num-gd) / math.Max(math.Abs(gd), 1e-2); rel > 1e-2 {
					t.Errorf("%s: backward %.6g, finite differences %.6g (%.2g relative)", p.Name, gd, num, rel)
				}
			}
		})
	}
}

// TestDropout: masks depend on the run and on each sample's place in the
// global batch, so two half-batch graphs (offsets 0 and B) drop what one
// whole-batch graph drops; the kept share is about 1-P; evaluation graphs
// drop nothing.
func TestDropout(t *testing.T) {
	net := func() Layer { return Seq(&Linear{6, 16}, &Dropout{P: 0.3, Seed: 5}, &Linear{16, 3}) }
	c := layerCase{in: []int{6}, x: smooth}
	whole, _ := New("d", net(), c.in, 1)
	half, _ := New("d", net(), c.in, 1)
	gw, err := whole.NewGraph(8, true)
	if err != nil {
		t.Fatal(err)
	}
	ga, _ := half.NewGraph(4, true)
	gb, _ := half.NewGraph(4, true)
	gb.SampleOffset = 4
	x, y := c.batch(whole, 8)
	ctx := context.Background()
	for step := 0; step < 3; step++ {
		whole.ZeroGrad()
		half.ZeroGrad()
		lw, err := gw.Step(ctx, x, y)
		if err != nil {
			t.Fatal(err)
		}
		la, _ := ga.Step(ctx, x[:4*6], y[:4])
		lb, _ := gb.Step(ctx, x[4*6:], y[4:])
		if d := math.Abs(float64(lw) - float64(la+lb)/2); d > 1e-6 {
			t.Fatalf("step %d: whole-batch loss %v, halves %v and %v", step, lw, la, lb)
		}
		for i, g := range whole.Flat.Grad {
			if h := half.Flat.Grad[i] / 2; math.Abs(float64(g-h)) > 1e-6 {
				t.Fatalf("step %d: gradient %d: whole batch %v, halves %v", step, i, g, h)
			}
		}
	}
	op := &dropoutOp{p: 0.3, seed: 5, runs: new(int64), offset: new(int)}
	kept := 0
	for j := 0; j < 10000; j++ {
		if op.keep(0, 10000, j) {
			kept++
		}
	}
	if kept < 6800 || kept > 7200 {
		t.Errorf("kept %d of 10000 at P 0.3", kept)
	}
	ev, _ := whole.NewGraph(8, false)
	a, _ := ev.Logits(x)
	b, _ := ev.Logits(x)
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("evaluation graph output changes from run to run")
		}
	}
}

// TestBadParamIndex: a layer that asks for a parameter it did not declare
// gets an error naming it, not a panic, in every kind of graph.
func TestBadParamIndex(t *testing.T) {
	bad := Func([]Param{{Name: "weight", Shape: []int{4}, Init: Fill(1)}}, func(b *Builder, x *G.Node) (*G.Node, error) {
		return G.BroadcastHadamardProd(x, b.Param(1), nil, []byte{0})
	})
	_, err := New("bad", Seq(&Linear{3, 4}, bad, &Linear{4, 2}), []int{3}, 1)
	if err == nil || !strings.Contains(err.Error(), "asks for parameter 1; it declares 1") || !strings.Contains(err.Error(), "layer 1") {
		t.Fatalf("error %v", err)
	}
}
