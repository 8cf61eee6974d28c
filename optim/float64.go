package optim

import (
	"fmt"
	"math"
)

// Optimizer64 is Optimizer for float64 parameters (ZeRO over a model
// whose learnables are float64): the same update rules, computed in
// float64, with float64 state.
type Optimizer64 interface {
	Step64(params, grads []float64)
	// State64 returns the optimizer's tensors by name (views) and its
	// step count, as Optimizer.State does.
	State64() (map[string][]float64, int64)
	SetStep(int64)
	SetLR(lr float64)
	Name() string
}

// New64 returns a float64 optimizer for n elements: any Config New takes,
// checked as New checks it.
func New64(cfg Config, n int) (Optimizer64, error) {
	o, err := New(cfg, 0)
	if err != nil {
		return nil, err
	}
	switch o := o.(type) {
	case *SGD:
		s := &sgd64{SGD: *o}
		if o.Momentum > 0 {
			s.b = make([]float64, n)
		}
		return s, nil
	case *Adam:
		return &adam64{Adam: *o, m: make([]float64, n), v: make([]float64, n)}, nil
	case *Gorgonia:
		g := &gorgonia64{Gorgonia: *o}
		if o.name != "vanilla" {
			g.c = make([]float64, n)
		}
		return g, nil
	}
	return nil, fmt.Errorf("optim: %q has no float64 implementation", cfg.Name)
}

// sgd64 is SGD in float64: d = g + wd p; with momentum b = mu b + d,
// p -= lr b; without, p -= lr d.
type sgd64 struct {
	SGD
	b []float64
}

func (s *sgd64) Step64(p, g []float64) {
	for i := range p {
		d := g[i]
		if s.WeightDecay != 0 {
			d += s.WeightDecay * p[i]
		}
		if s.b != nil {
			s.b[i] = s.Momentum*s.b[i] + d
			d = s.b[i]
		}
		p[i] -= s.LR * d
	}
	s.t++
}

func (s *sgd64) State64() (map[string][]float64, int64) {
	out := map[string][]float64{}
	if s.b != nil {
		out["momentum_buffer"] = s.b
	}
	return out, s.t
}

// adam64 is Adam (AdamW with Decoupled) in float64, torch.optim's rules.
type adam64 struct {
	Adam
	m, v []float64
}

func (a *adam64) Step64(p, g []float64) {
	a.t++
	bc1 := 1 - math.Pow(a.Beta1, float64(a.t))
	sqrtBC2 := math.Sqrt(1 - math.Pow(a.Beta2, float64(a.t)))
	stepSize := a.LR / bc1
	for i := range p {
		gi := g[i]
		if a.Decoupled {
			p[i] *= 1 - a.LR*a.WeightDecay
		} else if a.WeightDecay != 0 {
			gi += a.WeightDecay * p[i]
		}
		a.m[i] = a.Beta1*a.m[i] + (1-a.Beta1)*gi
		a.v[i] = a.Beta2*a.v[i] + (1-a.Beta2)*gi*gi
		p[i] -= stepSize * a.m[i] / (math.Sqrt(a.v[i])/sqrtBC2 + a.Eps)
	}
}

func (a *adam64) State64() (map[string][]float64, int64) {
	return map[string][]float64{"exp_avg": a.m, "exp_avg_sq": a.v}, a.t
}

// gorgonia64 is Gorgonia in float64: gorgonia's solvers' rules op for op
// in float64, as gorgonia computes them for float64 learnables.
type gorgonia64 struct {
	Gorgonia
	c []float64
}

func (s *gorgonia64) Step64(p, g []float64) {
	gorgoniaStep(s.name, &s.k, p, g[:len(p)], s.c)
	s.t++
}

func (s *gorgonia64) State64() (map[string][]float64, int64) {
	out := map[string][]float64{}
	if st, _ := s.Gorgonia.State(); len(st) > 0 {
		for k := range st {
			out[k] = s.c
		}
	}
	return out, s.t
}
