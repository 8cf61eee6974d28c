package optim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// valueGrad is a learnable as gorgonia's solvers take it.
type valueGrad struct{ w, g *tensor.Dense }

func (v valueGrad) Value() G.Value         { return v.w }
func (v valueGrad) Grad() (G.Value, error) { return v.g, nil }
func (v valueGrad) fill(g []float32)       { copy(v.g.Data().([]float32), g) }
func (v valueGrad) fill64(g []float64)     { copy(v.g.Data().([]float64), g) }
func (v valueGrad) params() []float32      { return v.w.Data().([]float32) }
func (v valueGrad) params64() []float64    { return v.w.Data().([]float64) }
func newVG[T float32 | float64](p []T) valueGrad {
	w := append([]T(nil), p...)
	return valueGrad{tensor.New(tensor.WithShape(len(p)), tensor.WithBacking(w)),
		tensor.New(tensor.WithShape(len(p)), tensor.WithBacking(make([]T, len(p))))}
}

// gorgoniaCases pairs each Config with the gorgonia solver it stands for.
func gorgoniaCases() []struct {
	cfg    Config
	solver func() G.Solver
} {
	type c = struct {
		cfg    Config
		solver func() G.Solver
	}
	return []c{
		{Config{Name: "rmsprop"}, func() G.Solver { return G.NewRMSPropSolver() }},
		{Config{Name: "rmsprop", LR: 0.01, Clip: 0.5, L2: 1e-3, Rho: 0.9, Eps: 1e-6},
			func() G.Solver {
				return G.NewRMSPropSolver(G.WithLearnRate(0.01), G.WithClip(0.5), G.WithL2Reg(1e-3), G.WithRho(0.9), G.WithEps(1e-6))
			}},
		{Config{Name: "adagrad", LR: 0.05, Clip: 0.3, L2: 1e-2},
			func() G.Solver {
				// gorgonia v0.9.18's options do not reach AdaGradSolver
				// (their switches lack it): set its fields as they would.
				s := G.NewAdaGradSolver()
				setFields(s, map[string]any{"eta": 0.05, "clip": 0.3, "useClip": true, "l2reg": 1e-2, "useL2Reg": true})
				return s
			}},
		{Config{Name: "adagrad"}, func() G.Solver { return G.NewAdaGradSolver() }},
		{Config{Name: "momentum", LR: 0.1, Clip: 0.4, L2: 1e-2, L1: 1e-3, Batch: 4},
			func() G.Solver {
				return G.NewMomentum(G.WithLearnRate(0.1), G.WithClip(0.4), G.WithL2Reg(1e-2), G.WithL1Reg(1e-3), G.WithBatchSize(4))
			}},
		{Config{Name: "momentum", LR: 0.1, Momentum: 0.5}, func() G.Solver { return G.NewMomentum(G.WithLearnRate(0.1), G.WithMomentum(0.5)) }},
		{Config{Name: "vanilla", LR: 0.1, Clip: 0.4, L2: 1e-2, L1: 1e-3, Batch: 3},
			func() G.Solver {
				return G.NewVanillaSolver(G.WithLearnRate(0.1), G.WithClip(0.4), G.WithL2Reg(1e-2), G.WithL1Reg(1e-3), G.WithBatchSize(3))
			}},
		{Config{Name: "vanilla"}, func() G.Solver { return G.NewVanillaSolver() }},
	}
}

