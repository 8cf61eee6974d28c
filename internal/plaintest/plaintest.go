// Package plaintest is a small plain gorgonia model for the tests of the
// plain-gorgonia path (ddp.Wrap, ddp.WrapValues, zero.Wrap,
// zero.WrapValues): a tanh network whose hidden layer is applied a
// number of times that changes from step to step (a recurrence unrolled
// to each step's length, so graph-per-step models build a new graph every
// step), in float32 or float64, with its data and a one-process
// reference trained the plain gorgonia way.
package plaintest

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Sizes of the model: In inputs, Hidden units, one output.
const (
	In     = 4
	Hidden = 6
)

// Names of the parameters, in layout order.
var Names = []string{"w_in", "b_in", "w_rec", "w_out"}

// Shapes of the parameters, in layout order.
var Shapes = [][]int{{In, Hidden}, {Hidden}, {Hidden, Hidden}, {Hidden, 1}}

// Depth is the number of recurrent applications at step k (1 to 3).
func Depth(step int) int { return step%3 + 1 }

// Params returns fresh parameter tensors of type dt, a function of seed.
func Params(dt tensor.Dtype, seed int) []*tensor.Dense {
	out := make([]*tensor.Dense, len(Shapes))
	for i, s := range Shapes {
		n := 1
		for _, d := range s {
			n *= d
		}
		v := make([]float64, n)
		for j := range v {
			v[j] = 0.5 * math.Sin(float64(seed*1000+i*100+j)*0.7)
		}
		out[i] = Tensor(dt, s, v)
	}
	return out
}

// Values names ts for BindValues.
func Values(ts []*tensor.Dense) []flat.Value {
	out := make([]flat.Value, len(ts))
	for i, t := range ts {
		out[i] = flat.Value{Name: Names[i], T: t}
	}
	return out
}

// Tensor is a tensor of type dt and shape s holding v.
func Tensor(dt tensor.Dtype, s []int, v []float64) *tensor.Dense {
	if dt == tensor.Float64 {
		return tensor.New(tensor.WithShape(s...), tensor.WithBacking(append([]float64(nil), v...)))
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return tensor.New(tensor.WithShape(s...), tensor.WithBacking(f))
}

// Batch is samples [lo, lo+n) of the data set: x (n x In) and y (n x 1).
func Batch(dt tensor.Dtype, lo, n int) (x, y *tensor.Dense) {
	xv, yv := make([]float64, n*In), make([]float64, n)
	for i := 0; i < n; i++ {
		s := float64(lo + i)
		for j := 0; j < In; j++ {
			xv[i*In+j] = math.Sin(0.31*s + float64(j))
		}
		yv[i] = math.Cos(0.17 * s)
	}
	return Tensor(dt, []int{n, In}, xv), Tensor(dt, []int{n, 1}, yv)
}

// Graph is one step's graph: its nodes over the parameters (layout
// order), its input nodes and its loss.
type Graph struct {
	G     *G.ExprGraph
	Nodes []*G.Node
	X, Y  *G.Node
	Loss  *G.Node
}

// Build makes the graph for a batch of n samples and depth recurrent
// applications over the parameter tensors ps (node values: the tensors
// themselves). tap, if not nil, stands each parameter node in the
// forward code (ddp.Tap). Loss is the mean squared error.
func Build(dt tensor.Dtype, ps []*tensor.Dense, n, depth int, tap func(*G.Node) (*G.Node, error)) (*Graph, error) {
	g := G.NewGraph()
	m := &Graph{G: g}
	use := make([]*G.Node, len(ps))
	for i, p := range ps {
		node := G.NewTensor(g, dt, len(Shapes[i]), G.WithShape(Shapes[i]...), G.WithName(Names[i]), G.WithValue(p))
		m.Nodes = append(m.Nodes, node)
		use[i] = node
		if tap != nil {
			t, err := tap(node)
			if err != nil {
				return nil, err
			}
			use[i] = t
		}
	}
	m.X = G.NewMatrix(g, dt, G.WithShape(n, In), G.WithName("x"))
	m.Y = G.NewMatrix(g, dt, G.WithShape(n, 1), G.WithName("y"))
	h, err := G.Mul(m.X, use[0])
	if err != nil {
		return nil, err
	}
	if h, err = G.BroadcastAdd(h, use[1], nil, []byte{0}); err != nil {
		return nil, err
	}
	if h, err = G.Tanh(h); err != nil {
		return nil, err
	}
	for k := 0; k < depth; k++ {
		if h, err = G.Mul(h, use[2]); err != nil {
			return nil, err
		}
		if h, err = G.Tanh(h); err != nil {
			return nil, err
		}
	}
	out, err := G.Mul(h, use[3])
	if err != nil {
		return nil, err
	}
	d, err := G.Sub(out, m.Y)
	if err != nil {
		return nil, err
	}
	if d, err = G.Square(d); err != nil {
		return nil, err
	}
	if m.Loss, err = G.Mean(d); err != nil {
		return nil, err
	}
	return m, nil
}

// Reference trains one process the plain gorgonia way: steps steps of
// global batch n, a new graph every step (depth(step) recurrent
// applications), a LispMachine and solver. It returns the final
// parameters.
func Reference(dt tensor.Dtype, seed, steps, n int, depth func(int) int, solver G.Solver) ([]*tensor.Dense, error) {
	ps := Params(dt, seed)
	for step := 0; step < steps; step++ {
		m, err := Build(dt, ps, n, depth(step), nil)
		if err != nil {
			return nil, err
		}
		x, y := Batch(dt, step*n, n)
		G.Let(m.X, x)
		G.Let(m.Y, y)
		vm := G.NewLispMachine(m.G)
		err = vm.RunAll()
		vm.Close()
		if err != nil {
			return nil, err
		}
		if err := solver.Step(G.NodesToValueGrads(m.Nodes)); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// Load puts t in node's value: the first time by binding it, later by
// copying into the value the node holds (a tape machine keeps reading
// that tensor).
func Load(node *G.Node, t *tensor.Dense) error {
	if v, ok := node.Value().(*tensor.Dense); ok && v != nil {
		return tensor.Copy(v, t)
	}
	return G.Let(node, t)
}

// Float64s is a tensor's elements as float64.
func Float64s(t *tensor.Dense) []float64 {
	switch v := t.Data().(type) {
	case []float64:
		return append([]float64(nil), v...)
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	panic(fmt.Sprintf("plaintest: %v tensor", t.Dtype()))
}

// Compare returns an error naming the first parameter element of got
// farther from want than tol (relative to 1 + |want|).
func Compare(got, want []*tensor.Dense, tol float64) error {
	for i := range want {
		g, w := Float64s(got[i]), Float64s(want[i])
		for j := range w {
			if d := math.Abs(g[j] - w[j]); !(d <= tol*(1+math.Abs(w[j]))) {
				return fmt.Errorf("%s[%d] = %v, want %v (difference %.3g, tolerance %.3g)", Names[i], j, g[j], w[j], d, tol)
			}
		}
	}
	return nil
}
