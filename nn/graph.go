package nn

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Graph is a model compiled for one batch size: a training graph (forward,
// loss and backward, with gradient hooks) or an evaluation graph (forward
// only, batch norm on running statistics). Graphs of one Model share its
// parameters, gradients and batch-norm state. A Graph is not safe for
// concurrent use.
type Graph struct {
	M     *Model
	Batch int
	Train bool
	// OnGrad receives each parameter's gradient during backward. The
	// default (nil) adds it into M.Flat.Grad.
	OnGrad GradHook
	// SampleOffset is the index of this rank's first sample in the global
	// batch (rank x Batch for data parallelism): Dropout's masks depend on
	// it, so that N ranks drop what one process with the whole batch
	// would.
	SampleOffset int

	hook   GradHook        // what the hook ops call: OnGrad or the default
	hooks  *hookSet        // the training graph's (cut loose by Close)
	ctx    context.Context // the running Step's, only while it runs
	gates  []*gate
	runs   int64
	g      *G.ExprGraph
	xT, yT *tensor.Dense
	loss   *G.Node
	logits *G.Node
	vm     G.VM     // a training graph's
	fwd    *forward // an evaluation graph's (forward.go)
}

// NewGraph compiles m for batch samples per step.
// Graphs are built under flat.Build's lock (gorgonia's graph building is
// not safe for concurrent use).
func (m *Model) NewGraph(batch int, train bool) (gr *Graph, err error) {
	err = flat.Build(func() (err error) {
		gr, err = m.newGraph(batch, train, !train)
		return err
	})
	return gr, err
}

// newGraph compiles m; fwdOnly (evaluation graphs only) runs it on
// forward (forward.go) rather than on gorgonia's tape machine, which the
// tests compare it with.
func (m *Model) newGraph(batch int, train, fwdOnly bool) (*Graph, error) {
	if batch < 1 {
		return nil, fmt.Errorf("nn: batch %d < 1", batch)
	}
	gr := &Graph{M: m, Batch: batch, Train: train}
	g := G.NewGraph()
	gr.g = g
	shape := append([]int{batch}, m.inShape...)
	gr.xT = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]float32, batch*m.InputSize())))
	x := G.NewTensor(g, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName("x"), G.WithValue(gr.xT))
	var hooks *hookSet
	if train {
		hooks = &hookSet{m: m, onGrad: &gr.hook}
		gr.hooks = hooks
	}
	b := m.builder(g, train, batch, hooks)
	b.ctx, b.runs, b.offset = &gr.ctx, &gr.runs, &gr.SampleOffset
	h, err := b.build(0, x)
	if err != nil {
		return nil, fmt.Errorf("nn: building %s: %w", m.Name, err)
	}
	gr.gates = b.gates
	gr.logits = h
	if train {
		hooks.gates = gateIndex(b.gates)
		rows := batch * m.perLab
		gr.yT = tensor.New(tensor.WithShape(rows), tensor.WithBacking(make([]float32, rows)))
		y := G.NewVector(g, tensor.Float32, G.WithShape(rows), G.WithName("y"), G.WithValue(gr.yT))
		lg, err := m.lossInput(h)
		if err != nil {
			return nil, err
		}
		loss, err := G.ApplyOp(&xentOp{baseOp: baseOp{nextID(), "xent"}}, lg, y)
		if err != nil {
			return nil, err
		}
		gr.loss = loss
		if len(b.leaves) > 0 {
			if _, err := G.Grad(loss, b.leaves...); err != nil {
				return nil, fmt.Errorf("nn: gradients of %s: %w", m.Name, err)
			}
		}
	}
	if fwdOnly && !train {
		// Forward only: activations freed as the pass goes (forward.go).
		f, err := newForward(g, h)
		if err != nil {
			return nil, err
		}
		gr.fwd = f
		return gr, nil
	}
	gr.vm = G.NewTapeMachine(g)
	return gr, nil
}

