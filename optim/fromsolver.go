package optim

import (
	"fmt"
	"reflect"

	G "gorgonia.org/gorgonia"
)

// FromSolver returns the Config of the optimizer that follows s, a solver
// made by gorgonia's NewRMSPropSolver, NewAdaGradSolver, NewMomentum or
// NewVanillaSolver with any SolverOpts, so that a gorgonia program keeps
// its optimizer, options and all, where gdist owns the update (ZeRO
// shards the optimizer's state: zero.Options{Optim: cfg}). It reads the
// settings the solver was made with (gorgonia v0.9.18's fields) and
// nothing else; the solver's own state (its caches) is not carried over:
// convert a solver before its first Step. Other solvers are refused:
// gorgonia's Adam and AdamW differ from PyTorch's (Config "adam",
// "adamw"), and Barzilai-Borwein is not element-wise (a shard cannot run
// it).
func FromSolver(s G.Solver) (Config, error) {
	v := reflect.ValueOf(s)
	if s == nil || v.Kind() != reflect.Pointer || v.IsNil() {
		return Config{}, fmt.Errorf("optim: FromSolver: no solver (%T)", s)
	}
	v = v.Elem()
	f := func(name string) float64 { return v.FieldByName(name).Float() }
	on := func(name string) bool { return v.FieldByName(name).Bool() }
	var c Config
	switch s.(type) {
	case *G.RMSPropSolver:
		c = Config{Name: "rmsprop", LR: f("eta"), Eps: f("eps"), Rho: f("decay")}
		if on("useClip") {
			c.Clip = f("clip")
			if c.Clip == 0 {
				return Config{}, fmt.Errorf("optim: FromSolver: the RMSProp solver clips its gradients to [0, 0] (WithClip(0)): it never trains; drop WithClip or give a bound")
			}
		}
		if on("useL2Reg") {
			c.L2 = f("l2reg")
		}
		if c.Rho == 0 {
			return Config{}, fmt.Errorf("optim: FromSolver: the RMSProp solver's decay (WithRho) is 0: Config takes 0 as its default, 0.999")
		}
	case *G.AdaGradSolver:
		c = Config{Name: "adagrad", LR: f("eta"), Eps: f("eps")}
		if on("useClip") {
			c.Clip = f("clip")
		}
		if on("useL2Reg") {
			c.L2 = f("l2reg")
		}
	case *G.Momentum, *G.VanillaSolver:
		c = Config{Name: "vanilla", LR: f("eta"), Batch: f("batch")}
		if _, ok := s.(*G.Momentum); ok {
			c.Name, c.Momentum = "momentum", f("momentum")
			if c.Momentum == 0 {
				return Config{}, fmt.Errorf("optim: FromSolver: the Momentum solver's momentum is 0: use gorgonia.NewVanillaSolver (Config takes 0 as the default, 0.9)")
			}
		}
		if on("useClip") {
			c.Clip = f("clip") // gorgonia clips these only with a bound above 0
		}
		if on("useL2Reg") {
			c.L2 = f("l2reg")
		}
		if on("useL1Reg") {
			c.L1 = f("l1reg")
		}
		if c.Batch <= 1 {
			c.Batch = 0 // gorgonia divides by the batch size only above 1
		}
	default:
		return Config{}, fmt.Errorf("optim: FromSolver: %T is not one of gorgonia's RMSProp, AdaGrad, Momentum or Vanilla solvers, the ones optim follows (for Adam use Config{Name: \"adam\"} or \"adamw\": PyTorch's rules)", s)
	}
	if c.LR <= 0 {
		return Config{}, fmt.Errorf("optim: FromSolver: the solver's learning rate is %v: want a positive one (WithLearnRate)", c.LR)
	}
	if _, err := New(c, 0); err != nil {
		return Config{}, fmt.Errorf("optim: FromSolver: %w", err)
	}
	return c, nil
}
