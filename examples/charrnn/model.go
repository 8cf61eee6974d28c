package main

import (
	"fmt"
	"math"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// corpus is the text the model learns, character by character.
const corpus = `the quick brown fox jumps over the lazy dog.
a gated recurrent unit reads one character at a time,
and its hidden state carries what it has read so far.
every sequence gets a graph of its own length,
built anew for each step, over the same parameters.
`

// hidden is the size of the GRU's hidden state.
const hidden = 16

// vocab numbers the corpus's characters in sorted order: the same
// numbering on every rank. (Numbering them by Go map order would give
// every process its own numbering, and DDP would average rows that mean
// different characters.)
func vocab() (chars []rune, index map[rune]int) {
	index = map[rune]int{}
	for _, c := range corpus {
		if _, ok := index[c]; !ok {
			index[c] = 0
			chars = append(chars, c)
		}
	}
	slices.Sort(chars)
	for i, c := range chars {
		index[c] = i
	}
	return chars, index
}

// gru is a character-level GRU language model. Its parameters are
// tensors the model keeps across graphs (as gorgonia's own charRNN
// example keeps its LSTM's): every step builds a new graph over them,
// unrolled to that step's sequence length.
type gru struct {
	dt     tensor.Dtype
	v      int // vocabulary size
	index  map[rune]int
	params []*tensor.Dense // in names' order
}

// names are the parameters, PyTorch's GRU names where they exist:
// input weights W, recurrent weights U and biases b of the update (z),
// reset (r) and candidate (n) gates, and the output layer.
var names = []string{"w_z", "w_r", "w_n", "u_z", "u_r", "u_n", "b_z", "b_r", "b_n", "w_out", "b_out"}

func (m *gru) shape(i int) []int {
	switch {
	case i < 3:
		return []int{m.v, hidden}
	case i < 6:
		return []int{hidden, hidden}
	case i < 9:
		return []int{hidden}
	case i == 9:
		return []int{hidden, m.v}
	}
	return []int{m.v}
}

// newGRU makes the model with parameters of type dt drawn from seed.
func newGRU(dt tensor.Dtype, seed int) *gru {
	_, index := vocab()
	m := &gru{dt: dt, v: len(index), index: index}
	for i := range names {
		s := m.shape(i)
		n := 1
		for _, d := range s {
			n *= d
		}
		scale := 1 / math.Sqrt(float64(s[0]))
		v := make([]float64, n)
		for j := range v {
			if len(s) == 1 {
				continue // biases start at zero
			}
			v[j] = scale * math.Sin(float64(seed*7919+i*1009+j)*0.61)
		}
		m.params = append(m.params, m.tensor(s, v))
	}
	return m
}

// tensor is a tensor of the model's type.
func (m *gru) tensor(shape []int, v []float64) *tensor.Dense {
	if m.dt == tensor.Float64 {
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
}

// seqLen is the length of step's sequences (every step another).
func seqLen(step int) int { return 3 + step%5 }

// sample is the start in the corpus of global sample j of step.
func sample(step, j, l int) int {
	return (step*97 + j*31) % (len([]rune(corpus)) - l - 1)
}

// step is one step's graph: its nodes over the parameters (in names'
// order) and its loss.
type step struct {
	g     *G.ExprGraph
	nodes []*G.Node
	loss  *G.Node
}

// oneHot is a batch x v matrix with a 1 at each row's character.
func (m *gru) oneHot(cs []rune) *tensor.Dense {
	v := make([]float64, len(cs)*m.v)
	for i, c := range cs {
		v[i*m.v+m.index[c]] = 1
	}
	return m.tensor([]int{len(cs), m.v}, v)
}

// build unrolls the GRU over samples [lo, lo+b) of step (global sample
// numbers): a new graph, over the model's own tensors. The loss is the
// mean cross-entropy of the next character.
func (m *gru) build(stepNo, lo, b int) (*step, error) {
	l := seqLen(stepNo)
	text := []rune(corpus)
	g := G.NewGraph()
	s := &step{g: g}
	for i, p := range m.params {
		s.nodes = append(s.nodes, G.NewTensor(g, m.dt, len(p.Shape()), G.WithShape(p.Shape()...), G.WithName(names[i]), G.WithValue(p)))
	}
	wz, wr, wn, uz, ur, un, bz, br, bn, wy, by := s.nodes[0], s.nodes[1], s.nodes[2], s.nodes[3], s.nodes[4], s.nodes[5], s.nodes[6], s.nodes[7], s.nodes[8], s.nodes[9], s.nodes[10]
	h := G.NewMatrix(g, m.dt, G.WithShape(b, hidden), G.WithName("h0"), G.WithValue(m.tensor([]int{b, hidden}, make([]float64, b*hidden))))
	gate := func(x, w, u, h, bias *G.Node) (*G.Node, error) {
		xw, err := G.Mul(x, w)
		if err != nil {
			return nil, err
		}
		hu, err := G.Mul(h, u)
		if err != nil {
			return nil, err
		}
		sum, err := G.Add(xw, hu)
		if err != nil {
			return nil, err
		}
		return G.BroadcastAdd(sum, bias, nil, []byte{0})
	}
	var total *G.Node
	for t := 0; t < l; t++ {
		in, next := make([]rune, b), make([]rune, b)
		for i := range in {
			start := sample(stepNo, lo+i, l)
			in[i], next[i] = text[start+t], text[start+t+1]
		}
		x := G.NewMatrix(g, m.dt, G.WithShape(b, m.v), G.WithName(fmt.Sprintf("x%d", t)), G.WithValue(m.oneHot(in)))
		y := G.NewMatrix(g, m.dt, G.WithShape(b, m.v), G.WithName(fmt.Sprintf("y%d", t)), G.WithValue(m.oneHot(next)))
		zl, err := gate(x, wz, uz, h, bz)
		if err != nil {
			return nil, err
		}
		rl, err := gate(x, wr, ur, h, br)
		if err != nil {
			return nil, err
		}
		z, r := G.Must(G.Sigmoid(zl)), G.Must(G.Sigmoid(rl))
		nl, err := gate(x, wn, un, G.Must(G.HadamardProd(r, h)), bn)
		if err != nil {
			return nil, err
		}
		n := G.Must(G.Tanh(nl))
		// h' = (1 - z) n + z h = n + z (h - n)
		h = G.Must(G.Add(n, G.Must(G.HadamardProd(z, G.Must(G.Sub(h, n))))))
		logits, err := G.BroadcastAdd(G.Must(G.Mul(h, wy)), by, nil, []byte{0})
		if err != nil {
			return nil, err
		}
		logp := G.Must(G.Log(G.Must(G.SoftMax(logits))))
		lt := G.Must(G.Sum(G.Must(G.HadamardProd(y, logp))))
		if total == nil {
			total = lt
		} else {
			total = G.Must(G.Add(total, lt))
		}
	}
	scale := G.NewConstant(m.scalar(-1 / float64(b*l)))
	var err error
	s.loss, err = G.Mul(total, scale)
	return s, err
}

func (m *gru) scalar(v float64) any {
	if m.dt == tensor.Float64 {
		return v
	}
	return float32(v)
}

// flat is every parameter's values, in names' order, as float64.
func (m *gru) flat() []float64 {
	var out []float64
	for _, p := range m.params {
		switch v := p.Data().(type) {
		case []float64:
			out = append(out, v...)
		case []float32:
			for _, x := range v {
				out = append(out, float64(x))
			}
		}
	}
	return out
}

// lossValue is a scalar node's value as float64.
func lossValue(n *G.Node) float64 {
	switch v := n.Value().Data().(type) {
	case float64:
		return v
	case float32:
		return float64(v)
	}
	return math.NaN()
}
