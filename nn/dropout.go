package nn

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Dropout zeroes each element with probability P in training graphs and
// scales the rest by 1/(1-P) (PyTorch's nn.Dropout); evaluation graphs
// pass x through. The mask is a hash of (Seed, the graph's run count, the
// element's place in the global batch), not a draw from a shared
// generator: ranks that run the same steps with the same Seed agree, and
// with Graph.SampleOffset set to a rank's first sample in the global
// batch, N ranks drop exactly what one process running the whole batch
// drops. Not supported in pipeline stages (a stage runs forward twice).
type Dropout struct {
	P    float64
	Seed uint64
}

func (l *Dropout) Params() []Param { return nil }
func (l *Dropout) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	if l.P < 0 || l.P >= 1 {
		return nil, fmt.Errorf("dropout probability %v not in [0, 1)", l.P)
	}
	if !b.train || l.P == 0 || b.shapesOnly {
		return x, nil
	}
	if b.stage {
		return nil, fmt.Errorf("dropout is not supported in pipeline stages")
	}
	return G.ApplyOp(&dropoutOp{baseOp: baseOp{nextID(), "dropout"}, p: l.P, seed: l.Seed, runs: b.runs, offset: b.offset}, x)
}

type dropoutOp struct {
	baseOp
	p      float64
	seed   uint64
	runs   *int64 // the graph's run count
	offset *int   // the graph's SampleOffset
	back   bool   // the gradient op (same mask)
	out    outBuf
}

func (op *dropoutOp) Arity() int { return 1 }
func (op *dropoutOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *dropoutOp) ReturnsPtr() bool { return false }
func (op *dropoutOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

// keep reports whether element j of sample n (in the global batch) stays.
func (op *dropoutOp) keep(n, per, j int) bool {
	r := &rng{s: op.seed ^ uint64(*op.runs)*0xd1b54a32d192ed03 ^ uint64(n*per+j)*0x9e3779b97f4a7c15}
	return r.float64() >= op.p
}

func (op *dropoutOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	t, y := op.out.get(shape, x)
	per := len(x) / shape[0]
	scale := float32(1 / (1 - op.p))
	for i, xv := range x {
		if op.keep(*op.offset+i/per, per, i%per) {
			y[i] = xv * scale
		} else {
			y[i] = 0
		}
	}
	return t, nil
}

func (op *dropoutOp) DiffWRT(int) []bool { return []bool{!op.back} }
func (op *dropoutOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&dropoutOp{baseOp: baseOp{nextID(), "dropout'"}, p: op.p, seed: op.seed, runs: op.runs, offset: op.offset, back: true}, grad)
	return G.Nodes{d}, err
}
