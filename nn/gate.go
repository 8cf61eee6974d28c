package nn

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Gradients and ZeRO-3 parameter gathering, for every layer alike.
//
// Every learnable enters a training graph through flat.Hook, whose
// backward hands the learnable's complete gradient to the graph's hook
// set: to Graph.OnGrad (a strategy's AddGrad), by default added into
// Flat.Grad; or, with a Store (ZeRO stage 3), to the store.
//
// With a Store, each layer that has learnables is built between two
// identity ops (a gate): the one on its input fetches the layer's
// parameters from the store and re-backs the learnables' tensors onto
// them; the one on its output releases them. In backward the order turns
// round: the output gate's gradient fetches them again (the layer's
// gradient ops read them), and they are released once every learnable's
// gradient and the input's gradient (if the graph wants it) have been
// produced. So a rank holds full parameters only for the layers at work,
// and a user's layer needs nothing of its own to be sharded.

// hookSet routes a graph's parameter gradients.
type hookSet struct {
	m      *Model
	onGrad *GradHook // the graph's current hook (never nil while running)
	gates  map[int]*gate
}

// release cuts the hook set loose from its graph and model: something
// outside nn keeps gorgonia's gradient-hook closures alive after the
// graph is gone (see TestClosedGraphsAreFreed), and through them the
// whole graph with its activations.
func (h *hookSet) release() {
	if h != nil {
		*h = hookSet{}
	}
}

func (h *hookSet) fn(i int) func([]float32) error {
	return func(g []float32) error {
		if h.m.Store == nil {
			(*h.onGrad)(i, g)
			return nil
		}
		// The store owns what it gets; gorgonia's value is reused.
		if err := h.m.Store.AddGrad(i, append([]float32(nil), g...)); err != nil {
			return fmt.Errorf("nn: gradient of %s: %w", h.m.Params[i].Name, err)
		}
		if gt := h.gates[i]; gt != nil {
			gt.tick()
		}
		return nil
	}
}

// placeholder backs a released learnable: a read of it fails loudly.
var placeholder = []float32{0}

// gate holds one layer's parameters while it runs (store mode).
type gate struct {
	store flat.Store
	name  string
	train bool
	idx   []int
	ts    []*tensor.Dense
	held  bool
	// noBack: the layer's backward reads no parameter (NoBackwardFetch).
	noBack bool
	need   int // backward events that end the layer's backward
	got    int
}

func (g *gate) add(i int, t *tensor.Dense) {
	g.idx = append(g.idx, i)
	g.ts = append(g.ts, t)
	tensor.WithBacking(placeholder)(t)
	if g.train {
		g.need++
	}
}

func (g *gate) fetch(backward bool) error {
	if g.held || len(g.idx) == 0 {
		return nil
	}
	vals, err := g.store.Fetch(g.idx, backward)
	if err != nil {
		return fmt.Errorf("nn: fetching the parameters of layer %q: %w", g.name, err)
	}
	for k, t := range g.ts {
		tensor.WithBacking(vals[k])(t)
	}
	g.held, g.got = true, 0
	return nil
}

func (g *gate) release() {
	if !g.held {
		return
	}
	g.store.Release(g.idx)
	for _, t := range g.ts {
		tensor.WithBacking(placeholder)(t)
	}
	g.held, g.got = false, 0
}

// tick counts one backward event; the last releases the parameters.
func (g *gate) tick() {
	g.got++
	if g.got >= g.need {
		g.release()
	}
}

// gateOp is the identity op on a layer's input (fetch) or output.
type gateOp struct {
	id    int64
	g     *gate
	fetch bool // input side
	back  bool // the gradient op
}

func (op *gateOp) Arity() int { return 1 }
func (op *gateOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *gateOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *gateOp) ReturnsPtr() bool     { return true }
func (op *gateOp) CallsExtern() bool    { return false }
func (op *gateOp) OverwritesInput() int { return -1 }
func (op *gateOp) String() string {
	return fmt.Sprintf("gate(%s,%v,%v)", op.g.name, op.fetch, op.back)
}
func (op *gateOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "gdist.gate#%d", op.id) }
func (op *gateOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op *gateOp) Do(v ...G.Value) (G.Value, error) {
	switch {
	case op.fetch && !op.back: // forward, input side
		return v[0], op.g.fetch(false)
	case !op.fetch && !op.back: // forward, output side
		op.g.release()
	case !op.fetch && op.back: // backward starts at the output
		if op.g.noBack {
			return v[0], nil
		}
		return v[0], op.g.fetch(true)
	default: // the input's gradient is done
		op.g.tick()
	}
	return v[0], nil
}

func (op *gateOp) DiffWRT(int) []bool { return []bool{!op.back} }
func (op *gateOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.back {
		return nil, fmt.Errorf("nn: the gradient of a gate's gradient is not defined")
	}
	if op.fetch {
		op.g.need++ // the input's gradient is one more event
	}
	n, err := G.ApplyOp(&gateOp{id: nextID(), g: op.g, fetch: op.fetch, back: true}, grad)
	return G.Nodes{n}, err
}
