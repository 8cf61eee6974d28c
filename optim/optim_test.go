package optim

import (
	"math"
	"testing"
)

// Reference values computed by hand from PyTorch's update rules.
func TestSGDMomentum(t *testing.T) {
	o, err := New(Config{Name: "sgd", LR: 0.1, Momentum: 0.9}, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := []float32{1}
	o.Step(p, []float32{1}) // buf=1, p=0.9
	o.Step(p, []float32{1}) // buf=1.9, p=0.71
	if math.Abs(float64(p[0])-0.71) > 1e-6 {
		t.Fatalf("p = %v, want 0.71", p[0])
	}
}

func TestAdam(t *testing.T) {
	o, _ := New(Config{Name: "adam", LR: 0.01}, 1)
	p := []float32{1}
	o.Step(p, []float32{2})
	// step 1: m=0.2, v=0.004, mhat=2, vhat=4 -> p -= 0.01*2/(2+1e-8)
	if math.Abs(float64(p[0])-0.99) > 1e-6 {
		t.Fatalf("p = %v, want 0.99", p[0])
	}
	st, step := o.State()
	if step != 1 || len(st["exp_avg"]) != 1 {
		t.Fatalf("state %v %d", st, step)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{{Name: "sgd"}, {Name: "sgd", LR: 1, Momentum: 1}, {Name: "lamb", LR: 1}, {Name: "adam", LR: math.NaN()}} {
		if _, err := New(c, 3); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestSchedule: warm-up rises linearly to the peak, cosine falls from it
// to Final of it at Total (half-way at the middle) and stays there;
// constant stays at the peak.
func TestSchedule(t *testing.T) {
	s := Schedule{Kind: "cosine", LR: 1, Warmup: 4, Total: 104, Final: 0.1}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		step int64
		want float64
	}{{0, 0.25}, {1, 0.5}, {3, 1}, {4, 1}, {54, 0.55}, {104, 0.1}, {500, 0.1}} {
		if got := s.At(c.step); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("cosine step %d: %v, want %v", c.step, got, c.want)
		}
	}
	for st := int64(5); st < 104; st++ {
		if s.At(st) >= s.At(st-1) {
			t.Fatalf("cosine does not fall at step %d", st)
		}
	}
	c := Schedule{LR: 0.5, Warmup: 2}
	if c.At(0) != 0.25 || c.At(1) != 0.5 || c.At(1000) != 0.5 || c.Constant() || !(Schedule{LR: 1}).Constant() {
		t.Errorf("constant with warm-up: %v %v %v", c.At(0), c.At(1), c.At(1000))
	}
	for _, bad := range []Schedule{{Kind: "step", LR: 1}, {LR: 0}, {LR: 1, Warmup: -1}, {Kind: "cosine", LR: 1, Warmup: 10, Total: 10}, {LR: 1, Final: 2}} {
		if bad.Check() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestSetLR: the new rate applies to the next step.
func TestSetLR(t *testing.T) {
	for _, name := range []string{"sgd", "adam"} {
		o, _ := New(Config{Name: name, LR: 0.1}, 1)
		o.SetLR(0.01)
		p := []float32{1}
		o.Step(p, []float32{1})
		if math.Abs(float64(p[0])-0.99) > 1e-6 {
			t.Errorf("%s: p = %v after a step at lr 0.01, want 0.99", name, p[0])
		}
	}
}

// TestAdamW: decoupled weight decay, by hand from PyTorch's AdamW, over
// a length with a partial group of 8 (the element-wise update itself is
// vecmath's, tested there bit for bit: TestAdamW, TestSGD).
func TestAdamW(t *testing.T) {
	o, err := New(Config{Name: "adamw", LR: 0.01, WeightDecay: 0.1}, 11)
	if err != nil {
		t.Fatal(err)
	}
	p, g := make([]float32, 11), make([]float32, 11)
	for i := range p {
		p[i], g[i] = 1, 2
	}
	o.Step(p, g)
	// p -= lr wd p (0.999); m=0.2, v=0.004, mhat=2, vhat=4 -> p -= 0.01*2/(2+1e-8)
	for i, v := range p {
		if math.Abs(float64(v)-0.989) > 1e-6 {
			t.Fatalf("p[%d] = %v, want 0.989", i, v)
		}
	}
}

// BenchmarkAdamStep times one step over the gpt preset's 1,329,856
// parameters: adamw (vectorised where the CPU allows) and adam (the
// scalar loop, with L2 weight decay in the gradient).
func BenchmarkAdamStep(b *testing.B) {
	const n = 1329856
	for _, decoupled := range []bool{true, false} {
		name := "adam"
		if decoupled {
			name = "adamw"
		}
		b.Run(name, func(b *testing.B) {
			a := &Adam{LR: 3e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: decoupled,
				m: make([]float32, n), v: make([]float32, n)}
			p, g := make([]float32, n), make([]float32, n)
			for i := range g {
				p[i], g[i] = 0.01*float32(i%100), float32(i%7)-3
			}
			for b.Loop() {
				a.Step(p, g)
			}
		})
	}
}
