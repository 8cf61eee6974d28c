package nn

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/internal/vecmath"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Custom gorgonia ops. Each instance gets a unique id in its hash: gorgonia
// merges nodes whose ops hash alike, which would fuse two hooks or two
// batch-norm layers.

var opIDs atomic.Int64

func nextID() int64 { return opIDs.Add(1) }

type baseOp struct {
	id   int64
	name string
}

func (op baseOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "gdist.%s#%d", op.name, op.id) }
func (op baseOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
func (op baseOp) String() string       { return op.name }
func (op baseOp) CallsExtern() bool    { return false }
func (op baseOp) OverwritesInput() int { return -1 }

func f32(v G.Value) ([]float32, tensor.Shape, error) {
	t, ok := v.(*tensor.Dense)
	if !ok {
		return nil, nil, fmt.Errorf("nn: want a *tensor.Dense, got %T", v)
	}
	d, ok := t.Data().([]float32)
	if !ok {
		return nil, nil, fmt.Errorf("nn: want float32 data, got %v", t.Dtype())
	}
	return d, t.Shape(), nil
}

// GradHook is called with a parameter's index and its gradient for the
// current backward pass, right where gorgonia produces it (last layer first).
// grad is valid only during the call.
type GradHook func(param int, grad []float32)

// ---- bias add along axis 1 of (N, C) or (N, C, H, W) ----

type biasOp struct {
	baseOp
	dims int
	out  outBuf
}

func tt(dims int) G.TensorType { return G.TensorType{Dims: dims, Of: hm.TypeVariable('a')} }

func (op *biasOp) Arity() int { return 2 }
func (op *biasOp) Type() hm.Type {
	return hm.NewFnType(tt(op.dims), tt(1), tt(op.dims))
}
func (op *biasOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *biasOp) ReturnsPtr() bool { return false }
func (op *biasOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	b, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	t, out := op.out.get(shape, x, b)
	c := shape[1]
	inner := len(x) / shape[0] / c
	if inner == 1 { // (N, C): add b to every row
		b = b[:c]
		for r := 0; r < len(x); r += c {
			vecmath.Add(out[r:r+c], x[r:r+c], b)
		}
		return t, nil
	}
	for i := 0; i < len(x); i += inner {
		bc := b[(i/inner)%c]
		o, xi := out[i:i+inner], x[i:i+inner]
		for j := range o {
			o[j] = xi[j] + bc
		}
	}
	return t, nil
}
func (op *biasOp) DiffWRT(int) []bool { return []bool{true, true} }
func (op *biasOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	db, err := G.ApplyOp(&channelSumOp{baseOp: baseOp{nextID(), "channelsum"}, c: inputs[1].Shape()[0], dims: op.dims}, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{grad, db}, nil
}

// channelSumOp sums (N, C[, H, W]) over every axis but 1.
type channelSumOp struct {
	baseOp
	c, dims int
	out     outBuf
}

func (op *channelSumOp) Arity() int { return 1 }
func (op *channelSumOp) Type() hm.Type {
	return hm.NewFnType(tt(op.dims), tt(1))
}
func (op *channelSumOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.c}, nil
}
func (op *channelSumOp) ReturnsPtr() bool { return false }
func (op *channelSumOp) Do(v ...G.Value) (G.Value, error) {
	g, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	t, out := op.out.get(tensor.Shape{op.c}, g)
	clear(out)
	inner := len(g) / shape[0] / op.c
	if inner == 1 { // (N, C): sum the rows, in order
		for r := 0; r < len(g); r += op.c {
			vecmath.AddTo(out, g[r:r+op.c])
		}
		return t, nil
	}
	for i, c := 0, 0; i < len(g); i += inner {
		out[c] += sum32(g[i : i+inner])
		if c++; c == op.c {
			c = 0
		}
	}
	return t, nil
}

// ---- softmax cross-entropy: mean over the batch, labels as float32 ----

type xentOp struct {
	baseOp
	// With a gradient (SymDiff called), forward keeps each logit's
	// exp(logit - row max) and each row's sum of them for xentGradOp,
	// which would otherwise compute the same exponentials twice more.
	grad bool
	e    []float64
	sum  []float64
}

func (op *xentOp) Arity() int { return 2 }
func (op *xentOp) Type() hm.Type {
	return hm.NewFnType(tt(2), tt(1), hm.TypeVariable('a'))
}
func (op *xentOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}
func (op *xentOp) ReturnsPtr() bool { return false }

// CrossEntropy returns the mean softmax cross-entropy of logits (B rows of
// K) against labels, accumulated in float64.
func CrossEntropy(logits []float32, labels []int32, k int) float64 {
	var total float64
	for i, lab := range labels {
		total += rowLoss(logits[i*k:(i+1)*k], int(lab))
	}
	return total / float64(len(labels))
}

func rowLoss(row []float32, lab int) float64 {
	m := float64(row[0])
	for _, v := range row {
		m = max(m, float64(v)) // math.Max's result (NaN, +0 over -0), inline
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s) - float64(row[lab])
}

func (op *xentOp) Do(v ...G.Value) (G.Value, error) {
	lg, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	lab, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	k := shape[1]
	var total float64
	if !op.grad {
		for i, l := range lab {
			total += rowLoss(lg[i*k:(i+1)*k], int(l))
		}
		return G.NewF32(float32(total / float64(len(lab)))), nil
	}
	if cap(op.e) < len(lg) {
		op.e = make([]float64, len(lg))
	}
	if cap(op.sum) < len(lab) {
		op.sum = make([]float64, len(lab))
	}
	op.e, op.sum = op.e[:len(lg)], op.sum[:len(lab)]
	for i, l := range lab {
		// rowLoss's operations in its order, the exponentials kept
		row, e := lg[i*k:(i+1)*k], op.e[i*k:(i+1)*k]
		m := float64(row[0])
		for _, v := range row {
			m = max(m, float64(v)) // math.Max's result (NaN, +0 over -0), inline
		}
		vecmath.ExpSubF64(e, row, m) // math.Exp's values, 4 at a time
		var s float64
		for _, x := range e {
			s += x
		}
		op.sum[i] = s
		total += m + math.Log(s) - float64(row[int(l)])
	}
	return G.NewF32(float32(total / float64(len(lab)))), nil
}
func (op *xentOp) DiffWRT(int) []bool { return []bool{true, false} }
func (op *xentOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	op.grad = true
	d, err := G.ApplyOp(&xentGradOp{baseOp: baseOp{nextID(), "xent'"}, fwd: op}, inputs[0], inputs[1], grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{d, nil}, nil
}

// xentGradOp: d logits = (softmax - onehot) / B * dloss, the softmax from
// the exponentials its forward op kept.
type xentGradOp struct {
	baseOp
	fwd *xentOp
	out outBuf
}

func (op *xentGradOp) Arity() int { return 3 }
func (op *xentGradOp) Type() hm.Type {
	return hm.NewFnType(tt(2), tt(1), hm.TypeVariable('a'), tt(2))
}
func (op *xentGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *xentGradOp) ReturnsPtr() bool { return false }
func (op *xentGradOp) Do(v ...G.Value) (G.Value, error) {
	lg, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	lab, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	var dl float32 = 1
	switch s := v[2].(type) {
	case *G.F32:
		dl = float32(*s)
	case *tensor.Dense:
		dl = s.Data().(float32)
	}
	b, k := shape[0], shape[1]
	ex, sums := op.fwd.e, op.fwd.sum
	if len(ex) != len(lg) || len(sums) != b {
		return nil, fmt.Errorf("nn: cross-entropy gradient of %d logits without its forward pass (%d kept)", len(lg), len(ex))
	}
	t, out := op.out.get(tensor.Shape{b, k}, lg, lab)
	scale := float64(dl) / float64(b)
	for i := 0; i < b; i++ {
		e, o, s := ex[i*k:(i+1)*k], out[i*k:(i+1)*k], sums[i]
		for j := range o {
			o[j] = float32(e[j] / s * scale)
		}
		if l := int(lab[i]); l >= 0 && l < k {
			o[l] = float32((e[l]/s - 1) * scale)
		}
	}
	return t, nil
}

// ---- ReLU: one pass each way (gorgonia's builds a mask and multiplies) ----

type reluOp struct {
	baseOp
	out outBuf
}

func (op *reluOp) Arity() int { return 1 }
func (op *reluOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *reluOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *reluOp) ReturnsPtr() bool { return false }
func (op *reluOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	t, out := op.out.get(shape, x)
	maskPositive(out, x, x)
	return t, nil
}

// positive is all ones if the float32 with bits b is > 0 (NaNs with the
// sign bit clear included), else 0: branch-free, since the sign of
// activations is a coin toss that a branch predictor loses.
func positive(b uint32) uint32 {
	v := int32(b)
	return uint32(^((v - 1) >> 31) & ^(v >> 31))
}

// maskPositive sets out[i] = v[i] where x[i] > 0, else +0 (bit masks,
// unrolled: about 2.5x the plain loop). out, v and x have equal lengths.
func maskPositive(out, v, x []float32) {
	if len(x) == 0 {
		return
	}
	out, v = out[:len(x)], v[:len(x)] // panics, never writes, if short
	os := unsafe.Slice((*uint32)(unsafe.Pointer(&out[0])), len(x))
	vs := unsafe.Slice((*uint32)(unsafe.Pointer(&v[0])), len(x))
	xs := unsafe.Slice((*uint32)(unsafe.Pointer(&x[0])), len(x))
	for len(xs) >= 8 {
		o, a, b := os[:8:8], vs[:8:8], xs[:8:8]
		o[0] = a[0] & positive(b[0])
		o[1] = a[1] & positive(b[1])
		o[2] = a[2] & positive(b[2])
		o[3] = a[3] & positive(b[3])
		o[4] = a[4] & positive(b[4])
		o[5] = a[5] & positive(b[5])
		o[6] = a[6] & positive(b[6])
		o[7] = a[7] & positive(b[7])
		os, vs, xs = os[8:], vs[8:], xs[8:]
	}
	for i, b := range xs {
		os[i] = vs[i] & positive(b)
	}
}

func (op *reluOp) DiffWRT(int) []bool { return []bool{true} }
func (op *reluOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&reluGradOp{baseOp: baseOp{nextID(), "relu'"}}, inputs[0], grad)
	return G.Nodes{d}, err
}

// reluGradOp: dx = dy where x > 0, else 0.
type reluGradOp struct {
	baseOp
	out outBuf
}

func (op *reluGradOp) Arity() int { return 2 }
func (op *reluGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}
func (op *reluGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *reluGradOp) ReturnsPtr() bool { return false }
func (op *reluGradOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	dy, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	dy = dy[:len(x)]
	t, out := op.out.get(shape, x, dy)
	maskPositive(out, dy, x)
	return t, nil
}

// outBuf is an op's output, reused from run to run. gorgonia's tape
// machine forgets every value at Reset and would have the op allocate (and
// the runtime zero and later collect) a fresh tensor each run; no value
// outlives the run that made it (everything kept is copied out: gradients
// into Grad by the hooks, activations and losses by their readers), so an
// op can hand out the same memory each time. get returns the buffer for an
// output of shape, making a new one when the size changes or when the
// current one shares memory with an input (a register gorgonia reused).
// In an evaluation graph (forward.go) the buffer is lent by the graph's
// pool instead, and goes back there once the last op that reads it has
// run.
type outBuf struct {
	t    *tensor.Dense
	pool *fwdPool
}

func (b *outBuf) get(shape tensor.Shape, inputs ...[]float32) (*tensor.Dense, []float32) {
	n := shape.TotalSize()
	if b.pool != nil {
		d := b.pool.get(n)
		return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(d)), d
	}
	if b.t != nil && b.t.Size() == n {
		d := b.t.Data().([]float32)
		if !overlapsAny(d, inputs) {
			if !b.t.Shape().Eq(shape) {
				if err := b.t.Reshape(shape.Clone()...); err != nil {
					b.t = nil
				}
			}
			if b.t != nil {
				return b.t, d
			}
		}
	}
	d := make([]float32, n)
	b.t = tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(d))
	return b.t, d
}

