package nn

import (
	"fmt"
	"strconv"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Sequential applies its layers in order (PyTorch's nn.Sequential: the
// children are named "0", "1", ...). A pipeline splits a Sequential model
// between its layers.
type Sequential struct{ Layers []Layer }

// Seq makes a Sequential.
func Seq(layers ...Layer) *Sequential { return &Sequential{Layers: layers} }

func (s *Sequential) Params() []Param { return nil }
func (s *Sequential) Children() []Child {
	out := make([]Child, len(s.Layers))
	for i, l := range s.Layers {
		out[i] = Child{strconv.Itoa(i), l}
	}
	return out
}
func (s *Sequential) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	var err error
	for i := 0; i < len(s.Layers); i++ {
		if _, ok := s.Layers[i].(*Conv2d); ok && i+2 < len(s.Layers) && isReLU(s.Layers[i+1]) && isMaxPool(s.Layers[i+2]) {
			// Conv2d, ReLU, MaxPool2d: one op (see convPoolOp).
			b.poolNext = true
			x, err = b.Child(i, x)
			b.poolNext = false
			if err != nil {
				return nil, err
			}
			i += 2
			continue
		}
		if i+1 < len(s.Layers) && isReLU(s.Layers[i]) && isMaxPool(s.Layers[i+1]) && x.Dims() == 4 {
			// ReLU then MaxPool2d: one op, pooling first (the same
			// values and gradients, and the ReLU on a quarter of them).
			if x, err = G.ApplyOp(newPoolReLU(), x); err != nil {
				return nil, fmt.Errorf("layers %d and %d (ReLU, MaxPool2d): %w", i, i+1, err)
			}
			i++
			continue
		}
		if x, err = b.Child(i, x); err != nil {
			return nil, err
		}
	}
	return x, nil
}

func isReLU(l Layer) bool {
	switch l.(type) {
	case ReLU, *ReLU:
		return true
	}
	return false
}

func isMaxPool(l Layer) bool {
	switch l.(type) {
	case MaxPool2d, *MaxPool2d:
		return true
	}
	return false
}

// Residual is x + Fn(x) (its child is named "fn").
type Residual struct{ Fn Layer }

func (r *Residual) Params() []Param   { return nil }
func (r *Residual) Children() []Child { return []Child{{"fn", r.Fn}} }
func (r *Residual) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	h, err := b.Child(0, x)
	if err != nil {
		return nil, err
	}
	if !h.Shape().Eq(x.Shape()) {
		return nil, fmt.Errorf("residual: fn maps %v to %v; the shapes must agree", x.Shape(), h.Shape())
	}
	return G.ApplyOp(newAdd(), x, h)
}

// Linear is y = x W^T + b over the last axis (PyTorch's nn.Linear; the
// weight is stored [in, out] here and transposed in checkpoints). Input
// (N, in) or (N, T, in).
type Linear struct{ In, Out int }

func (l *Linear) Params() []Param {
	return []Param{
		{Name: "weight", Shape: []int{l.In, l.Out}, Torch: []int{l.Out, l.In}, TransT: true, Init: FanIn(l.In)},
		{Name: "bias", Shape: []int{l.Out}, Init: FanIn(l.In)},
	}
}

func (l *Linear) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	return affine(b, x, b.Param(0), b.Param(1), l.In, l.Out)
}

// affine is x w + bias over the last axis of x (..., in), w [in, out]. At
// the network's input it skips the input's gradient (and tells ZeRO-3 not
// to gather w again for backward).
func affine(b *Builder, x, w, bias *G.Node, in, out int) (*G.Node, error) {
	s := x.Shape()
	if len(s) < 2 || s[len(s)-1] != in {
		return nil, fmt.Errorf("linear %d->%d: input shape %v; want (..., %d)", in, out, s, in)
	}
	h := x
	if len(s) > 2 {
		var err error
		if h, err = G.Reshape(x, tensor.Shape{s.TotalSize() / in, in}); err != nil {
			return nil, err
		}
	}
	noDX := !b.NeedsGrad(h)
	if noDX {
		b.NoBackwardFetch()
	}
	y, err := G.ApplyOp(newMatMul(noDX), h, w)
	if err != nil {
		return nil, err
	}
	if y, err = G.ApplyOp(&biasOp{baseOp: baseOp{nextID(), "bias"}, dims: 2}, y, bias); err != nil {
		return nil, err
	}
	if len(s) > 2 {
		o := s.Clone()
		o[len(o)-1] = out
		return G.Reshape(y, o)
	}
	return y, nil
}

