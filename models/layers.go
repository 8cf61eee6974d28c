package models

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

type layer interface {
	params() []Param
	apply(b *builder, x *G.Node, ps []*G.Node) (*G.Node, error)
}

type builder struct {
	m     *Model
	train bool
	batch int
	bn    int // next batch-norm layer
	bnOps []*bnOp
	pi    int // index of the layer's first parameter (store mode)
	// atInput: the current layer is fed by the network's input (possibly
	// flattened), so it needs no input gradient.
	atInput bool
}

// sharded returns the shared part of a store-backed op for a layer with np
// parameters, or nil when the model holds its parameters.
func (b *builder) sharded(name string, np int, x *G.Node) *shardedOp {
	if b.m.Store == nil {
		return nil
	}
	idx := make([]int, np)
	for i := range idx {
		idx[i] = b.pi + i
	}
	return &shardedOp{baseOp: baseOp{nextID(), name}, store: b.m.Store, params: idx, noDX: b.atInput}
}

type linear struct{ torch, in, out int }

func (l linear) params() []Param {
	return []Param{
		{Name: fmt.Sprintf("%d.weight", l.torch), Shape: []int{l.in, l.out}, Torch: []int{l.out, l.in}, TransT: true, fanIn: l.in},
		{Name: fmt.Sprintf("%d.bias", l.torch), Shape: []int{l.out}, Torch: []int{l.out}, fanIn: l.in},
	}
}

func (l linear) apply(b *builder, x *G.Node, ps []*G.Node) (*G.Node, error) {
	if sh := b.sharded("linear", 2, x); sh != nil {
		return G.ApplyOp(&shardLinearOp{*sh, l.in, l.out}, x)
	}
	y, err := G.Mul(x, ps[0])
	if err != nil {
		return nil, err
	}
	return G.ApplyOp(&biasOp{baseOp: baseOp{nextID(), "bias"}, dims: y.Dims()}, y, ps[1])
}

type conv struct{ torch, in, out, k, pad int }

func (l conv) params() []Param {
	w := []int{l.out, l.in, l.k, l.k}
	return []Param{
		{Name: fmt.Sprintf("%d.weight", l.torch), Shape: w, Torch: w, fanIn: l.in * l.k * l.k},
		{Name: fmt.Sprintf("%d.bias", l.torch), Shape: []int{l.out}, Torch: []int{l.out}, fanIn: l.in * l.k * l.k},
	}
}

func (l conv) apply(b *builder, x *G.Node, ps []*G.Node) (*G.Node, error) {
	if sh := b.sharded("conv", 2, x); sh != nil {
		return G.ApplyOp(&shardConvOp{*sh, l.k, l.pad, l.out, &convScratch{}}, x)
	}
	op := newConv2d(l.k, l.pad)
	// The network's input (a leaf, no op) needs no gradient: skip dx.
	op.noDX = b.atInput
	y, err := G.ApplyOp(op, x, ps[0])
	if err != nil {
		return nil, err
	}
	return G.ApplyOp(&biasOp{baseOp: baseOp{nextID(), "bias"}, dims: y.Dims()}, y, ps[1])
}

type batchNorm struct{ torch, c int }

func (l batchNorm) params() []Param {
	return []Param{
		{Name: fmt.Sprintf("%d.weight", l.torch), Shape: []int{l.c}, Torch: []int{l.c}, ones: true},
		{Name: fmt.Sprintf("%d.bias", l.torch), Shape: []int{l.c}, Torch: []int{l.c}, zeros: true},
	}
}

func (l batchNorm) apply(b *builder, x *G.Node, ps []*G.Node) (*G.Node, error) {
	if sh := b.sharded("batchnorm", 2, x); sh != nil {
		op := &shardBNOp{shardedOp: *sh, dims: x.Dims(), l: b.m.BNs[b.bn], train: b.train, st: &BNState{}}
		b.bn++
		return G.ApplyOp(op, x)
	}
	op := &bnOp{baseOp: baseOp{nextID(), "batchnorm"}, dims: x.Dims(), l: b.m.BNs[b.bn], train: b.train, st: &BNState{}}
	b.bn++
	b.bnOps = append(b.bnOps, op)
	return G.ApplyOp(op, x, ps[0], ps[1])
}

type relu struct{ torch int }

func (relu) params() []Param { return nil }
func (relu) apply(b *builder, x *G.Node, _ []*G.Node) (*G.Node, error) {
	return G.ApplyOp(&reluOp{baseOp: baseOp{nextID(), "relu"}}, x)
}

type maxPool struct{ torch int }

func (maxPool) params() []Param { return nil }
func (maxPool) apply(b *builder, x *G.Node, _ []*G.Node) (*G.Node, error) {
	return G.ApplyOp(newMaxPool2x2(), x)
}

type flatten struct{ torch int }

func (flatten) params() []Param { return nil }
func (flatten) apply(b *builder, x *G.Node, _ []*G.Node) (*G.Node, error) {
	s := x.Shape()
	return G.Reshape(x, tensor.Shape{s[0], s.TotalSize() / s[0]})
}
