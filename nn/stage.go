package nn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Pipeline stages: a contiguous range of a model's layers compiled on its
// own, over the model's flat parameter and gradient buffers. Because the
// parameters are laid out layer by layer, the parameters of layers
// [from, to) are one contiguous range of Flat and Grad (StageRange), which a
// data-parallel group over the same stage can all-reduce as one buffer.

// StageGraph is layers [From, To) of a model compiled for one micro-batch
// size, as one stage of a pipeline. It shares the model's Flat and Grad
// (exactly as a Graph does): parameters are read from Flat and each
// gradient goes to OnGrad (default: added into Grad) during Backward.
//
// The input is the previous stage's activation (or the data, for the stage
// that starts at layer 0). The last stage (To == NumLayers()) ends in the
// softmax cross-entropy against labels, mean over the micro-batch,
// multiplied by Scale for the gradients (a pipeline sets Scale to
// microBatch/batch so that the gradients of the micro-batches add up to the
// whole batch's). Any other stage ends in its output activation; its
// backward is driven by the gradient of the loss with respect to that
// output, received from the next stage: the graph differentiates
// cost = sum(output * gradOut), whose gradient with respect to the output
// is gradOut.
//
// Activation recomputation: gorgonia's tape machine runs forward and
// backward in one pass, so Backward runs the forward pass again from the
// saved input before differentiating. A pipeline stage thus holds only
// the input of each micro-batch in flight, never its inner activations,
// at the cost of a second forward pass.
//
// Batch norm is not supported (its running statistics would be updated
// twice, and per micro-batch statistics differ from the batch's anyway).
// A StageGraph is not safe for concurrent use.
type StageGraph struct {
	M        *Model
	From, To int
	Batch    int
	Last     bool
	// OnGrad receives each parameter's gradient during Backward or Step;
	// the default (nil) adds it into M.Flat.Grad.
	OnGrad GradHook
	// Scale multiplies the loss before differentiation (last stage only).
	// NewStage sets it to 1.
	Scale float32

	InShape, OutShape tensor.Shape

	hook GradHook
	ctx  context.Context // stays nil: stages hold no batch norm

	// forward-only graph (non-last stages), run by forward (forward.go):
	// its activations are freed as the pass goes
	ffwd   *forward
	fgates []*gate
	fx     *tensor.Dense
	out    *G.Node

	// training graph
	tvm     G.VM // nil if there is nothing to differentiate
	tx      *tensor.Dense
	gOut    *tensor.Dense // non-last: the received gradient
	yT      *tensor.Dense // last: labels
	loss    *G.Node       // last: unscaled mean loss
	dx      *G.Node       // gradient w.r.t. the input (nil for From == 0)
	tOut    *G.Node
	scratch []float32
	hooks   *hookSet // the training graph's (cut loose by Close)
	scale   *float32 // what the loss-scaling op reads: Scale, at each run
}

// NewStage compiles layers [from, to) of m for micro-batches of batch
// samples. last must be true exactly when to == m.NumLayers(). With
// NumLayers, LayerParamRange, StageRange, InputSize, FlatParams and Sample
// it is what a pipeline needs of a model: package pipeline takes a Model
// as it is (a pipeline.Model[*StageGraph]) and splits any Sequential
// model between its layers.
func (m *Model) NewStage(from, to, batch int, last bool) (s *StageGraph, err error) {
	err = flat.Build(func() (err error) {
		s, err = m.newStageGraph(from, to, batch, last)
		return err
	})
	return s, err
}

