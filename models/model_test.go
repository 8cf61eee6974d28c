package models

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

func testBatch(m *Model, b int) ([]float32, []int32) {
	x := make([]float32, b*m.InputSize())
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.37)) * 1.5
	}
	y := make([]int32, b)
	for i := range y {
		y[i] = int32((i * 7) % m.Classes())
	}
	return x, y
}

// TestGradientDirectional checks backward against central differences of
// the loss along a random direction in parameter space, for every model:
// (L(p + e d) - L(p - e d)) / 2e must equal grad . d.
func TestGradientDirectional(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			m, err := New(name, 7)
			if err != nil {
				t.Fatal(err)
			}
			gr, err := m.NewGraph(4, true)
			if err != nil {
				t.Fatal(err)
			}
			x, y := testBatch(m, 4)
			if _, err := gr.Step(context.Background(), x, y); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(99, 0))
			d := make([]float32, len(m.Flat.Value))
			var norm float64
			for i := range d {
				d[i] = float32(2*r.Float64() - 1)
				norm += float64(d[i]) * float64(d[i])
			}
			// A unit direction: every parameter moves by ~eps/sqrt(n), far
			// too little to cross a ReLU or max-pool kink.
			var gd float64
			for i := range d {
				d[i] /= float32(math.Sqrt(norm))
				gd += float64(d[i]) * float64(m.Flat.Grad[i])
			}
			base := append([]float32(nil), m.Flat.Value...)
			const eps = 1e-2
			loss := func(s float32) float64 {
				for i := range m.Flat.Value {
					m.Flat.Value[i] = base[i] + s*d[i]
				}
				l, err := gr.Step(context.Background(), x, y)
				if err != nil {
					t.Fatal(err)
				}
				return float64(l)
			}
			num := (loss(eps) - loss(-eps)) / (2 * eps)
			copy(m.Flat.Value, base)
			if rel := math.Abs(num-gd) / math.Max(math.Abs(gd), 1e-3); rel > 3e-2 {
				t.Fatalf("directional derivative: backward %.6g, finite differences %.6g (%.2g relative)", gd, num, rel)
			}
			t.Logf("backward %.6g, finite differences %.6g", gd, num)
		})
	}
}

func TestDeterministicInit(t *testing.T) {
	a, _ := New("cnn-bn", 3)
	b, _ := New("cnn-bn", 3)
	c, _ := New("cnn-bn", 4)
	same, diff := true, false
	for i := range a.Flat.Value {
		same = same && a.Flat.Value[i] == b.Flat.Value[i]
		diff = diff || a.Flat.Value[i] != c.Flat.Value[i]
	}
	if !same || !diff {
		t.Fatalf("same seed equal: %v, other seed differs: %v", same, diff)
	}
	// Layout: parameters tile Flat exactly, in order.
	off := 0
	for _, p := range a.Params {
		if p.Offset != off || p.Size <= 0 {
			t.Fatalf("%s at %d (size %d), want offset %d", p.Name, p.Offset, p.Size, off)
		}
		off += p.Size
	}
	if off != len(a.Flat.Value) || len(a.Flat.Grad) != len(a.Flat.Value) {
		t.Fatalf("params cover %d of %d", off, len(a.Flat.Value))
	}
}

