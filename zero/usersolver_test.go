package zero_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A plain gorgonia regression model, as a user writes it: x (b x 4) ->
// tanh(x w1 + b1) w2 -> mean squared error against y (b x 3).
const (
	usIn, usHidden, usOut = 4, 8, 3
	usBatch, usSteps      = 16, 6
)

// usData is the whole batch: row i of x and y.
func usData() (x, y []float32) {
	x, y = make([]float32, usBatch*usIn), make([]float32, usBatch*usOut)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.7)) * 2
	}
	for i := range y {
		y[i] = float32(math.Cos(float64(i) * 1.3))
	}
	return x, y
}

// usModel builds the model's graph on rows [lo, hi) of the batch, with
// weights from a fixed pattern (scaled by scale: the ranks of a ZeRO job
// start apart, the broadcast must fix them).
func usModel(lo, hi int, scale float32, tap bool) (*G.ExprGraph, []*G.Node, error) {
	x, y := usData()
	g := G.NewGraph()
	init := func(n int, k float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = scale * float32(math.Sin(float64(i)*k+0.3)) * 0.5
		}
		return v
	}
	w1 := G.NewMatrix(g, tensor.Float32, G.WithShape(usIn, usHidden), G.WithName("w1"),
		G.WithValue(tensor.New(tensor.WithShape(usIn, usHidden), tensor.WithBacking(init(usIn*usHidden, 1.1)))))
	b1 := G.NewVector(g, tensor.Float32, G.WithShape(usHidden), G.WithName("b1"),
		G.WithValue(tensor.New(tensor.WithShape(usHidden), tensor.WithBacking(init(usHidden, 0.4)))))
	w2 := G.NewMatrix(g, tensor.Float32, G.WithShape(usHidden, usOut), G.WithName("w2"),
		G.WithValue(tensor.New(tensor.WithShape(usHidden, usOut), tensor.WithBacking(init(usHidden*usOut, 2.3)))))
	learnables := []*G.Node{w1, b1, w2}
	use := learnables
	if tap {
		use = make([]*G.Node, len(learnables))
		for i, l := range learnables {
			var err error
			if use[i], err = zero.Tap(l); err != nil {
				return nil, nil, err
			}
		}
	}
	b := hi - lo
	xs := G.NewMatrix(g, tensor.Float32, G.WithShape(b, usIn), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(b, usIn), tensor.WithBacking(x[lo*usIn:hi*usIn]))))
	ys := G.NewMatrix(g, tensor.Float32, G.WithShape(b, usOut), G.WithName("y"),
		G.WithValue(tensor.New(tensor.WithShape(b, usOut), tensor.WithBacking(y[lo*usOut:hi*usOut]))))
	h := G.Must(G.Tanh(G.Must(G.BroadcastAdd(G.Must(G.Mul(xs, use[0])), use[1], nil, []byte{0}))))
	loss := G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(G.Must(G.Mul(h, use[2])), ys))))))
	if _, err := G.Grad(loss, learnables...); err != nil {
		return nil, nil, err
	}
	return g, learnables, nil
}

// usSolver is the user's optimizer: gorgonia's RMSProp with clipping and
// L2, the clip tight enough that the first steps clip.
func usSolver() *G.RMSPropSolver {
	return G.NewRMSPropSolver(G.WithLearnRate(0.01), G.WithClip(0.05), G.WithL2Reg(1e-3), G.WithRho(0.9))
}

// usParams copies the learnables' values, in order.
func usParams(ls []*G.Node) []float32 {
	var out []float32
	for _, l := range ls {
		out = append(out, l.Value().Data().([]float32)...)
	}
	return out
}

// TestUserSolver: ZeRO stages 1 and 2 (with taps and without) on 2 ranks,
// each with half the batch, stepping the user's gorgonia RMSProp solver
// (clipping, L2; converted with optim.FromSolver) on its shard, give the
// parameters of one process training the whole batch with gorgonia's own
// RMSPropSolver, within 1e-5 (relative to each tensor's scale): ZeRO keeps
// the user's optimizer.
func TestUserSolver(t *testing.T) {
	// The reference: plain gorgonia, one process, the whole batch.
	g, ls, err := usModel(0, usBatch, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	init := usParams(ls)
	vm := G.NewTapeMachine(g, G.BindDualValues(ls...))
	solver := usSolver()
	for s := 0; s < usSteps; s++ {
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		vm.Reset()
		if err := solver.Step(G.NodesToValueGrads(ls)); err != nil {
			t.Fatal(err)
		}
	}
	vm.Close()
	want := usParams(ls)

	cfg, err := optim.FromSolver(usSolver())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stage int
		tap   bool
	}{{1, false}, {2, false}, {2, true}} {
		t.Run(fmt.Sprintf("stage%d/tap=%v", c.stage, c.tap), func(t *testing.T) {
			const n = 2
			got := make([][]float32, n)
			err := commtest.RunRanks(context.Background(), world(t, n), 2*time.Minute, func(ctx context.Context, cm comm.Comm) error {
				r := cm.Rank()
				var g *G.ExprGraph
				var ls []*G.Node
				if err := flat.Build(func() (err error) {
					g, ls, err = usModel(r*usBatch/n, (r+1)*usBatch/n, float32(1+r), c.tap)
					return err
				}); err != nil {
					return err
				}
				e, err := zero.Wrap(ctx, cm, ls, zero.Options{Stage: c.stage, Optim: cfg})
				if err != nil {
					return err
				}
				defer e.Close()
				vm := G.NewTapeMachine(g, G.BindDualValues(ls...))
				defer vm.Close()
				for s := 0; s < usSteps; s++ {
					if err := e.Backward(ctx, vm.RunAll); err != nil {
						return err
					}
					vm.Reset()
					if err := e.Step(ctx); err != nil {
						return err
					}
				}
				got[r] = usParams(ls)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range got {
				usSame(t, fmt.Sprintf("rank %d", r), got[r], want, init)
			}
		})
	}
}

// usSame fails t unless got equals want within 1e-5 relative to the
// larger of the element and its tensor's RMS, and want moved from init.
func usSame(t *testing.T, name string, got, want, init []float32) {
	t.Helper()
	off := 0
	moved := 0.0
	for _, n := range []int{usIn * usHidden, usHidden, usHidden * usOut} {
		var rms float64
		for _, v := range want[off : off+n] {
			rms += float64(v) * float64(v)
		}
		rms = math.Sqrt(rms / float64(n))
		for i := off; i < off+n; i++ {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*math.Max(math.Abs(float64(want[i])), rms) {
				t.Fatalf("%s: parameter %d is %v, one process with gorgonia's solver has %v", name, i, got[i], want[i])
			}
			moved = math.Max(moved, math.Abs(float64(want[i]-init[i])))
		}
		off += n
	}
	if moved < 1e-2 {
		t.Fatalf("the reference barely trained (max change %v)", moved)
	}
}
