package plaintest

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Backwarder runs a rank's backward pass and reduces its gradients over
// the ranks: ddp.DDP's and zero.Engine's Backward.
type Backwarder interface {
	Backward(ctx context.Context, run func() error) error
}

// GradAdder is a Backwarder of the graph-per-step route (ddp.WrapValues,
// zero.WrapValues): the graph's gradients are added into its buffers.
type GradAdder interface {
	Backwarder
	AddGrads(nodes []*G.Node) error
}

// LoadBatch loads the batch of step, rank's n samples of a global batch
// of ranks*n (Batch), into m's inputs.
func LoadBatch(m *Graph, dt tensor.Dtype, step, rank, ranks, n int) error {
	x, y := Batch(dt, step*ranks*n+rank*n, n)
	if err := Load(m.X, x); err != nil {
		return err
	}
	return Load(m.Y, y)
}

// TrainTape trains the fixed graph m (built with the strategy's tap, its
// gradients from G.Grad) on a tape machine for steps steps at n samples
// a rank out of ranks: each step's batch loaded (LoadBatch), backward
// through b, then update.
func TrainTape(ctx context.Context, b Backwarder, m *Graph, dt tensor.Dtype, steps, rank, ranks, n int, update func() error) error {
	vm := G.NewTapeMachine(m.G, G.BindDualValues(m.Nodes...))
	defer vm.Close()
	for step := 0; step < steps; step++ {
		if err := LoadBatch(m, dt, step, rank, ranks, n); err != nil {
			return err
		}
		if err := b.Backward(ctx, vm.RunAll); err != nil {
			return err
		}
		vm.Reset()
		if err := update(); err != nil {
			return err
		}
	}
	return nil
}

// TrainValues trains ps on a graph built anew at every step in [from, to)
// (depth Depth(step), no tap), at n samples a rank out of ranks: each
// step's batch loaded, its gradients added into a's buffers (AddGrads)
// in a's backward, then update. The graphs run on a LispMachine, or with
// tapeOdd on odd steps on a tape machine (G.Grad, dual values).
func TrainValues(ctx context.Context, a GradAdder, ps []*tensor.Dense, dt tensor.Dtype, from, to, rank, ranks, n int, tapeOdd bool, update func() error) error {
	for step := from; step < to; step++ {
		var m *Graph
		var err error
		tape := tapeOdd && step%2 == 1
		if tape {
			m, err = BuildGrad(dt, ps, n, Depth(step), nil)
		} else {
			err = flat.Build(func() (err error) {
				m, err = Build(dt, ps, n, Depth(step), nil)
				return err
			})
		}
		if err != nil {
			return err
		}
		if err := LoadBatch(m, dt, step, rank, ranks, n); err != nil {
			return err
		}
		var vm G.VM = G.NewLispMachine(m.G)
		if tape {
			vm = G.NewTapeMachine(m.G, G.BindDualValues(m.Nodes...))
		}
		err = a.Backward(ctx, func() error {
			if err := vm.RunAll(); err != nil {
				return err
			}
			return a.AddGrads(m.Nodes)
		})
		vm.Close()
		if err != nil {
			return err
		}
		if err := update(); err != nil {
			return err
		}
	}
	return nil
}

// BuildGrad builds the graph of ps for n samples at depth with tap
// (flat.Build: graph construction is serialized) and its gradients
// (G.Grad), for a tape machine.
func BuildGrad(dt tensor.Dtype, ps []*tensor.Dense, n, depth int, tap func(*G.Node) (*G.Node, error)) (*Graph, error) {
	var m *Graph
	err := flat.Build(func() (err error) {
		if m, err = Build(dt, ps, n, depth, tap); err != nil {
			return err
		}
		_, err = G.Grad(m.Loss, m.Nodes...)
		return err
	})
	return m, err
}

// CheckRanks compares two ranks' trained parameters, at n samples each,
// with want, one process's at 2n: rank 0's within 1e-5 in float32, 1e-12
// in float64; rank 1's bit for bit rank 0's.
func CheckRanks(got [][]*tensor.Dense, want []*tensor.Dense, dt tensor.Dtype, n int) error {
	tol := 1e-5
	if dt == tensor.Float64 {
		tol = 1e-12
	}
	if err := Compare(got[0], want, tol); err != nil {
		return fmt.Errorf("2 ranks x %d against 1 x %d: %w", n, 2*n, err)
	}
	if err := Compare(got[1], got[0], 0); err != nil {
		return fmt.Errorf("rank 1 against rank 0: %w", err)
	}
	return nil
}