// gateIndex maps each parameter to its layer's gate.
func gateIndex(gates []*gate) map[int]*gate {
	out := map[int]*gate{}
	for _, g := range gates {
		for _, i := range g.idx {
			out[i] = g
		}
	}
	return out
}

// releaseAll drops whatever gathered parameters a pass left (learnables
// without a gradient, or a pass that failed).
func releaseAll(gates []*gate) {
	for _, g := range gates {
		g.release()
	}
}

func (gr *Graph) load(x []float32) error {
	if len(x) != gr.Batch*gr.M.InputSize() {
		return fmt.Errorf("nn: got %d input floats, want %d (batch %d x %d)", len(x), gr.Batch*gr.M.InputSize(), gr.Batch, gr.M.InputSize())
	}
	copy(gr.xT.Data().([]float32), x)
	return nil
}

// Step runs forward, loss and backward on one batch (x: Batch samples,
// y: Batch x M.LabelsPerSample() labels) and returns the mean loss; ctx
// bounds what the layers' ops wait for (SyncBN's collectives). Each gradient goes to OnGrad
// (default: added into M.Flat.Grad) as soon as it is computed.
func (gr *Graph) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	if !gr.Train {
		return 0, fmt.Errorf("nn: Step on an evaluation graph")
	}
	if err := gr.load(x); err != nil {
		return 0, err
	}
	if err := gr.M.checkLabels(gr.yT.Data().([]float32), y); err != nil {
		return 0, err
	}
	gr.hook = gr.OnGrad
	if gr.hook == nil {
		gr.hook = gr.M.accumulate
	}
	if err := gr.run(ctx); err != nil {
		return 0, err
	}
	return gr.loss.Value().Data().(float32), nil
}

// StepIn runs Step inside a strategy's Backward (ddp.DDP.Backward,
// zero.Engine.Backward), which reduces the gradients, and returns the
// loss. Set OnGrad to the strategy's AddGrad first.
func (gr *Graph) StepIn(ctx context.Context, backward func(context.Context, func() error) error, x []float32, y []int32) (float32, error) {
	var loss float32
	err := backward(ctx, func() (err error) {
		loss, err = gr.Step(ctx, x, y)
		return err
	})
	if err != nil {
		return 0, err
	}
	return loss, nil
}

// Logits runs the forward pass and returns Batch x Classes logits (valid
// until the next call).
func (gr *Graph) Logits(x []float32) ([]float32, error) {
	if gr.Train {
		return nil, fmt.Errorf("nn: Logits on a training graph")
	}
	if err := gr.load(x); err != nil {
		return nil, err
	}
	if gr.fwd == nil { // the tape machine (tests)
		if err := gr.run(nil); err != nil {
			return nil, err
		}
		return append([]float32(nil), gr.logits.Value().Data().([]float32)...), nil
	}
	gr.runs++
	v, err := gr.fwd.run()
	releaseAll(gr.gates)
	if err != nil {
		return nil, err
	}
	out := floats(v)
	if len(out) != gr.Batch*gr.M.perLab*gr.M.classes {
		return nil, fmt.Errorf("nn: %s's evaluation graph gave %d logits, want %d", gr.M.Name, len(out), gr.Batch*gr.M.perLab*gr.M.classes)
	}
	return append([]float32(nil), out...), nil
}

// run runs the machine once under ctx.
func (gr *Graph) run(ctx context.Context) error {
	gr.ctx = ctx
	gr.runs++
	defer func() {
		gr.ctx = nil
		releaseAll(gr.gates)
		gr.vm.Reset()
	}()
	return gr.vm.RunAll()
}

func (m *Model) accumulate(i int, g []float32) {
	p := m.Params[i]
	flat.AddTo(m.Flat.Grad[p.Offset:p.Offset+p.Size], g)
}

// Close releases the graph's machine and lets its memory go: close every
// training graph you drop (a dropped, unclosed one can stay in memory with
// its activations, held through gorgonia's gradient plumbing).
func (gr *Graph) Close() error {
	gr.hooks.release()
	if gr.vm == nil {
		gr.fwd = nil
		return nil
	}
	return gr.vm.Close()
}
