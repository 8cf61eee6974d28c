package nn

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// addOp is y = a + b for a and b of one shape, in one pass into a reused
// buffer (gorgonia's Add clones a, then adds b: an allocation and a copy
// per residual connection per step). Its gradient is dy for both.
type addOp struct {
	baseOp
	out outBuf
}

func newAdd() *addOp { return &addOp{baseOp: baseOp{nextID(), "add"}} }

func (op *addOp) Arity() int { return 2 }
func (op *addOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}
func (op *addOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *addOp) ReturnsPtr() bool { return false }
func (op *addOp) Do(v ...G.Value) (G.Value, error) {
	a, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	b, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	if len(a) != len(b) {
		return nil, fmt.Errorf("nn: add of %d and %d values", len(a), len(b))
	}
	t, y := op.out.get(shape, a, b)
	b = b[:len(a)]
	for i, x := range a {
		y[i] = x + b[i]
	}
	return t, nil
}
func (op *addOp) DiffWRT(int) []bool { return []bool{true, true} }
func (op *addOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	return G.Nodes{grad, grad}, nil
}
