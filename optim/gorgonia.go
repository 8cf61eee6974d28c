package optim

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/internal/hugepage"
)

// gorgoniaNames are the optimizers that follow gorgonia's solvers.
var gorgoniaNames = map[string]bool{"rmsprop": true, "adagrad": true, "momentum": true, "vanilla": true}

// isGorgonia reports whether name is one of the optimizers that follow
// gorgonia's solvers (rmsprop, adagrad, momentum, vanilla), which take
// Config's Clip, L2, L1, Batch and Rho.
func isGorgonia(name string) bool { return gorgoniaNames[name] }

// newGorgonia makes one of gorgonia's solvers for n elements; cfg.LR was
// checked (or is 0: the default).
func newGorgonia(cfg Config, n int) (Optimizer, error) {
	if cfg.WeightDecay != 0 {
		return nil, fmt.Errorf("optim: %s follows gorgonia's solver, which has no WeightDecay: use L2 (gorgonia's WithL2Reg)", cfg.Name)
	}
	for _, o := range []struct {
		name string
		v    float64
	}{{"Clip", cfg.Clip}, {"L2", cfg.L2}, {"L1", cfg.L1}, {"Batch", cfg.Batch}, {"Rho", cfg.Rho}, {"Eps", cfg.Eps}, {"Momentum", cfg.Momentum}} {
		if !(o.v >= 0) || math.IsInf(o.v, 0) {
			return nil, fmt.Errorf("optim: %s %s %v: want 0 (the default) or a positive number", cfg.Name, o.name, o.v)
		}
	}
	k := gorgoniaConsts{lr: cfg.LR, clip: cfg.Clip, l2: cfg.L2, l1: cfg.L1, batch: cfg.Batch,
		rho: cfg.Rho, eps: cfg.Eps, momentum: cfg.Momentum}
	if k.lr == 0 {
		k.lr = 0.001
	}
	if k.eps == 0 {
		k.eps = 1e-8
	}
	switch cfg.Name {
	case "rmsprop", "adagrad":
		switch {
		case cfg.L1 != 0:
			return nil, fmt.Errorf("optim: gorgonia's %s solver takes no L1 (WithL1Reg leaves it unchanged): drop L1", cfg.Name)
		case cfg.Batch != 0:
			return nil, fmt.Errorf("optim: gorgonia's %s solver takes no batch size (WithBatchSize leaves it unchanged): drop Batch", cfg.Name)
		case cfg.Momentum != 0:
			return nil, fmt.Errorf("optim: %s takes no Momentum", cfg.Name)
		case cfg.Rho != 0 && cfg.Name == "adagrad":
			return nil, fmt.Errorf("optim: adagrad takes no Rho (rmsprop's decay)")
		case cfg.Rho >= 1:
			return nil, fmt.Errorf("optim: rmsprop Rho %v: want a decay in (0, 1)", cfg.Rho)
		}
		if k.rho == 0 {
			k.rho = 0.999
		}
		return &Gorgonia{name: cfg.Name, k: k, cache: hugepage.Float32s(n)}, nil
	case "momentum", "vanilla":
		switch {
		case cfg.Rho != 0:
			return nil, fmt.Errorf("optim: %s takes no Rho (rmsprop's decay)", cfg.Name)
		case cfg.Eps != 0:
			return nil, fmt.Errorf("optim: %s takes no Eps", cfg.Name)
		case cfg.Momentum != 0 && cfg.Name == "vanilla":
			return nil, fmt.Errorf("optim: vanilla takes no Momentum: use momentum")
		case cfg.Momentum >= 1:
			return nil, fmt.Errorf("optim: momentum %v outside [0, 1)", cfg.Momentum)
		}
		if k.momentum == 0 {
			k.momentum = 0.9
		}
		if k.batch == 0 {
			k.batch = 1
		}
		g := &Gorgonia{name: cfg.Name, k: k}
		if cfg.Name == "momentum" {
			g.cache = hugepage.Float32s(n)
		}
		return g, nil
	}
	return nil, fmt.Errorf("optim: unknown optimizer %q", cfg.Name)
}

// gorgoniaConsts are a solver's settings, defaults filled in.
type gorgoniaConsts struct {
	lr, clip, l2, l1, batch, rho, eps, momentum float64
}

