package devmodel_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

var bf16Shape = models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}

func bf16GPT(t *testing.T) *nn.Model {
	t.Helper()
	return gptModel(t, bf16Shape, 3)
}

// matrixWeights is the number of parameters the model's matrix products
// read: the weights (2-D parameters) of its Linear layers and attention
// projections, from its layer tree's parameter declarations. The
// embeddings are gathered by rows; biases and norms are no products'
// operands.
func matrixWeights(t *testing.T, m *nn.Model) int64 {
	t.Helper()
	var n int64
	var walk func(l nn.Layer)
	walk = func(l nn.Layer) {
		switch l.(type) {
		case *nn.Linear, *nn.CausalSelfAttention:
			for _, p := range l.Params() {
				if len(p.Shape) == 2 {
					n += int64(p.Shape[0] * p.Shape[1])
				}
			}
		}
		if c, ok := l.(nn.Container); ok {
			for _, ch := range c.Children() {
				walk(ch.Layer)
			}
		}
	}
	walk(m.Net)
	if n == 0 {
		t.Fatalf("%s: no matrix weights", m.Name)
	}
	return n
}

// placeBF16 places m with bf16 autocast, with the weight cache or
// without ($GDIST_AUTOCAST_CACHE=0, read at placement).
func placeBF16(t *testing.T, m *nn.Model, cache bool) *devmodel.Model {
	t.Helper()
	v := "1"
	if !cache {
		v = "0"
	}
	t.Setenv(gemm.EnvAutocastCache, v)
	t.Setenv(gemm.EnvBF16Cast, "kernel") // the casts counted here
	d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: 2, Precision: gemm.BF16,
		Optim: optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, ClipGrad: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func bitsEqual(a, b []float32) (int, bool) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return -1, true
}

