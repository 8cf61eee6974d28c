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
	for _, c := range []Config{{Name: "sgd"}, {Name: "sgd", LR: 1, Momentum: 1}, {Name: "rmsprop", LR: 1}, {Name: "adam", LR: math.NaN()}} {
		if _, err := New(c, 3); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