func TestHooksFireLastLayerFirst(t *testing.T) {
	m, _ := New("mlp", 1)
	gr, _ := m.NewGraph(2, true)
	var order []int
	gr.OnGrad = func(i int, g []float32) {
		if len(g) != m.Params[i].Size {
			t.Errorf("param %d: gradient of %d values, want %d", i, len(g), m.Params[i].Size)
		}
		order = append(order, i)
	}
	x, y := testBatch(m, 2)
	if _, err := gr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
	if len(order) != len(m.Params) {
		t.Fatalf("hooks fired for %v", order)
	}
	// The last layer's parameters come before the first layer's.
	pos := map[int]int{}
	for k, i := range order {
		pos[i] = k
	}
	if pos[len(m.Params)-1] > pos[0] || pos[len(m.Params)-2] > pos[1] {
		t.Fatalf("hook order %v: want the last layer first", order)
	}
	for _, g := range m.Flat.Grad {
		if g != 0 {
			t.Fatal("a custom OnGrad must replace the default accumulation")
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := New("resnet", 1); err == nil {
		t.Error("unknown model accepted")
	}
	m, _ := New("mlp", 1)
	if _, err := m.NewGraph(0, true); err == nil {
		t.Error("batch 0 accepted")
	}
	gr, _ := m.NewGraph(2, true)
	x, y := testBatch(m, 2)
	if _, err := gr.Step(context.Background(), x[:10], y); err == nil {
		t.Error("short input accepted")
	}
	if _, err := gr.Step(context.Background(), x, []int32{0, 10}); err == nil {
		t.Error("label 10 accepted")
	}
	if _, err := gr.Logits(x); err == nil {
		t.Error("Logits on a training graph accepted")
	}
}

// TestBatchNormRunningStats: after a training step, the running mean moved
// by momentum toward the batch mean and the unbiased variance.
func TestBatchNormRunningStats(t *testing.T) {
	m, _ := New("cnn-bn", 1)
	gr, _ := m.NewGraph(3, true)
	x, y := testBatch(m, 3)
	if _, err := gr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
	b := m.BNs[0]
	if b.NumBatches != 1 {
		t.Fatalf("num_batches_tracked %d", b.NumBatches)
	}
	moved := false
	for c := range b.RunningMean {
		moved = moved || b.RunningMean[c] != 0 || b.RunningVar[c] != 1
	}
	if !moved {
		t.Fatal("running statistics did not move")
	}
}

func TestDeepNames(t *testing.T) {
	for name, layers := range map[string]int{"mlp-deep": 7, "mlp-deep-1": 1, "mlp-deep-15": 15, "mlp-deep-64": 64} {
		if !Known(name) {
			t.Errorf("%s not known", name)
		}
		m, err := New(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.NumLayers(); got != 2*layers+1 {
			t.Errorf("%s: %d layers, want %d", name, got, 2*layers+1)
		}
		if want := layers*(784*784+784) + 784*10 + 10; len(m.Flat.Value) != want {
			t.Errorf("%s: %d parameters, want %d", name, len(m.Flat.Value), want)
		}
	}
	for _, name := range []string{"mlp-deep-0", "mlp-deep-65", "mlp-deep-x", "mlp-deep-07", "mlp-deep-", "mlp-xxl"} {
		if Known(name) {
			t.Errorf("%s known", name)
		}
		if _, err := New(name, 1); err == nil {
			t.Errorf("%s built", name)
		}
	}
	for _, name := range append(Names(), "mlp-xl") {
		if !Known(name) {
			t.Errorf("%s not known", name)
		}
	}
}

// Steps reuse op buffers: two identical steps around a different one give
// identical losses and gradients.
func TestStepsRepeat(t *testing.T) {
	for _, name := range []string{"mlp", "cnn"} {
		m, _ := New(name, 3)
		gr, err := m.NewGraph(4, true)
		if err != nil {
			t.Fatal(err)
		}
		x, y := testBatch(m, 4)
		step := func(x []float32) (float32, []float32) {
			clear(m.Flat.Grad)
			l, err := gr.Step(context.Background(), x, y)
			if err != nil {
				t.Fatal(err)
			}
			return l, append([]float32(nil), m.Flat.Grad...)
		}
		l1, g1 := step(x)
		other := make([]float32, len(x))
		for i := range other {
			other[i] = float32(i%13) - 6
		}
		step(other)
		l2, g2 := step(x)
		if l1 != l2 {
			t.Fatalf("%s: loss %v then %v", name, l1, l2)
		}
		for i := range g1 {
			if g1[i] != g2[i] {
				t.Fatalf("%s: grad[%d] %v then %v", name, i, g1[i], g2[i])
			}
		}
	}
}
