package main

import (
	"math"

	"github.com/gdist/gdist/nn"
	G "gorgonia.org/gorgonia"
)

// Gated is a user-defined layer, written with gorgonia's own ops:
//
//	y = (x W + b) * sigmoid(x V + c)
//
// It implements nn.Layer: Params declares the learnables (PyTorch names
// and shapes), Fwd builds the output from the nodes b.Param gives. That is
// all it takes to train it with DDP, ZeRO stages 1 to 3 and pipeline
// stages.
type Gated struct{ In, Out int }

func (l *Gated) Params() []nn.Param {
	w := func(name string) nn.Param {
		return nn.Param{Name: name, Shape: []int{l.In, l.Out}, Torch: []int{l.Out, l.In}, TransT: true, Init: nn.FanIn(l.In)}
	}
	b := func(name string) nn.Param { return nn.Param{Name: name, Shape: []int{l.Out}, Init: nn.FanIn(l.In)} }
	return []nn.Param{w("weight"), b("bias"), w("gate_weight"), b("gate_bias")}
}

func (l *Gated) Fwd(b *nn.Builder, x *G.Node) (*G.Node, error) {
	affine := func(w, c *G.Node) (*G.Node, error) {
		xw, err := G.Mul(x, w)
		if err != nil {
			return nil, err
		}
		return G.BroadcastAdd(xw, c, nil, []byte{0})
	}
	h, err := affine(b.Param(0), b.Param(1))
	if err != nil {
		return nil, err
	}
	g, err := affine(b.Param(2), b.Param(3))
	if err != nil {
		return nil, err
	}
	if g, err = G.Sigmoid(g); err != nil {
		return nil, err
	}
	return G.HadamardProd(h, g)
}

const features, hidden, classes = 20, 32, 3

// newModel is the network: nn's layers and the user's Gated layer.
func newModel(seed int64) (*nn.Model, error) {
	net := nn.Seq(
		&nn.Linear{In: features, Out: hidden}, nn.Tanh{},
		&Gated{In: hidden, Out: hidden},
		&nn.Linear{In: hidden, Out: classes},
	)
	return nn.New("gated-mlp", net, []int{features}, seed)
}

// sample fills x (features floats) and returns the label of sample i of
// a fixed synthetic task: three classes split by two fixed directions.
func sample(i int, x []float32) int32 {
	var a, c float64
	for j := range x {
		v := math.Sin(float64(i*features+j)*0.7311) + 0.3*math.Cos(float64(i+j*j)*1.37)
		x[j] = float32(v)
		a += v * math.Cos(float64(j))
		c += v * math.Sin(float64(3*j))
	}
	switch {
	case a > 0.5:
		return 0
	case c > 0:
		return 1
	}
	return 2
}

// batch returns samples [first, first+n).
func batch(first, n int) ([]float32, []int32) {
	x := make([]float32, n*features)
	y := make([]int32, n)
	for i := range y {
		y[i] = sample(first+i, x[i*features:(i+1)*features])
	}
	return x, y
}
