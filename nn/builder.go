package nn

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Builder is what a layer's Fwd builds with: the graph, the mode and the
// nodes of the layer's learnables. nn makes one per graph.
type Builder struct {
	g     *G.ExprGraph
	m     *Model
	train bool
	batch int
	mod   int // current module
	// sh, when set, only computes shapes: parameters are placeholders.
	shapesOnly bool
	hooks      *hookSet // nil: no gradients (evaluation, shapes)

	nodes  map[int]*G.Node // param index -> the node layers use
	leaves []*G.Node       // parameter leaves, for gorgonia.Grad
	leafOf map[int]*G.Node
	// needDX: nodes whose gradient is wanted although no learnable feeds
	// them (a pipeline stage's input).
	needDX map[*G.Node]bool
	stage  bool   // building a pipeline stage
	runs   *int64 // the graph's run count (dropout masks)
	offset *int   // the graph's SampleOffset
	gates  []*gate
	gate   *gate            // the layer being built (store mode)
	err    error            // the first misuse by a layer (Param out of range)
	ctx    *context.Context // the running Step's (batch-norm sync)
	// poolNext: a Sequential asks the Conv2d it builds next to take in
	// the ReLU and MaxPool2d that follow it (Conv2d.Fwd clears it).
	poolNext bool
}

// Param returns the node of the current layer's k-th learnable (in its
// Params order). Every call for the same k returns the same node.
func (b *Builder) Param(k int) *G.Node {
	md := b.m.mods[b.mod]
	if k < 0 || k >= md.n {
		// A bug in the layer: report it when its Fwd returns, and hand out
		// a stand-in so that the graph code in between does not panic.
		if b.err == nil {
			b.err = fmt.Errorf("nn: layer %q (%T) asks for parameter %d; it declares %d", md.prefix, md.l, k, md.n)
		}
		return G.NewScalar(b.g, tensor.Float32, G.WithName(fmt.Sprintf("bad-param-%d", nextID())))
	}
	i := md.first + k
	if n := b.nodes[i]; n != nil {
		return n
	}
	p := b.m.Params[i]
	var t *tensor.Dense
	switch {
	case b.shapesOnly:
	case b.m.Store != nil:
		// Store mode: the leaf is backed by the gathered values while its
		// layer runs (see gate), and by nothing in between.
		t = tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(make([]float32, p.Size)))
		b.gate.add(i, t)
	default:
		t = tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(b.m.Flat.Value[p.Offset:p.Offset+p.Size]))
	}
	opts := []G.NodeConsOpt{G.WithShape(p.Shape...), G.WithName(p.Name)}
	if t != nil {
		opts = append(opts, G.WithValue(t))
	}
	leaf := G.NewTensor(b.g, tensor.Float32, len(p.Shape), opts...)
	n := leaf
	if b.hooks != nil {
		var err error
		if n, err = flat.Hook(leaf, b.hooks.fn(i)); err != nil && b.err == nil {
			b.err = fmt.Errorf("nn: hooking %s: %w", p.Name, err)
		}
		b.leaves = append(b.leaves, leaf)
	}
	b.nodes[i] = n
	return n
}

// Train reports whether the graph is a training graph (batch norm on batch
// statistics, dropout active) rather than an evaluation graph.
func (b *Builder) Train() bool { return b.train }

// Batch is the graph's batch size (samples per step on this rank).
func (b *Builder) Batch() int { return b.batch }

// Graph is the expression graph being built.
func (b *Builder) Graph() *G.ExprGraph { return b.g }

// Name is the current layer's PyTorch module name ("" for the model).
func (b *Builder) Name() string { return b.m.mods[b.mod].prefix }

// Child builds the current container's i-th child on x.
func (b *Builder) Child(i int, x *G.Node) (*G.Node, error) {
	md := b.m.mods[b.mod]
	if i < 0 || i >= len(md.children) {
		return nil, fmt.Errorf("nn: container %q has no child %d", md.prefix, i)
	}
	return b.build(md.children[i], x)
}

// build builds module id on x (with its store gate in ZeRO-3 mode).
func (b *Builder) build(id int, x *G.Node) (*G.Node, error) {
	saved, savedGate := b.mod, b.gate
	defer func() { b.mod, b.gate = saved, savedGate }()
	b.mod = id
	md := b.m.mods[id]
	if b.m.Store == nil || md.n == 0 || b.shapesOnly {
		y, err := md.l.Fwd(b, x)
		return y, b.wrapErr(md, b.firstErr(err))
	}
	g := &gate{store: b.m.Store, name: md.prefix, train: b.hooks != nil}
	b.gate = g
	b.gates = append(b.gates, g)
	xf, err := G.ApplyOp(&gateOp{id: nextID(), g: g, fetch: true}, x)
	if err != nil {
		return nil, err
	}
	y, err := md.l.Fwd(b, xf)
	if err = b.firstErr(err); err != nil {
		return nil, b.wrapErr(md, err)
	}
	return G.ApplyOp(&gateOp{id: nextID(), g: g}, y)
}

// firstErr prefers a recorded misuse to the error it caused.
func (b *Builder) firstErr(err error) error {
	if b.err != nil {
		return b.err
	}
	return err
}

func (b *Builder) wrapErr(md module, err error) error {
	if err == nil || md.prefix == "" {
		return err
	}
	return fmt.Errorf("layer %s (%T): %w", md.prefix, md.l, err)
}

// NoBackwardFetch declares that the current layer's backward reads none
// of its parameters (its input needs no gradient, and its parameters'
// gradients do not depend on them: Linear or Conv2d at the network's
// input). Under ZeRO-3 they are then not gathered again for backward.
func (b *Builder) NoBackwardFetch() {
	if b.gate != nil {
		b.gate.noBack = true
	}
}

// NeedsGrad reports whether x needs a gradient: whether any learnable of
// the graph (or an input whose gradient is wanted) feeds it. A layer at
// the network's input may skip computing its input gradient.
func (b *Builder) NeedsGrad(x *G.Node) bool {
	if b.hooks == nil {
		return false
	}
	leaf := map[*G.Node]bool{}
	for _, l := range b.leaves {
		leaf[l] = true
	}
	seen := map[int64]bool{}
	var walk func(n *G.Node) bool
	walk = func(n *G.Node) bool {
		if seen[n.ID()] {
			return false
		}
		seen[n.ID()] = true
		if leaf[n] || b.needDX[n] {
			return true
		}
		for it := b.g.From(n.ID()); it.Next(); {
			if walk(it.Node().(*G.Node)) {
				return true
			}
		}
		return false
	}
	return walk(x)
}
