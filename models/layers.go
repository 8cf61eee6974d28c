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
}

type linear struct{ torch, in, out int }

func (l linear) params() []Param {
	return []Param{
		{Name: fmt.Sprintf("%d.weight", l.torch), Shape: []int{l.in, l.out}, Torch: []int{l.out, l.in}, TransT: true, fanIn: l.in},
		{Name: fmt.Sprintf("%d.bias", l.torch), Shape: []int{l.out}, Torch: []int{l.out}, fanIn: l.in},
	}
}

func (l linear) apply(b *builder, x *G.Node, ps []*G.Node) (*G.Node, error) {
	y, err := G.Mul(x, ps[0])
	if err != nil {
		return nil, err
	}
	return G.ApplyOp(&biasOp{baseOp{nextID(), "bias"}, y.Dims()}, y, ps[1])
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
	y, err := G.Conv2d(x, ps[0], tensor.Shape{l.k, l.k}, []int{l.pad, l.pad}, []int{1, 1}, []int{1, 1})
	if err != nil {
		return nil, err
	}
	return G.ApplyOp(&biasOp{baseOp{nextID(), "bias"}, y.Dims()}, y, ps[1])
}

type batchNorm struct{ torch, c int }

func (l batchNorm) params() []Param {
	return []Param{
		{Name: fmt.Sprintf("%d.weight", l.torch), Shape: []int{l.c}, Torch: []int{l.c}, ones: true},
		{Name: fmt.Sprintf("%d.bias", l.torch), Shape: []int{l.c}, Torch: []int{l.c}, zeros: true},
	}
}

func (l batchNorm) apply(b *builder, x *G.Node, ps []*G.Node) (*G.Node, error) {
	op := &bnOp{baseOp: baseOp{nextID(), "batchnorm"}, dims: x.Dims(), l: b.m.BNs[b.bn], train: b.train, st: &bnState{}}
	b.bn++
	b.bnOps = append(b.bnOps, op)
	return G.ApplyOp(op, x, ps[0], ps[1])
}

type relu struct{ torch int }

func (relu) params() []Param { return nil }
func (relu) apply(b *builder, x *G.Node, _ []*G.Node) (*G.Node, error) {
	return G.Rectify(x)
}

type maxPool struct{ torch int }

func (maxPool) params() []Param { return nil }
func (maxPool) apply(b *builder, x *G.Node, _ []*G.Node) (*G.Node, error) {
	return G.MaxPool2D(x, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2})
}

type flatten struct{ torch int }

func (flatten) params() []Param { return nil }
func (flatten) apply(b *builder, x *G.Node, _ []*G.Node) (*G.Node, error) {
	s := x.Shape()
	return G.Reshape(x, tensor.Shape{s[0], s.TotalSize() / s[0]})
}
