package flat

import (
	"fmt"

	"github.com/gdist/gdist/comm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Value is a parameter tensor a model keeps across graphs, by name: the
// route for models that build a new graph every step (gorgonia's
// LispMachine examples, a recurrent model unrolled to each sequence's
// length), whose learnable nodes are new each step but whose values are
// not.
type Value struct {
	Name string
	T    *tensor.Dense
}

// BindValues lays the parameter tensors out in that order in new flat
// buffers of at least minLen elements (0: just enough), as Bind does for
// learnable nodes: each *tensor.Dense is re-backed in place onto its
// view of the flat parameter buffer, so the model keeps using the same
// tensors, now trained by the strategy. All float32 or all float64, each
// with storage of its own (not a view, not masked, not manually managed,
// not listed twice); anything else is an error naming it.
//
// Each step the model builds its graph with nodes over these tensors
// (gorgonia.WithValue(t), in any order, any of them unused), runs it, and
// hands the nodes' gradients to the strategy with AddGrads (the same
// order as here); the flat gradient buffer then holds them, and
// ValueGrads gives a gorgonia solver the parameters with those
// gradients.
func BindValues(values []Value, minLen int) (*Params, error) {
	if len(values) == 0 {
		return nil, fmt.Errorf("%w: no parameter tensors", ErrInvalid)
	}
	p := &Params{last: -1, dt: comm.Float32}
	seen := map[*tensor.Dense]int{}
	names := map[string]int{}
	off := 0
	for i, v := range values {
		if v.T == nil {
			return nil, fmt.Errorf("%w: parameter %d (%q) has a nil tensor", ErrInvalid, i, v.Name)
		}
		if j, dup := seen[v.T]; dup {
			return nil, fmt.Errorf("%w: parameter %d (%q) has the same tensor as parameter %d (%q): each needs a tensor of its own", ErrInvalid, i, v.Name, j, values[j].Name)
		}
		seen[v.T] = i
		if v.Name == "" {
			return nil, fmt.Errorf("%w: parameter %d has no name (checkpoints and errors name parameters)", ErrInvalid, i)
		}
		if j, dup := names[v.Name]; dup {
			return nil, fmt.Errorf("%w: parameters %d and %d are both named %q", ErrInvalid, j, i, v.Name)
		}
		names[v.Name] = i
		var dt comm.DType
		switch v.T.Dtype() {
		case tensor.Float32:
			dt = comm.Float32
		case tensor.Float64:
			dt = comm.Float64
		default:
			return nil, fmt.Errorf("%w: parameter %d (%q) is %v; gdist trains float32 and float64 parameters", ErrInvalid, i, v.Name, v.T.Dtype())
		}
		if i == 0 {
			p.dt = dt
		} else if dt != p.dt {
			return nil, fmt.Errorf("%w: parameter %d (%q) is %v but parameter 0 (%q) is %v: the parameters of one model share one type", ErrInvalid, i, v.Name, dt, values[0].Name, p.dt)
		}
		if why := unbackable(v.T); why != "" {
			return nil, fmt.Errorf("%w: parameter %d (%q): its tensor %s, so it cannot be re-backed in place onto the flat buffer: give it a tensor of its own", ErrInvalid, i, v.Name, why)
		}
		shape := append([]int(nil), v.T.Shape()...)
		size := prod(shape)
		if v.T.DataSize() != size {
			return nil, fmt.Errorf("%w: parameter %d (%q) has shape %v but holds %d elements", ErrInvalid, i, v.Name, shape, v.T.DataSize())
		}
		p.Spans = append(p.Spans, Span{Name: v.Name, Shape: shape, Offset: off, Size: size})
		off += size
	}
	p.alloc(max(off, minLen))
	p.vals = make([]*tensor.Dense, len(values))
	for i, v := range values {
		p.copyIn(i, false, v.T)
		p.vals[i] = v.T
	}
	if err := p.rebind(); err != nil {
		return nil, err
	}
	return p, nil
}

// AddGrads adds the gradients of one step's graph into the flat gradient
// buffer: nodes[i] is that graph's node over parameter i (as laid out by
// BindValues; nil for a parameter the step did not use), and its gradient
// (gorgonia's dual value, as a LispMachine or a tape machine with
// BindDualValues leaves it, or its derivative node's value) is added into
// span i. ready, if not nil, is called with i before (false) and after
// (true) each addition: strategies start reductions from it. A node that
// does not hold parameter i's tensor, or a gradient of another shape or
// type, is an error naming it.
func (p *Params) AddGrads(nodes []*G.Node, ready func(i int, done bool)) error {
	if p.vals == nil {
		return fmt.Errorf("%w: AddGrads needs parameters bound with BindValues (learnables bound with Bind get their gradients from the tape machine)", ErrInvalid)
	}
	if len(nodes) != len(p.vals) {
		return fmt.Errorf("%w: AddGrads got %d nodes for %d parameters (nil for one a step does not use)", ErrInvalid, len(nodes), len(p.vals))
	}
	if !p.HasGrad() {
		return fmt.Errorf("%w: no gradient buffer", ErrInvalid)
	}
	for i, n := range nodes {
		if n == nil {
			continue
		}
		s := p.Spans[i]
		if v, ok := n.Value().(*tensor.Dense); !ok || v != p.vals[i] {
			return fmt.Errorf("%w: node %d (%q) does not hold parameter %q's tensor: build each step's graph over the tensors given to BindValues (gorgonia.WithValue(t))", ErrInvalid, i, n.Name(), s.Name)
		}
		g, err := n.Grad()
		if err != nil {
			return fmt.Errorf("%w: parameter %q (node %q) has no gradient: run the graph with backpropagation (a LispMachine, or a tape machine after gorgonia.Grad): %v", ErrInvalid, s.Name, n.Name(), err)
		}
		gd, ok := g.(*tensor.Dense)
		if !ok || gd.DataSize() != s.Size || !gd.IsNativelyAccessible() {
			return fmt.Errorf("%w: the gradient of parameter %q is a %T of shape %v, want a dense tensor of %d elements", ErrInvalid, s.Name, g, g.Shape(), s.Size)
		}
		if ready != nil {
			ready(i, false)
		}
		switch src := gd.Data().(type) {
		case []float32:
			if p.dt != comm.Float32 {
				return fmt.Errorf("%w: the gradient of parameter %q is float32, the parameters %v", ErrInvalid, s.Name, p.dt)
			}
			AddTo(p.GradOf(i), src)
		case []float64:
			if p.dt != comm.Float64 {
				return fmt.Errorf("%w: the gradient of parameter %q is float64, the parameters %v", ErrInvalid, s.Name, p.dt)
			}
			dst := p.GradOf64(i)
			for j, v := range src {
				dst[j] += v
			}
		default:
			return fmt.Errorf("%w: the gradient of parameter %q is %v", ErrInvalid, s.Name, gd.Dtype())
		}
		if ready != nil {
			ready(i, true)
		}
	}
	return nil
}

// ValueGrads returns, for every bound parameter in span order, its value
// tensor with its gradient in the flat gradient buffer: what a gorgonia
// solver steps (solver.Step(p.ValueGrads())), clearing the gradients as
// it goes, for parameters bound with BindValues (with Bind,
// gorgonia.NodesToValueGrads(learnables) is the same).
func (p *Params) ValueGrads() []G.ValueGrad {
	out := make([]G.ValueGrad, len(p.Spans))
	for i, s := range p.Spans {
		var v *tensor.Dense
		switch {
		case p.vals != nil:
			v = p.vals[i]
		case p.nodes != nil:
			v, _ = p.nodes[i].Value().(*tensor.Dense)
		default:
			v = tensor.New(tensor.WithShape(s.Shape...), tensor.WithBacking(p.viewOf(i, false)))
		}
		var g *tensor.Dense
		if p.HasGrad() {
			g = tensor.New(tensor.WithShape(s.Shape...), tensor.WithBacking(p.viewOf(i, true)))
		}
		out[i] = valueGrad{name: s.Name, v: v, g: g}
	}
	return out
}

type valueGrad struct {
	name string
	v, g *tensor.Dense
}

func (vg valueGrad) Value() G.Value { return vg.v }
func (vg valueGrad) Name() string   { return vg.name }
func (vg valueGrad) Grad() (G.Value, error) {
	if vg.g == nil {
		return nil, fmt.Errorf("%w: parameter %q has no gradient buffer", ErrInvalid, vg.name)
	}
	return vg.g, nil
}