// A tiny gpt's bf16 autocast steps with the weight cache (gpu/gemm's
// Weights, registered by Place) are bit for bit those without it: every
// loss and parameter over 6 steps of AdamW with clipping, and an
// evaluation in between; each step casts each Linear weight once
// (CastStats.Weights = the model's matrix weights, from its parameter
// list) where the uncached engine casts it twice (the forward product
// and the backward's input-gradient product), the activations and
// gradients as before. The cache follows every change of the
// parameters: each Update (the next step's loss would be stale without),
// CopyFromHost (after an evaluation filled the cache), and a write into
// Params announced with ParamsChanged (as a gather into them is).
func TestBF16WeightCache(t *testing.T) {
	cudafake.RequireCUDA(t)
	mc, mu := bf16GPT(t), bf16GPT(t)
	cached, plain := placeBF16(t, mc, true), placeBF16(t, mu, false)
	if !strings.Contains(cached.Products(), "cuBLAS") {
		t.Skip(cached.Products())
	}
	W := matrixWeights(t, mc)
	params := func(d *devmodel.Model) []float32 { return devtest.Floats(t, dev, d.Params, d.N) }
	same := func(what string) {
		t.Helper()
		if i, ok := bitsEqual(params(cached), params(plain)); !ok {
			t.Fatalf("%s: parameter %d differs from the uncached run's", what, i)
		}
	}
	// step i; an evaluation since the last change has cast the weights
	// already (evaluated)
	step := func(i int, evaluated bool) {
		t.Helper()
		x, y := text(i, 2, bf16Shape.Context)
		c0, p0 := cached.Casts(), plain.Casts()
		lc, err := cached.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		lp, err := plain.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(lc) != math.Float32bits(lp) {
			t.Fatalf("step %d: loss %v with the cache, %v without", i, lc, lp)
		}
		c, p := cached.Casts().Sub(c0), plain.Casts().Sub(p0)
		want := W // cast by the forward products, reused by backward's
		if evaluated {
			want = 0
		}
		if c.Weights != want || c.WeightReuses != 2*W-want {
			t.Errorf("step %d: %d weight values cast, %d read from the cache; want %d and %d (the model's matrix weights: %d)", i, c.Weights, c.WeightReuses, want, 2*W-want, W)
		}
		if p.Weights != 0 || p.Operands-c.Operands != 2*W {
			t.Errorf("step %d: uncached %+v, cached %+v: want 2 x %d more operands cast without the cache", i, p, c, W)
		}
		if i == 0 {
			t.Logf("a step casts %d values (%d bytes) with the cache, %d (%d bytes) without; %d matrix weights", c.Values(), c.Bytes(), p.Values(), p.Bytes(), W)
		}
		same("after step")
	}
	eval := func(what string) {
		t.Helper()
		x, y := text(99, 2, bf16Shape.Context)
		lc, nc, err := cached.Eval(x, y)
		if err != nil {
			t.Fatal(err)
		}
		lp, np, err := plain.Eval(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(lc) != math.Float32bits(lp) || nc != np {
			t.Fatalf("%s: evaluation loss %v (%d correct) with the cache, %v (%d) without", what, lc, nc, lp, np)
		}
	}
	for i := range 3 {
		step(i, false)
	}
	eval("after 3 steps") // the cache holds the weights now

	// CopyFromHost: other weights loaded into both host models
	other := bf16GPT(t)
	for i := range other.Flat.Value {
		other.Flat.Value[i] *= 1.5
	}
	copy(mc.Flat.Value, other.Flat.Value)
	copy(mu.Flat.Value, other.Flat.Value)
	for _, d := range []*devmodel.Model{cached, plain} {
		if err := d.CopyFromHost(); err != nil {
			t.Fatal(err)
		}
	}
	eval("after CopyFromHost")
	step(3, true)
	eval("after step 3")

	// a write into Params by other means (a gather), announced
	v := params(plain)
	for i := range v {
		v[i] = -v[i]
	}
	for _, d := range []*devmodel.Model{cached, plain} {
		devtest.Put(t, dev, d.Params, v)
		d.ParamsChanged()
	}
	eval("after ParamsChanged")
	step(4, true)
	step(5, false)
}

// A whole-model pipeline stage (PlaceStage registers its parameters)
// with bf16 autocast, 2 micro-batches a step, 3 steps: bit for bit the
// uncached stage's losses and parameters, each weight cast once a step
// for both micro-batches (4 reads: each micro-batch's forward and
// input-gradient products), again after Update and CopyFromHost.
func TestBF16WeightCacheStage(t *testing.T) {
	cudafake.RequireCUDA(t)
	mc, mu := bf16GPT(t), bf16GPT(t)
	W := matrixWeights(t, mc)
	place := func(m *nn.Model, cache bool) *devmodel.Stage {
		v := "1"
		if !cache {
			v = "0"
		}
		t.Setenv(gemm.EnvAutocastCache, v)
		t.Setenv(gemm.EnvBF16Cast, "kernel") // the casts counted here
		s, err := devmodel.PlaceStage(m, 0, m.NumLayers(), devmodel.Config{Device: dev, Batch: 1, Precision: gemm.BF16,
			Optim: optim.Config{Name: "adamw", LR: 3e-3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	cached, plain := place(mc, true), place(mu, false)
	run := func(s *devmodel.Stage, i int) (losses []float32) {
		x, y := text(i, 2, bf16Shape.Context)
		T := bf16Shape.Context
		for j := range 2 {
			in := devtest.Upload(t, dev, x[j*T:(j+1)*T])
			if _, err := s.Forward(in, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.LossBackward(y[j*T:(j+1)*T], 0.5); err != nil {
				t.Fatal(err)
			}
			l, err := s.Loss()
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, l)
		}
		if err := s.Update(); err != nil {
			t.Fatal(err)
		}
		if err := s.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
		return losses
	}
	for i := range 3 {
		if i == 2 { // a checkpoint loaded into both, after a forward filled the cache
			for _, p := range []struct {
				m *nn.Model
				s *devmodel.Stage
			}{{mc, cached}, {mu, plain}} {
				if _, err := p.s.Forward(devtest.Upload(t, dev, make([]float32, bf16Shape.Context)), 1); err != nil {
					t.Fatal(err)
				}
				for k := range p.m.Flat.Value {
					p.m.Flat.Value[k] *= 0.75
				}
				if err := p.s.CopyFromHost(); err != nil {
					t.Fatal(err)
				}
			}
		}
		c0, p0 := cached.Casts(), plain.Casts()
		lc, lp := run(cached, i), run(plain, i)
		if _, ok := bitsEqual(lc, lp); !ok {
			t.Fatalf("step %d: losses %v with the cache, %v without", i, lc, lp)
		}
		c, p := cached.Casts().Sub(c0), plain.Casts().Sub(p0)
		if c.Weights != W || c.WeightReuses != 3*W || p.Operands-c.Operands != 4*W {
			t.Errorf("step %d: cached %+v, uncached %+v; want %d weights cast once, read 3 more times from the cache", i, c, p, W)
		}
		if err := cached.CopyToHost(); err != nil {
			t.Fatal(err)
		}
		if err := plain.CopyToHost(); err != nil {
			t.Fatal(err)
		}
		if k, ok := bitsEqual(mc.Flat.Value, mu.Flat.Value); !ok {
			t.Fatalf("step %d: parameter %d differs", i, k)
		}
	}
}

// gptCasts is the number of values a gpt's training step casts to bf16
// under autocast through cuBLAS (gpu/kernels' products, batch b of T
// positions, R = b T rows, vocabulary V), with the weight cache or
// without. A Linear (in, out) casts its input x and W for the forward
// product, x and dy for dW = x^T dy, and W for dx = dy W^T (dy kept from
// the product before: KeepNext): 2 R in + R out activations and
// gradients, W twice, or once with the cache. A block's Linears are
// (D, 3D), (D, D), (D, 4D), (4D, D): 23 R D and 12 D^2 weights. Its
// attention core (block-causal, gpu/kernels) casts Q, K and V once
// forward (held for every block row's S_i = Q_i K^T and O_i = P_i V),
// each block row of P once (its P_i V), and backward Q, K, V and dO
// once (held), each block column of P once (dV_j), the lower blocks of
// dS once (held for dQ_i and dK_j): 7 R D + 3 Scores (the lower blocks'
// entries, kernels.AttentionGeom.Scores; b H T^2 in one block). The head
// is a Linear (D, V). The LayerNorms and GELUs write their outputs' bf16
// copies as they go (devmodel's producer copies, gemm's Provide): the
// Linears they feed (attention's in-projection, the MLP's first and
// second, the head) cast nothing of their input, and the MLP's first
// nothing of its output gradient (GELU's backward writes its copy):
// copiesSaved.
func gptCasts(g models.GPT, b int, cached bool) (acts, weights int64) {
	R, D, V := int64(b*g.Context), int64(g.Dim), int64(models.Vocab)
	L, HT2 := int64(g.Layers), int64(kernels.AttentionGeom{N: b, T: g.Context, C: g.Dim, H: g.Heads}.Scores())
	acts = L*(30*R*D+3*HT2) + 2*R*D + R*V - copiesSaved(g, b)
	weights = 2 * (12*L*D*D + D*V)
	if cached {
		weights /= 2
	}
	return acts, weights
}

// The casts of a gpt's bf16 step, counted by the engine, are gptCasts'
// for gpts of several shapes (odd ones included, attention in blocks of
// 2 and 3 rows by $GDIST_ATTENTION_BLOCK, and whole), with the weight
// cache and without; the formula then gives GPT-2 small's
// (gpt-L12-D768-H12-T1024 at batch 8, benchmarks/NOTES.md).
func TestBF16CastsPerStep(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, c := range []struct {
		g     models.GPT
		b     int
		block string
	}{
		{bf16Shape, 2, ""},
		{bf16Shape, 2, "3"},
		{models.GPT{Layers: 1, Dim: 12, Heads: 3, Context: 5}, 3, "2"},
		{models.GPT{Layers: 3, Dim: 8, Heads: 1, Context: 4}, 1, ""},
	} {
		t.Setenv(kernels.EnvAttentionBlock, c.block)
		for _, cache := range []bool{true, false} {
			m := gptModel(t, c.g, 4)
			v := map[bool]string{true: "1", false: "0"}[cache]
			t.Setenv(gemm.EnvAutocastCache, v)
			t.Setenv(gemm.EnvBF16Cast, "kernel") // the casts counted here
			d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: c.b, Precision: gemm.BF16, Optim: optim.Config{Name: "sgd", LR: 0.1}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(d.Products(), "cuBLAS") {
				d.Close()
				t.Skip(d.Products())
			}
			for i := range 2 {
				x, y := text(i, c.b, c.g.Context)
				before := d.Casts()
				if _, err := d.Step(x, y); err != nil {
					t.Fatal(err)
				}
				got := d.Casts().Sub(before)
				acts, w := gptCasts(c.g, c.b, cache)
				if got.Values() != acts+w || got.Weights != map[bool]int64{true: w, false: 0}[cache] {
					t.Errorf("%s batch %d, cache %v, step %d: %d values cast (%d weights into the cache), want %d (%d of weights)", c.g.Name(), c.b, cache, i, got.Values(), got.Weights, acts+w, w)
				}
			}
			d.Close()
		}
	}
	t.Setenv(kernels.EnvAttentionBlock, "")
	small := models.GPT{Layers: 12, Dim: 768, Heads: 12, Context: 1024}
	acts, w0 := gptCasts(small, 8, false)
	_, w1 := gptCasts(small, 8, true)
	saved := copiesSaved(small, 8)
	t.Logf("%s batch 8: %d values cast a step without the weight cache (%.2f GB moved at 6 bytes a value), %d with (%.2f GB); activations and gradients %d (attention's P and dS %d); the producers' bf16 copies save %d values (%.2f GB cast) for %.2f GB written (%d values cast before them, %.2f GB)",
		small.Name(), acts+w0, float64(6*(acts+w0))/1e9, acts+w1, float64(6*(acts+w1))/1e9, acts,
		3*int64(small.Layers)*int64(kernels.AttentionGeom{N: 8, T: small.Context, C: small.Dim, H: small.Heads}.Scores()),
		saved, float64(6*saved)/1e9, float64(2*copiesWritten(small, 8))/1e9, acts+w1+saved, float64(6*(acts+w1+saved))/1e9)
}
