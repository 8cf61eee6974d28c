// Package optim holds the optimizers gdist applies to flat parameter and
// gradient buffers (or to one rank's shard of them, for ZeRO): SGD with
// momentum and Adam / AdamW, with PyTorch's update rules so that a model
// trained here and one trained with torch.optim follow the same path;
// gorgonia's RMSProp, AdaGrad, Momentum and Vanilla solvers with their
// options (clipping, L1 and L2 regularisation, batch size) and defaults,
// op for op (Gorgonia), so that a gorgonia program keeps its optimizer
// under ZeRO, which shards the optimizer's state;
// and Schedule, the learning rate as a function of the step (linear
// warm-up, then constant or cosine decay), which whoever steps the
// optimizer applies with SetLR.
package optim

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/internal/hugepage"
	"github.com/gdist/gdist/internal/vecmath"
)

// Optimizer updates params from grads, element-wise. Both slices have the
// length the optimizer was made for; the state is sized to that length.
type Optimizer interface {
	Step(params, grads []float32)
	// State returns the optimizer's tensors by name (views: modifying them
	// changes the optimizer) and its step count.
	State() (map[string][]float32, int64)
	// SetStep sets the step count (after loading State from a checkpoint).
	SetStep(int64)
	// SetLR sets the learning rate of the following steps (a Schedule's
	// value for the next step).
	SetLR(lr float64)
	Name() string
}

// Config selects and tunes an optimizer.
type Config struct {
	// Name: "sgd" or "adam" ("adamw": decoupled weight decay), PyTorch's
	// rules; or "rmsprop", "adagrad", "momentum" or "vanilla", gorgonia's
	// solvers' rules (see Gorgonia).
	Name        string
	LR          float64 // learning rate (gorgonia's solvers: 0 means their default, 0.001)
	Momentum    float64 // sgd; momentum (default 0.9)
	WeightDecay float64 // sgd, adam, adamw
	Beta1       float64 // adam, default 0.9
	Beta2       float64 // adam, default 0.999
	Eps         float64 // adam, rmsprop, adagrad: default 1e-8

	// gorgonia's solvers' options (rmsprop, adagrad, momentum, vanilla),
	// as their SolverOpts: 0 leaves each off (or at its default).
	Clip  float64 // WithClip: each gradient element clamped to [-Clip, Clip]
	L2    float64 // WithL2Reg
	L1    float64 // WithL1Reg (momentum, vanilla)
	Batch float64 // WithBatchSize (momentum, vanilla): gradients divided by it
	Rho   float64 // WithRho (rmsprop's decay), default 0.999
}

// New returns an optimizer for n elements.
func New(cfg Config, n int) (Optimizer, error) {
	defaultLR := cfg.LR == 0 && isGorgonia(cfg.Name) // gorgonia's solvers' default
	if !defaultLR && (!(cfg.LR > 0) || math.IsInf(cfg.LR, 0)) {
		return nil, fmt.Errorf("optim: learning rate %v must be positive", cfg.LR)
	}
	if n < 0 {
		return nil, fmt.Errorf("optim: negative size %d", n)
	}
	if isGorgonia(cfg.Name) {
		return newGorgonia(cfg, n)
	}
	for _, o := range []struct {
		name string
		v    float64
	}{{"Clip", cfg.Clip}, {"L2", cfg.L2}, {"L1", cfg.L1}, {"Batch", cfg.Batch}, {"Rho", cfg.Rho}} {
		if o.v != 0 {
			return nil, fmt.Errorf("optim: %s is an option of gorgonia's solvers (rmsprop, adagrad, momentum, vanilla), not of %q: for %s use WeightDecay, and clip the gradients' norm before Step", o.name, cfg.Name, cfg.Name)
		}
	}
	switch cfg.Name {
	case "sgd":
		if cfg.Momentum < 0 || cfg.Momentum >= 1 {
			return nil, fmt.Errorf("optim: momentum %v outside [0, 1)", cfg.Momentum)
		}
		s := &SGD{LR: cfg.LR, Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay}
		if cfg.Momentum > 0 {
			s.buf = hugepage.Float32s(n)
		}
		return s, nil
	case "adam", "adamw":
		a := &Adam{LR: cfg.LR, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: cfg.WeightDecay, Decoupled: cfg.Name == "adamw",
			m: hugepage.Float32s(n), v: hugepage.Float32s(n)}
		if cfg.Beta1 != 0 {
			a.Beta1 = cfg.Beta1
		}
		if cfg.Beta2 != 0 {
			a.Beta2 = cfg.Beta2
		}
		if cfg.Eps != 0 {
			a.Eps = cfg.Eps
		}
		return a, nil
	}
	return nil, fmt.Errorf("optim: unknown optimizer %q (sgd, adam, adamw; gorgonia's rmsprop, adagrad, momentum, vanilla)", cfg.Name)
}