// Gorgonia is one of gorgonia's solvers, element-wise on a flat buffer (or one rank's shard of
// it: ZeRO), with the update rules, option semantics and defaults of
// gorgonia v0.9.18's solvers.go for tensor (*tensor.Dense) learnables, op
// for op in the same order and precision, so that a program that trained
// with gorgonia.NewRMSPropSolver(...) follows the same path with
// Config{Name: "rmsprop", ...} under ZeRO:
//
//   - "rmsprop" (RMSPropSolver): c = rho c + (1-rho) g²  (the unclipped
//     g), g clipped, p += -lr g / sqrt(c + eps) - l2 p.
//   - "adagrad" (AdaGradSolver): c += g² (unclipped), g clipped,
//     p += -lr g / sqrt(c + eps) - l2 p.
//   - "momentum" (Momentum): g += l1 sign(v) + l2 v, g /= batch, g clipped,
//     v = momentum v - lr g, p += v. gorgonia regularises with the
//     velocity v, not the weights (its formula, kept).
//   - "vanilla" (VanillaSolver): g += l1 sign(p) + l2 p, g /= batch,
//     g clipped, p -= lr g.
//
// gorgonia v0.9.18's SolverOpts do not reach its AdaGradSolver (their
// switches lack it: it always runs at 0.001, eps 1e-8, no clipping, no
// L2); "adagrad" applies Config's options to its formula, and with none
// set it is that solver bit for bit.
//
// Defaults as gorgonia's: learning rate 0.001 (LR 0), rho 0.999, eps 1e-8,
// momentum 0.9; no clipping, no regularisation, batch 1. A Clip of 0 means
// no clipping (gorgonia's WithClip(0) clamps RMSProp's gradients to
// zero; FromSolver refuses it). gorgonia's scalar (F32/F64) learnables follow other
// formulas: flat buffers hold tensors.
//
// Its State is its cache: "square_avg" (rmsprop: the decayed mean of g²),
// "sum" (adagrad: the sum of g²) or "velocity" (momentum); vanilla has
// none.
type Gorgonia struct {
	name  string
	k     gorgoniaConsts
	cache []float32
	t     int64
}

// Step applies one update to p from g (g is left unchanged; gorgonia's
// solvers zero it, the caller's gradient buffer is its owner's to clear).
func (s *Gorgonia) Step(p, g []float32) {
	gorgoniaStep(s.name, &s.k, p, g[:len(p)], s.cache)
	s.t++
}

// gorgoniaStep is the update of gorgonia's solver name in T's precision,
// op for op as gorgonia's tensor code does it (every product and sum
// rounded to T).
func gorgoniaStep[T float32 | float64](name string, k *gorgoniaConsts, p, g, cache []T) {
	var (
		negEta         = T(-k.lr)
		clip, negClip  = T(k.clip), T(-k.clip)
		useClip        = k.clip > 0
		l2, l1         = T(k.l2), T(k.l1)
		useL2, useL1   = k.l2 != 0, k.l1 != 0
		onePerBatch    = T(1) / T(k.batch)
		useBatch       = k.batch > 1
		decay, omDecay = T(k.rho), T(1 - k.rho)
		eps            = T(k.eps)
		momentum       = T(k.momentum)
	)
	clamp := func(x T) T {
		if !useClip {
			return x
		}
		if x < negClip {
			return negClip
		}
		if x > clip {
			return clip
		}
		return x
	}
	sign := func(x T) T {
		switch {
		case x < 0:
			return -1
		case x > 0:
			return 1
		}
		return x
	}
	switch name {
	case "rmsprop", "adagrad":
		c := cache[:len(p)]
		for i := range p {
			gi := g[i]
			g2 := T(gi * gi)
			if name == "rmsprop" {
				c[i] = T(c[i]*decay) + T(g2*omDecay)
			} else {
				c[i] += g2
			}
			gi = T(clamp(gi) * negEta)
			upd := T(T(1)/T(math.Sqrt(float64(T(c[i]+eps))))) * gi
			if useL2 {
				upd -= T(p[i] * l2)
			}
			p[i] += upd
		}
	case "momentum":
		v := cache[:len(p)]
		for i := range p {
			gi := g[i]
			if useL1 {
				gi += T(l1 * sign(v[i]))
			}
			if useL2 {
				gi += T(v[i] * l2)
			}
			if useBatch {
				gi = T(gi * onePerBatch)
			}
			gi = T(clamp(gi) * negEta)
			v[i] = T(v[i]*momentum) + gi
			p[i] += v[i]
		}
	case "vanilla":
		for i := range p {
			gi := g[i]
			if useL1 {
				gi += T(l1 * sign(p[i]))
			}
			if useL2 {
				gi += T(p[i] * l2)
			}
			if useBatch {
				gi = T(gi * onePerBatch)
			}
			p[i] += T(clamp(gi) * negEta)
		}
	}
}

// State: "square_avg" (rmsprop), "sum" (adagrad), "velocity" (momentum);
// none for vanilla.
func (s *Gorgonia) State() (map[string][]float32, int64) {
	out := map[string][]float32{}
	switch s.name {
	case "rmsprop":
		out["square_avg"] = s.cache
	case "adagrad":
		out["sum"] = s.cache
	case "momentum":
		out["velocity"] = s.cache
	}
	return out, s.t
}

func (s *Gorgonia) SetStep(t int64)  { s.t = t }
func (s *Gorgonia) SetLR(lr float64) { s.k.lr = lr }
func (s *Gorgonia) Name() string     { return s.name }