// TestGorgoniaSolvers: each of gorgonia's solvers, with its options and
// with its defaults, gives the same parameters as gorgonia's own, bit for
// bit, over several steps, in float32 and (the kernel) float64; a shard
// of the buffer stepped on its own gives its part of the whole (ZeRO).
func TestGorgoniaSolvers(t *testing.T) {
	const n, steps = 37, 6
	for _, tc := range gorgoniaCases() {
		t.Run(fmt.Sprintf("%+v", tc.cfg), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			p0 := make([]float32, n)
			for i := range p0 {
				p0[i] = float32(r.NormFloat64())
			}
			p0[3] = 0 // sign(0) is 0
			grads := make([][]float32, steps)
			for s := range grads {
				grads[s] = make([]float32, n)
				for i := range grads[s] {
					grads[s][i] = float32(r.NormFloat64())
				}
			}
			ref, ref64 := newVG(p0), newVG(widen(p0))
			sol, sol64 := tc.solver(), tc.solver()
			o, err := New(tc.cfg, n)
			if err != nil {
				t.Fatal(err)
			}
			// The user's own solver, converted.
			fc, err := FromSolver(tc.solver())
			if err != nil {
				t.Fatal(err)
			}
			of, err := New(fc, n)
			if err != nil {
				t.Fatal(err)
			}
			pf := append([]float32(nil), p0...)
			// Two shards of the buffer, each with its own optimizer.
			lo, hi := make([]float32, n/2), make([]float32, n-n/2)
			copy(lo, p0)
			copy(hi, p0[n/2:])
			olo, _ := New(tc.cfg, len(lo))
			ohi, _ := New(tc.cfg, len(hi))
			p := append([]float32(nil), p0...)
			p64 := widen(p0)
			var k64 gorgoniaConsts
			var cache64 []float64
			if g, ok := o.(*Gorgonia); ok {
				k64, cache64 = g.k, make([]float64, n)
			} else {
				t.Fatalf("%T, want *Gorgonia", o)
			}
			for s, g := range grads {
				ref.fill(g)
				ref64.fill64(widen(g))
				if err := sol.Step([]G.ValueGrad{ref}); err != nil {
					t.Fatal(err)
				}
				if err := sol64.Step([]G.ValueGrad{ref64}); err != nil {
					t.Fatal(err)
				}
				o.Step(p, g)
				of.Step(pf, g)
				olo.Step(lo, g[:n/2])
				ohi.Step(hi, g[n/2:])
				gorgoniaStep(tc.cfg.Name, &k64, p64, widen(g), cache64)
				for i, want := range ref.params() {
					if math.Float32bits(p[i]) != math.Float32bits(want) {
						t.Fatalf("step %d: parameter %d is %v, gorgonia's solver has %v", s, i, p[i], want)
					}
					if math.Float32bits(pf[i]) != math.Float32bits(want) {
						t.Fatalf("step %d: parameter %d is %v with FromSolver's %+v, gorgonia's solver has %v", s, i, pf[i], fc, want)
					}
					if sh := append(append([]float32(nil), lo...), hi...); math.Float32bits(sh[i]) != math.Float32bits(want) {
						t.Fatalf("step %d: parameter %d is %v in its shard, %v stepped whole", s, i, sh[i], want)
					}
					if w64 := ref64.params64()[i]; math.Float64bits(p64[i]) != math.Float64bits(w64) {
						t.Fatalf("step %d: float64 parameter %d is %v, gorgonia's solver has %v", s, i, p64[i], w64)
					}
				}
			}
			if math.Abs(float64(p[0]-p0[0])) < 1e-5 {
				t.Fatalf("parameter 0 barely moved: %v -> %v", p0[0], p[0])
			}
			if st, step := o.State(); step != steps || (tc.cfg.Name != "vanilla") != (len(st) == 1) {
				t.Fatalf("State: %d tensors, step %d", len(st), step)
			}
		})
	}
}

// setFields sets unexported fields of the struct s points to.
func setFields(s any, f map[string]any) {
	v := reflect.ValueOf(s).Elem()
	for name, x := range f {
		fv := v.FieldByName(name)
		reflect.NewAt(fv.Type(), unsafe.Pointer(fv.UnsafeAddr())).Elem().Set(reflect.ValueOf(x))
	}
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestGorgoniaBadConfig: options of the other family, or that the solver
// does not take, are refused by name.
func TestGorgoniaBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "rmsprop", WeightDecay: 0.1}, "L2"},
		{Config{Name: "rmsprop", L1: 0.1}, "L1"},
		{Config{Name: "adagrad", Batch: 4}, "Batch"},
		{Config{Name: "rmsprop", Rho: 1}, "Rho"},
		{Config{Name: "rmsprop", Clip: -1}, "Clip"},
		{Config{Name: "vanilla", Momentum: 0.9}, "Momentum"},
		{Config{Name: "momentum", Eps: 1e-8}, "Eps"},
		{Config{Name: "sgd", LR: 0.1, Clip: 1}, "Clip"},
		{Config{Name: "adam", LR: 0.1, L2: 1}, "WeightDecay"},
		{Config{Name: "rmsprop", LR: -1}, "learning rate"},
	} {
		if _, err := New(c.cfg, 3); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

// TestFromSolverRefuses: solvers optim does not follow, and settings
// Config cannot express, are refused by name.
func TestFromSolverRefuses(t *testing.T) {
	for _, c := range []struct {
		s    G.Solver
		want string
	}{
		{G.NewAdamSolver(), "AdamSolver"},
		{G.NewBarzilaiBorweinSolver(), "BarzilaiBorwein"},
		{G.NewRMSPropSolver(G.WithClip(0)), "WithClip"},
		{G.NewMomentum(G.WithMomentum(0)), "NewVanillaSolver"},
		{G.NewVanillaSolver(G.WithLearnRate(0)), "WithLearnRate"},
		{nil, "no solver"},
	} {
		if _, err := FromSolver(c.s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%T: %v, want an error naming %s", c.s, err, c.want)
		}
	}
}
