package models

import (
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BNLayer is one batch-norm layer's state: its running statistics (shared
// by the training and evaluation graphs, saved in checkpoints under
// PyTorch's names) and, for SyncBatchNorm, the hook that all-reduces
// per-channel statistics across ranks.
type BNLayer struct {
	Prefix      string // PyTorch module prefix, e.g. "1"
	C           int
	Momentum    float64 // PyTorch convention: new = (1-m) old + m batch
	Eps         float64
	RunningMean []float32
	RunningVar  []float32
	NumBatches  int64
	// Sync, when set, makes the statistics span ranks (SyncBatchNorm). It
	// is called in the forward pass (stage "forward") with this rank's
	// per-channel [sum x (C), M2 (C), count (1)], M2 being the sum of
	// squared deviations from this rank's own mean, and must replace them
	// with the values for the union of all ranks' batches (combining M2
	// with Chan's formula, never through sum x^2). In the backward pass
	// (stage "backward") it gets [sum dy (C), sum dy*xhat (C)] and must
	// replace them with their sums over all ranks. nil means plain
	// (per-rank) batch norm.
	Sync func(stage string, buf []float64) error
}

func newBNLayer(prefix string, c int) *BNLayer {
	l := &BNLayer{Prefix: prefix, C: c, Momentum: 0.1, Eps: 1e-5,
		RunningMean: make([]float32, c), RunningVar: make([]float32, c)}
	for i := range l.RunningVar {
		l.RunningVar[i] = 1
	}
	return l
}

// bnState is what a training forward pass leaves for its backward pass.
type bnState struct {
	xhat   []float32
	invstd []float64
	m      float64 // elements per channel, over all ranks
	sums   []float64
	valid  bool
}

type bnOp struct {
	baseOp
	dims  int
	l     *BNLayer
	train bool
	st    *bnState
}

func (op *bnOp) Arity() int { return 3 }
func (op *bnOp) Type() hm.Type {
	return hm.NewFnType(tt(op.dims), tt(1), tt(1), tt(op.dims))
}
func (op *bnOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *bnOp) ReturnsPtr() bool { return false }

func (op *bnOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	gamma, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	beta, _, err := f32(v[2])
	if err != nil {
		return nil, err
	}
	l := op.l
	c := l.C
	n := shape[0]
	inner := 1
	if n > 0 {
		inner = len(x) / n / c
	}
	out := make([]float32, len(x))
	mean := make([]float64, c)
	invstd := make([]float64, c)
	if !op.train {
		for ch := 0; ch < c; ch++ {
			mean[ch] = float64(l.RunningMean[ch])
			invstd[ch] = 1 / math.Sqrt(float64(l.RunningVar[ch])+l.Eps)
		}
	} else {
		// Per-channel sums in float64 (sum, then centred second moment:
		// no cancellation for large means).
		stats := make([]float64, 2*c+1)
		for i := 0; i < len(x); i += inner {
			ch := (i / inner) % c
			var s float64
			for _, xv := range x[i : i+inner] {
				s += float64(xv)
			}
			stats[ch] += s
		}
		stats[2*c] = float64(n * inner)
		localMean := make([]float64, c)
		if stats[2*c] > 0 {
			for ch := range localMean {
				localMean[ch] = stats[ch] / stats[2*c]
			}
		}
		for i := 0; i < len(x); i += inner {
			ch := (i / inner) % c
			mu := localMean[ch]
			var s float64
			for _, xv := range x[i : i+inner] {
				d := float64(xv) - mu
				s += d * d
			}
			stats[c+ch] += s // M2 around the local mean
		}
		if l.Sync != nil {
			if err := l.Sync("forward", stats); err != nil {
				return nil, err
			}
		}
		m := stats[2*c]
		if m == 0 {
			return nil, errEmptyBN
		}
		for ch := 0; ch < c; ch++ {
			mean[ch] = stats[ch] / m
			vr := stats[c+ch] / m
			if vr < 0 {
				vr = 0
			}
			invstd[ch] = 1 / math.Sqrt(vr+l.Eps)
			unbiased := vr
			if m > 1 {
				unbiased = vr * m / (m - 1)
			}
			l.RunningMean[ch] = float32((1-l.Momentum)*float64(l.RunningMean[ch]) + l.Momentum*mean[ch])
			l.RunningVar[ch] = float32((1-l.Momentum)*float64(l.RunningVar[ch]) + l.Momentum*unbiased)
		}
		l.NumBatches++
		op.st.m = m
		op.st.invstd = invstd
		if len(op.st.xhat) != len(x) {
			op.st.xhat = make([]float32, len(x))
		}
		op.st.valid = false
	}
	for i := 0; i < len(x); i += inner {
		ch := (i / inner) % c
		mu, is, g, b := mean[ch], invstd[ch], float64(gamma[ch]), float64(beta[ch])
		for j, xv := range x[i : i+inner] {
			xh := (float64(xv) - mu) * is
			if op.train {
				op.st.xhat[i+j] = float32(xh)
			}
			out[i+j] = float32(g*xh + b)
		}
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(out)), nil
}

func (op *bnOp) DiffWRT(int) []bool { return []bool{true, true, true} }
func (op *bnOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	res := make(G.Nodes, 3)
	for i := range res {
		n, err := G.ApplyOp(&bnGradOp{baseOp: baseOp{nextID(), "bn'"}, fwd: op, which: i}, inputs[i], inputs[1], grad)
		if err != nil {
			return nil, err
		}
		res[i] = n
	}
	return res, nil
}

// bnGradOp computes one of dx (which 0), dgamma (1), dbeta (2) from
// (input, gamma, dy) and the forward pass's state.
type bnGradOp struct {
	baseOp
	fwd   *bnOp
	which int
}

func (op *bnGradOp) Arity() int { return 3 }
func (op *bnGradOp) Type() hm.Type {
	in := op.fwd.dims
	if op.which > 0 {
		in = 1
	}
	return hm.NewFnType(tt(in), tt(1), tt(op.fwd.dims), tt(in))
}
func (op *bnGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *bnGradOp) ReturnsPtr() bool { return false }

func (op *bnGradOp) Do(v ...G.Value) (G.Value, error) {
	gamma, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	dy, shape, err := f32(v[2])
	if err != nil {
		return nil, err
	}
	st, l := op.fwd.st, op.fwd.l
	c := l.C
	inner := 1
	if shape[0] > 0 {
		inner = len(dy) / shape[0] / c
	}
	if !st.valid {
		// [sum dy (C), sum dy*xhat (C)], local; synced for dx only.
		local := make([]float64, 2*c)
		for i := 0; i < len(dy); i += inner {
			ch := (i / inner) % c
			var s, sx float64
			for j, d := range dy[i : i+inner] {
				s += float64(d)
				sx += float64(d) * float64(st.xhat[i+j])
			}
			local[ch] += s
			local[c+ch] += sx
		}
		st.sums = local
		st.valid = true
	}
	switch op.which {
	case 1, 2:
		out := make([]float32, c)
		off := 0
		if op.which == 1 {
			off = c
		}
		for ch := range out {
			out[ch] = float32(st.sums[off+ch])
		}
		return tensor.New(tensor.WithShape(c), tensor.WithBacking(out)), nil
	}
	sums := st.sums
	if l.Sync != nil {
		sums = append([]float64(nil), st.sums...)
		if err := l.Sync("backward", sums); err != nil {
			return nil, err
		}
	}
	out := make([]float32, len(dy))
	for i := 0; i < len(dy); i += inner {
		ch := (i / inner) % c
		k := float64(gamma[ch]) * st.invstd[ch]
		mdy, mdyx := sums[ch]/st.m, sums[c+ch]/st.m
		for j, d := range dy[i : i+inner] {
			out[i+j] = float32(k * (float64(d) - mdy - float64(st.xhat[i+j])*mdyx))
		}
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(out)), nil
}
