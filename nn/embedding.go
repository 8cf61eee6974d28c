package nn

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/internal/vecmath"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Embedding maps token ids to rows of "weight" [Num, Dim] (PyTorch's
// nn.Embedding), initialised N(0, Std^2) (Std 0: 1, PyTorch's default).
// Its input holds the ids as float32 (exact up to 2^24), shape (N) or
// (N, T); the output is (..., Dim). The ids get no gradient.
type Embedding struct {
	Num, Dim int
	Std      float64
}

func (l *Embedding) Params() []Param {
	return []Param{{Name: "weight", Shape: []int{l.Num, l.Dim}, Init: Normal(stdOr1(l.Std))}}
}

func stdOr1(s float64) float64 {
	if s == 0 {
		return 1
	}
	return s
}

// PositionEmbedding adds a learnt vector per position, "weight" [T, Dim]
// (GPT-2's wpe), to (N, T, Dim) input; initialised N(0, Std^2) (Std 0: 1).
type PositionEmbedding struct {
	T, Dim int
	Std    float64
}

func (l *PositionEmbedding) Params() []Param {
	return []Param{{Name: "weight", Shape: []int{l.T, l.Dim}, Init: Normal(stdOr1(l.Std))}}
}

func (l *PositionEmbedding) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	if s := x.Shape(); len(s) != 3 || s[1] != l.T || s[2] != l.Dim {
		return nil, fmt.Errorf("position embedding (%d, %d): input shape %v; want (N, %d, %d)", l.T, l.Dim, s, l.T, l.Dim)
	}
	return G.BroadcastAdd(x, b.Param(0), nil, []byte{0})
}

func (l *Embedding) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	b.NoBackwardFetch() // the weight's gradient is a scatter of dy
	return G.ApplyOp(&embedOp{baseOp: baseOp{nextID(), "embedding"}, num: l.Num, dim: l.Dim, dims: x.Dims()}, x, b.Param(0))
}

type embedOp struct {
	baseOp
	num, dim, dims int
	back           bool // the gradient op: (ids, dy) -> dweight
	idx            []int
	out            outBuf
}

func (op *embedOp) Arity() int { return 2 }
func (op *embedOp) Type() hm.Type {
	if op.back {
		return hm.NewFnType(tt(op.dims), tt(op.dims+1), tt(2))
	}
	return hm.NewFnType(tt(op.dims), tt(2), tt(op.dims+1))
}
func (op *embedOp) ReturnsPtr() bool { return false }
func (op *embedOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	if op.back {
		return tensor.Shape{op.num, op.dim}, nil
	}
	return append(ds[0].(tensor.Shape).Clone(), op.dim), nil
}

// ids converts the input to row indices, checking their range.
func (op *embedOp) ids(v G.Value) ([]int, tensor.Shape, error) {
	x, shape, err := f32(v)
	if err != nil {
		return nil, nil, err
	}
	if cap(op.idx) < len(x) {
		op.idx = make([]int, len(x))
	}
	out := op.idx[:len(x)]
	for i, f := range x {
		id := int(f)
		if float32(id) != f || id < 0 || id >= op.num || math.IsNaN(float64(f)) {
			return nil, nil, fmt.Errorf("nn: embedding of %d rows: input %d is %v, not a row index", op.num, i, f)
		}
		out[i] = id
	}
	return out, shape, nil
}

func (op *embedOp) Do(v ...G.Value) (G.Value, error) {
	ids, shape, err := op.ids(v[0])
	if err != nil {
		return nil, err
	}
	d := op.dim
	if op.back {
		dy, _, err := f32(v[1])
		if err != nil {
			return nil, err
		}
		if len(dy) != len(ids)*d {
			return nil, fmt.Errorf("nn: embedding gradient of %d values for %d ids of width %d: want %d, one row per id (the output's gradient, shape (ids..., %d))", len(dy), len(ids), d, len(ids)*d, d)
		}
		t, dw := op.out.get(tensor.Shape{op.num, d}, dy)
		clear(dw)
		for i, id := range ids { // each row's sum in token order
			vecmath.AddTo(dw[id*d:(id+1)*d], dy[i*d:(i+1)*d])
		}
		return t, nil
	}
	w, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	if len(w) != op.num*d {
		return nil, fmt.Errorf("nn: embedding weight of %d values, want %d x %d (parameters not fetched?)", len(w), op.num, d)
	}
	t, y := op.out.get(append(shape.Clone(), d), w)
	for i, id := range ids {
		copy(y[i*d:(i+1)*d], w[id*d:(id+1)*d])
	}
	return t, nil
}

func (op *embedOp) DiffWRT(int) []bool { return []bool{false, !op.back} }
func (op *embedOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dw, err := G.ApplyOp(&embedOp{baseOp: baseOp{nextID(), "embedding'"}, num: op.num, dim: op.dim, dims: op.dims, back: true}, inputs[0], grad)
	return G.Nodes{nil, dw}, err
}