func (m *Model) newStageGraph(from, to, batch int, last bool) (*StageGraph, error) {
	n := m.NumLayers()
	if batch < 1 {
		return nil, fmt.Errorf("nn: stage micro-batch %d < 1", batch)
	}
	if from < 0 || to > n || from >= to {
		return nil, fmt.Errorf("nn: stage layers [%d, %d) not a non-empty range of [0, %d)", from, to, n)
	}
	if last != (to == n) {
		return nil, fmt.Errorf("nn: stage [%d, %d) of %d layers: last=%v", from, to, n, last)
	}
	if m.Store != nil {
		return nil, fmt.Errorf("nn: %s: pipeline stages of a store-backed (ZeRO-3) model are not supported", m.Name)
	}
	for _, bn := range m.BNs {
		for i := from; i < to; i++ {
			md := m.mods[m.layerMod(i)]
			if bn.Prefix == md.prefix || strings.HasPrefix(bn.Prefix, md.prefix+".") || md.prefix == "" {
				return nil, fmt.Errorf("nn: %s: batch norm (%s, in layer %d) is not supported in pipeline stages", m.Name, bn.Prefix, i)
			}
		}
	}
	shapes, err := m.shapesLocked(batch, 0, n)
	if err != nil {
		return nil, err
	}
	s := &StageGraph{M: m, From: from, To: to, Batch: batch, Last: last, Scale: 1,
		InShape: shapes[from].Clone(), OutShape: shapes[to].Clone()}
	_, np, _ := m.LayerParamRange(from)
	for i := from + 1; i < to; i++ {
		_, c, _ := m.LayerParamRange(i)
		np += c
	}
	if !last {
		if err := s.buildForward(); err != nil {
			return nil, err
		}
	}
	if from > 0 || np > 0 || last {
		if err := s.buildTrain(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// layers applies the stage's layers to x.
func (s *StageGraph) layers(b *Builder, x *G.Node) (*G.Node, error) {
	h := x
	for i := s.From; i < s.To; i++ {
		var err error
		if h, err = b.build(s.M.layerMod(i), h); err != nil {
			return nil, fmt.Errorf("nn: building %s layer %d: %w", s.M.Name, i, err)
		}
	}
	return h, nil
}

func (s *StageGraph) input(g *G.ExprGraph) (*G.Node, *tensor.Dense) {
	t := tensor.New(tensor.WithShape(s.InShape.Clone()...), tensor.WithBacking(make([]float32, s.InShape.TotalSize())))
	return G.NewTensor(g, tensor.Float32, len(s.InShape), G.WithShape(s.InShape.Clone()...), G.WithName("x"), G.WithValue(t)), t
}

func (s *StageGraph) buildForward() error {
	g := G.NewGraph()
	x, xt := s.input(g)
	b := s.M.builder(g, true, s.Batch, nil)
	b.ctx, b.stage = &s.ctx, true
	out, err := s.layers(b, x)
	if err != nil {
		return err
	}
	s.fx, s.out, s.fgates = xt, out, b.gates
	s.ffwd, err = newForward(g, out)
	return err
}

func (s *StageGraph) buildTrain() error {
	g := G.NewGraph()
	x, xt := s.input(g)
	s.hooks = &hookSet{m: s.M, onGrad: &s.hook}
	b := s.M.builder(g, true, s.Batch, s.hooks)
	b.ctx, b.stage = &s.ctx, true
	if s.From > 0 {
		b.needDX[x] = true
	}
	out, err := s.layers(b, x)
	if err != nil {
		return err
	}
	s.tOut = out
	var cost *G.Node
	if s.Last {
		rows := s.Batch * s.M.perLab
		s.yT = tensor.New(tensor.WithShape(rows), tensor.WithBacking(make([]float32, rows)))
		y := G.NewVector(g, tensor.Float32, G.WithShape(rows), G.WithName("y"), G.WithValue(s.yT))
		lg, err := s.M.lossInput(out)
		if err != nil {
			return err
		}
		if s.loss, err = G.ApplyOp(&xentOp{baseOp: baseOp{nextID(), "xent"}}, lg, y); err != nil {
			return err
		}
		// The op reads its own cell (set from Scale at each run), not
		// s.Scale: a pointer into s from the graph would keep s alive as
		// long as anything keeps the graph (gorgonia's constants do).
		s.scale = new(float32)
		if cost, err = G.ApplyOp(&scaleOp{baseOp{nextID(), "scale"}, s.scale}, s.loss); err != nil {
			return err
		}
	} else {
		sh := s.OutShape.Clone()
		s.gOut = tensor.New(tensor.WithShape(sh...), tensor.WithBacking(make([]float32, sh.TotalSize())))
		gn := G.NewTensor(g, tensor.Float32, len(sh), G.WithShape(sh...), G.WithName("gradOut"), G.WithValue(s.gOut))
		if cost, err = G.ApplyOp(&dotOp{baseOp{nextID(), "dot"}, len(sh)}, out, gn); err != nil {
			return err
		}
	}
	wrt := b.leaves
	if s.From > 0 {
		wrt = append(append([]*G.Node(nil), wrt...), x)
	}
	if len(wrt) > 0 {
		grads, err := G.Grad(cost, wrt...)
		if err != nil {
			return fmt.Errorf("nn: gradients of %s stage [%d, %d): %w", s.M.Name, s.From, s.To, err)
		}
		if s.From > 0 {
			s.dx = grads[len(grads)-1]
		}
	}
	s.tx = xt
	s.tvm = G.NewTapeMachine(g)
	return nil
}

func (s *StageGraph) loadX(dst *tensor.Dense, x []float32) error {
	d := dst.Data().([]float32)
	if len(x) != len(d) {
		return fmt.Errorf("nn: stage [%d, %d): got %d input floats, want %d (shape %v)", s.From, s.To, len(x), len(d), s.InShape)
	}
	copy(d, x)
	return nil
}

// InSize and OutSize are the floats in one micro-batch's input and output
// activation (OutSize is the logits' for the last stage).
func (s *StageGraph) InSize() int  { return s.InShape.TotalSize() }
func (s *StageGraph) OutSize() int { return s.OutShape.TotalSize() }

// Forward runs the stage's forward pass on x (InSize floats) and returns a
// copy of the output activation. Not for the last stage: use Step.
// Parameters and gradients are untouched.
func (s *StageGraph) Forward(x []float32) ([]float32, error) {
	if s.Last {
		return nil, fmt.Errorf("nn: Forward on the last stage; use Step")
	}
	if err := s.loadX(s.fx, x); err != nil {
		return nil, err
	}
	v, err := s.ffwd.run()
	releaseAll(s.fgates)
	if err != nil {
		return nil, err
	}
	out := floats(v)
	if len(out) != s.OutSize() {
		return nil, fmt.Errorf("nn: stage [%d, %d) gave %d output floats, want %d", s.From, s.To, len(out), s.OutSize())
	}
	return append([]float32(nil), out...), nil
}

func (s *StageGraph) run() error {
	if s.scale != nil {
		*s.scale = s.Scale
	}
	s.hook = s.OnGrad
	if s.hook == nil {
		s.hook = s.M.accumulate
	}
	defer s.tvm.Reset()
	return s.tvm.RunAll()
}

// gradX returns a copy of the gradient w.r.t. the input (nil for From == 0).
func (s *StageGraph) gradX() []float32 {
	if s.dx == nil {
		return nil
	}
	return append([]float32(nil), s.dx.Value().Data().([]float32)...)
}

// Backward recomputes the forward pass from x and back-propagates gradOut
// (OutSize floats, the gradient of the loss w.r.t. this stage's output):
// parameter gradients go to OnGrad (default: added into M.Flat.Grad), and the
// gradient w.r.t. x is returned (nil when From == 0). Not for the last
// stage: use Step.
func (s *StageGraph) Backward(x, gradOut []float32) ([]float32, error) {
	if s.Last {
		return nil, fmt.Errorf("nn: Backward on the last stage; use Step")
	}
	if len(gradOut) != s.OutSize() {
		return nil, fmt.Errorf("nn: stage [%d, %d): got %d output gradient floats, want %d", s.From, s.To, len(gradOut), s.OutSize())
	}
	if s.tvm == nil {
		return nil, nil // the first stage has no parameters: nothing to do
	}
	if err := s.loadX(s.tx, x); err != nil {
		return nil, err
	}
	copy(s.gOut.Data().([]float32), gradOut)
	if err := s.run(); err != nil {
		return nil, err
	}
	return s.gradX(), nil
}

// Step runs forward, loss and backward on the last stage: x is the input
// activation (InSize floats), y the Batch labels. It returns the mean loss
// over the micro-batch (not multiplied by Scale) and the gradient of
// Scale*loss w.r.t. x (nil when From == 0); parameter gradients (of
// Scale*loss) go to OnGrad.
func (s *StageGraph) Step(x []float32, y []int32) (float32, []float32, error) {
	if !s.Last {
		return 0, nil, fmt.Errorf("nn: Step on a stage that is not the last")
	}
	if err := s.loadX(s.tx, x); err != nil {
		return 0, nil, err
	}
	if err := s.M.checkLabels(s.yT.Data().([]float32), y); err != nil {
		return 0, nil, err
	}
	if err := s.run(); err != nil {
		return 0, nil, err
	}
	return s.loss.Value().Data().(float32), s.gradX(), nil
}

// SetScale sets Scale.
func (s *StageGraph) SetScale(v float32) { s.Scale = v }

// DropGrads makes the graph discard its parameter gradients (for timing).
func (s *StageGraph) DropGrads() { s.OnGrad = func(int, []float32) {} }

// Close releases the stage's machines.
func (s *StageGraph) Close() error {
	s.hooks.release()
	var err error
	s.ffwd = nil
	if s.tvm != nil {
		if e := s.tvm.Close(); err == nil {
			err = e
		}
	}
	return err
}

// ---- scale: y = s * x for a scalar x, with s read at run time ----

type scaleOp struct {
	baseOp
	s *float32
}

func (op *scaleOp) Arity() int { return 1 }
func (op *scaleOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *scaleOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}
func (op *scaleOp) ReturnsPtr() bool { return false }
func (op *scaleOp) Do(v ...G.Value) (G.Value, error) {
	x, err := scalarF32(v[0])
	if err != nil {
		return nil, err
	}
	return G.NewF32(x * *op.s), nil
}
func (op *scaleOp) DiffWRT(int) []bool { return []bool{true} }
func (op *scaleOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	n, err := G.ApplyOp(&scaleOp{baseOp{nextID(), "scale'"}, op.s}, grad)
	return G.Nodes{n}, err
}

func scalarF32(v G.Value) (float32, error) {
	switch s := v.(type) {
	case *G.F32:
		return float32(*s), nil
	case *tensor.Dense:
		if f, ok := s.Data().(float32); ok {
			return f, nil
		}
		if f, ok := s.Data().([]float32); ok && len(f) == 1 {
			return f[0], nil
		}
	}
	return 0, fmt.Errorf("nn: want a float32 scalar, got %T", v)
}

// ---- dot: sum(a * b) of two same-shape tensors; d a = b * dcost ----

type dotOp struct {
	baseOp
	dims int
}

func (op *dotOp) Arity() int { return 2 }
func (op *dotOp) Type() hm.Type {
	return hm.NewFnType(tt(op.dims), tt(op.dims), hm.TypeVariable('a'))
}
func (op *dotOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}
func (op *dotOp) ReturnsPtr() bool { return false }
func (op *dotOp) Do(v ...G.Value) (G.Value, error) {
	a, _, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	b, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	var sum float64
	for i, x := range a {
		sum += float64(x) * float64(b[i])
	}
	return G.NewF32(float32(sum)), nil
}
func (op *dotOp) DiffWRT(int) []bool { return []bool{true, false} }
func (op *dotOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&dotGradOp{baseOp{nextID(), "dot'"}, op.dims}, inputs[1], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{d, nil}, nil
}

// dotGradOp: b * dcost (a copy of b when dcost is 1).
type dotGradOp struct {
	baseOp
	dims int
}

func (op *dotGradOp) Arity() int { return 2 }
func (op *dotGradOp) Type() hm.Type {
	return hm.NewFnType(tt(op.dims), hm.TypeVariable('a'), tt(op.dims))
}
func (op *dotGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *dotGradOp) ReturnsPtr() bool { return false }
func (op *dotGradOp) Do(v ...G.Value) (G.Value, error) {
	b, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	g, err := scalarF32(v[1])
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(b))
	if g == 1 {
		copy(out, b)
	} else {
		for i, x := range b {
			out[i] = x * g
		}
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(out)), nil
}

// Sample returns n samples of valid input for m and their labels, drawn
// from seed: token ids in range where the network starts with an
// Embedding, else floats uniform in [-0.5, 0.5); labels uniform over the
// classes, LabelsPerSample of them per sample (none for n <= 0): what a
// pipeline balancing its stages by time profiles them on.
func (m *Model) Sample(n int, seed uint64) ([]float32, []int32) {
	n = max(n, 0)
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	ids := 0
	if e, ok := firstLayer(m.Net).(*Embedding); ok {
		ids = e.Num
	}
	x := make([]float32, n*m.InputSize())
	for i := range x {
		if ids > 0 {
			x[i] = float32(r.IntN(ids))
		} else {
			x[i] = r.Float32() - 0.5
		}
	}
	y := make([]int32, n*m.perLab)
	for i := range y {
		y[i] = int32(r.IntN(m.classes))
	}
	return x, y
}

// firstLayer is the layer l's input meets first (descending into
// Sequentials).
func firstLayer(l Layer) Layer {
	for {
		s, ok := l.(*Sequential)
		if !ok || len(s.Layers) == 0 {
			return l
		}
		l = s.Layers[0]
	}
}