// Conv2d is a 2-d convolution, stride 1, square kernel K, zero padding
// Pad, NCHW (PyTorch's nn.Conv2d(in, out, k, padding=pad)).
type Conv2d struct{ In, Out, K, Pad int }

func (l *Conv2d) Params() []Param {
	fan := l.In * l.K * l.K
	return []Param{
		{Name: "weight", Shape: []int{l.Out, l.In, l.K, l.K}, Init: FanIn(fan)},
		{Name: "bias", Shape: []int{l.Out}, Init: FanIn(fan)},
	}
}

func (l *Conv2d) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	pool := b.poolNext
	b.poolNext = false
	// The network's input needs no gradient: skip dx.
	noDX := !b.NeedsGrad(x)
	if noDX {
		b.NoBackwardFetch()
	}
	if pool {
		return G.ApplyOp(newConvPool(l.K, l.Pad, noDX), x, b.Param(0), b.Param(1))
	}
	op := newConv2d(l.K, l.Pad)
	op.noDX = noDX
	op.bias = true
	return G.ApplyOp(op, x, b.Param(0), b.Param(1))
}

// BatchNorm normalises over every axis but 1 of (N, C) (BatchNorm1d) or
// (N, C, H, W) input (BatchNorm2d), with a learnt scale ("weight") and
// shift ("bias") and running statistics ("running_mean", "running_var",
// "num_batches_tracked") as in PyTorch. With its state's Sync set (see
// package syncbn), the batch statistics span ranks (SyncBatchNorm).
type BatchNorm struct{ state *BNLayer }

// BatchNorm1d normalises (N, C) input.
func BatchNorm1d(c int) *BatchNorm { return &BatchNorm{newBNLayer("", c)} }

// BatchNorm2d normalises (N, C, H, W) input.
func BatchNorm2d(c int) *BatchNorm { return &BatchNorm{newBNLayer("", c)} }

// State is the layer's running statistics and sync hook.
func (l *BatchNorm) State() *BNLayer { return l.state }

func (l *BatchNorm) Params() []Param {
	c := l.state.C
	return []Param{{Name: "weight", Shape: []int{c}, Init: Fill(1)}, {Name: "bias", Shape: []int{c}, Init: Fill(0)}}
}

func (l *BatchNorm) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	if s := x.Shape(); len(s) < 2 || s[1] != l.state.C {
		return nil, fmt.Errorf("batch norm of %d channels: input shape %v", l.state.C, s)
	}
	op := &bnOp{baseOp: baseOp{nextID(), "batchnorm"}, dims: x.Dims(), l: l.state, train: b.Train(), st: &BNState{}, ctx: b.ctx}
	return G.ApplyOp(op, x, b.Param(0), b.Param(1))
}

// ReLU is max(x, 0).
type ReLU struct{}

func (ReLU) Params() []Param { return nil }
func (ReLU) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	return G.ApplyOp(&reluOp{baseOp: baseOp{nextID(), "relu"}}, x)
}

// Tanh is tanh(x).
type Tanh struct{}

func (Tanh) Params() []Param                            { return nil }
func (Tanh) Fwd(b *Builder, x *G.Node) (*G.Node, error) { return G.Tanh(x) }

// MaxPool2d is 2x2 max pooling with stride 2 over (N, C, H, W) (PyTorch's
// nn.MaxPool2d(2)).
type MaxPool2d struct{}

func (MaxPool2d) Params() []Param { return nil }
func (MaxPool2d) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	return G.ApplyOp(newMaxPool2x2(), x)
}

// Flatten reshapes (N, ...) to (N, rest).
type Flatten struct{}

func (Flatten) Params() []Param { return nil }
func (Flatten) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	s := x.Shape()
	return G.Reshape(x, tensor.Shape{s[0], s.TotalSize() / s[0]})
}
