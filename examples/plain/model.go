package main

import (
	"fmt"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mlp is a plain gorgonia model, written without any gdist type: a 20-32-3
// network (tanh, softmax), cross-entropy loss, a tape machine and
// gorgonia's own SGD solver.
type mlp struct {
	g          *G.ExprGraph
	x, y       *G.Node // inputs: batch x 20 features, batch x 3 one-hot labels
	w0, b0     *G.Node
	w1, b1     *G.Node
	loss       *G.Node
	learnables G.Nodes
	vm         G.VM
}

const features, hidden, classes = 20, 32, 3

// newMLP builds the graph for batch samples, initialised from seed (the
// same on every rank; the DDP broadcast makes sure anyway). tap, when not
// nil, is applied to every learnable in the forward code: ddp.Tap or
// zero.Tap, for overlap. wrap, when not nil, is called with the learnables
// before the tape machine is made: ddp.Wrap or zero.Wrap.
func newMLP(batch int, seed uint64, tap func(*G.Node) (*G.Node, error)) (*mlp, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	init := func(fanIn int) G.InitWFn {
		return func(dt tensor.Dtype, s ...int) interface{} {
			v := make([]float32, tensor.Shape(s).TotalSize())
			for i := range v {
				v[i] = float32((2*rng.Float64() - 1) / float64(fanIn))
			}
			return v
		}
	}
	m := &mlp{g: G.NewGraph()}
	m.x = G.NewMatrix(m.g, tensor.Float32, G.WithShape(batch, features), G.WithName("x"), G.WithInit(G.Zeroes()))
	m.y = G.NewMatrix(m.g, tensor.Float32, G.WithShape(batch, classes), G.WithName("y"), G.WithInit(G.Zeroes()))
	m.w0 = G.NewMatrix(m.g, tensor.Float32, G.WithShape(features, hidden), G.WithName("w0"), G.WithInit(init(features)))
	m.b0 = G.NewVector(m.g, tensor.Float32, G.WithShape(hidden), G.WithName("b0"), G.WithInit(init(features)))
	m.w1 = G.NewMatrix(m.g, tensor.Float32, G.WithShape(hidden, classes), G.WithName("w1"), G.WithInit(init(hidden)))
	m.b1 = G.NewVector(m.g, tensor.Float32, G.WithShape(classes), G.WithName("b1"), G.WithInit(init(hidden)))
	m.learnables = G.Nodes{m.w0, m.b0, m.w1, m.b1}

	use := func(n *G.Node) *G.Node { return n }
	var tapErr error
	if tap != nil {
		use = func(n *G.Node) *G.Node {
			t, err := tap(n)
			if err != nil && tapErr == nil {
				tapErr = err
			}
			return t
		}
	}
	w0, b0, w1, b1 := use(m.w0), use(m.b0), use(m.w1), use(m.b1)
	if tapErr != nil {
		return nil, tapErr
	}
	h := G.Must(G.Tanh(G.Must(G.BroadcastAdd(G.Must(G.Mul(m.x, w0)), b0, nil, []byte{0}))))
	logits := G.Must(G.BroadcastAdd(G.Must(G.Mul(h, w1)), b1, nil, []byte{0}))
	p := G.Must(G.SoftMax(logits))
	// Mean cross-entropy: -sum(y * log p) / batch.
	ce := G.Must(G.Sum(G.Must(G.HadamardProd(m.y, G.Must(G.Log(p))))))
	m.loss = G.Must(G.Div(G.Must(G.Neg(ce)), G.NewConstant(float32(batch))))
	if _, err := G.Grad(m.loss, m.learnables...); err != nil {
		return nil, fmt.Errorf("differentiating: %w", err)
	}
	return m, nil
}

// machine makes the tape machine. BindDualValues makes gorgonia add each
// backward pass's gradients into the learnables' dual values, which is
// where its solvers read them (and where gdist's flat gradient buffer is).
func (m *mlp) machine() { m.vm = G.NewTapeMachine(m.g, G.BindDualValues(m.learnables...)) }

// load puts samples [lo, lo+batch) of a synthetic data set into x and y:
// the same samples on every machine, a fixed function of their index.
func (m *mlp) load(lo int) {
	xs := m.x.Value().Data().([]float32)
	ys := m.y.Value().Data().([]float32)
	clear(ys)
	batch := len(ys) / classes
	for i := 0; i < batch; i++ {
		r := rand.New(rand.NewPCG(uint64(lo+i), 7))
		var s [classes]float32
		for j := 0; j < features; j++ {
			v := float32(r.NormFloat64())
			xs[i*features+j] = v
			s[j%classes] += v * float32(j%5-2)
		}
		best := 0
		for c := 1; c < classes; c++ {
			if s[c] > s[best] {
				best = c
			}
		}
		ys[i*classes+best] = 1
	}
}

// params copies every learnable's values, in order.
func (m *mlp) params() []float32 {
	var out []float32
	for _, n := range m.learnables {
		out = append(out, n.Value().Data().([]float32)...)
	}
	return out
}