// SGD is torch.optim.SGD (dampening 0, no Nesterov): with momentum,
// buf = momentum*buf + g; p -= lr*buf.
type SGD struct {
	LR, Momentum, WeightDecay float64
	buf                       []float32
	t                         int64
	kc                        vecmath.SGDConsts // the kernel's constants, refilled each step
}

// Step applies one update (vecmath.SGD: d = g + wd p; with momentum
// buf = mu buf + d, p -= lr buf; without, p -= lr d, in float32).
func (s *SGD) Step(p, g []float32) {
	for i, x := range [...]float32{float32(s.WeightDecay), float32(s.Momentum), float32(s.LR)} {
		for j := range s.kc[i] {
			s.kc[i][j] = x
		}
	}
	var b []float32
	if s.buf != nil {
		b = s.buf[:len(p)]
	}
	vecmath.SGD(p, g[:len(p)], b, &s.kc)
	s.t++
}

// State: "momentum_buffer" (if momentum > 0).
func (s *SGD) State() (map[string][]float32, int64) {
	out := map[string][]float32{}
	if s.buf != nil {
		out["momentum_buffer"] = s.buf
	}
	return out, s.t
}

func (s *SGD) SetStep(t int64)  { s.t = t }
func (s *SGD) SetLR(lr float64) { s.LR = lr }
func (s *SGD) Name() string     { return "sgd" }

// Adam is torch.optim.Adam (or AdamW with Decoupled): bias-corrected first
// and second moments.
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Decoupled                          bool
	m, v                               []float32
	t                                  int64
	kc                                 vecmath.AdamWConsts // the kernel's constants, refilled each step
}

// Step applies one update.
func (a *Adam) Step(p, g []float32) {
	a.t++
	b1, b2 := float32(a.Beta1), float32(a.Beta2)
	bc1 := 1 - math.Pow(a.Beta1, float64(a.t))
	bc2 := 1 - math.Pow(a.Beta2, float64(a.t))
	stepSize := float32(a.LR / bc1)
	sqrtBC2 := float32(math.Sqrt(bc2))
	eps, wd, lr := float32(a.Eps), float32(a.WeightDecay), float32(a.LR)
	g = g[:len(p)]
	m, v := a.m[:len(p)], a.v[:len(p)]
	if a.Decoupled {
		c := &a.kc
		for i, x := range [...]float32{lr * wd, b1, 1 - b1, b2, 1 - b2, sqrtBC2, eps, stepSize} {
			for j := range c[i] {
				c[i][j] = x
			}
		}
		vecmath.AdamW(p, g, m, v, c)
		return
	}
	for i := range p {
		gi := g[i]
		if wd != 0 {
			gi += wd * p[i]
		}
		m[i] = b1*m[i] + (1-b1)*gi
		v[i] = b2*v[i] + (1-b2)*gi*gi
		denom := float32(math.Sqrt(float64(v[i])))/sqrtBC2 + eps
		p[i] -= stepSize * m[i] / denom
	}
}

// State: "exp_avg" and "exp_avg_sq".
func (a *Adam) State() (map[string][]float32, int64) {
	return map[string][]float32{"exp_avg": a.m, "exp_avg_sq": a.v}, a.t
}

func (a *Adam) SetStep(t int64)  { a.t = t }
func (a *Adam) SetLR(lr float64) { a.LR = lr }
func (a *Adam) Name() string {
	if a.Decoupled {
		return "adamw"
	}
	return "adam"
}