func overlapsAny(d []float32, inputs [][]float32) bool {
	if len(d) == 0 {
		return false
	}
	lo, hi := uintptr(unsafe.Pointer(&d[0])), uintptr(unsafe.Pointer(&d[len(d)-1]))
	for _, in := range inputs {
		if len(in) == 0 {
			continue
		}
		a, z := uintptr(unsafe.Pointer(&in[0])), uintptr(unsafe.Pointer(&in[len(in)-1]))
		if a <= hi && lo <= z {
			return true
		}
	}
	return false
}

// normGrad is the shared part of a normalisation's gradient ops (batch
// norm, layer norm): for inputs (x, gamma, beta) there is one op per
// input, computing dx (which 0), dgamma (1) or dbeta (2) from (that
// input, gamma, dy).
type normGrad struct {
	baseOp
	dims  int // x's
	which int
}

func (op *normGrad) Arity() int { return 3 }
func (op *normGrad) Type() hm.Type {
	in := op.dims
	if op.which > 0 {
		in = 1
	}
	return hm.NewFnType(tt(in), tt(1), tt(op.dims), tt(in))
}
func (op *normGrad) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *normGrad) ReturnsPtr() bool { return false }

// normGrads applies the gradient op mk(which) to (inputs[which], gamma,
// grad) for each of x, gamma and beta.
func normGrads(inputs G.Nodes, grad *G.Node, mk func(g normGrad) G.Op, name string, dims int) (G.Nodes, error) {
	res := make(G.Nodes, 3)
	for i := range res {
		n, err := G.ApplyOp(mk(normGrad{baseOp{nextID(), name}, dims, i}), inputs[i], inputs[1], grad)
		if err != nil {
			return nil, err
		}
		res[i] = n
	}
	return res, nil
}
