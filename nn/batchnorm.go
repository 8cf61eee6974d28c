package nn

import (
	"context"
	"fmt"
	"math"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/internal/vecmath"
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
	Sync SyncFunc
}

// SyncFunc makes batch-norm statistics span ranks (see BNLayer.Sync); ctx
// bounds its collectives (it is the context of the graph's Step).
type SyncFunc = func(ctx context.Context, stage string, buf []float64) error

func (l *BNLayer) reset() {
	clear(l.RunningMean)
	for i := range l.RunningVar {
		l.RunningVar[i] = 1
	}
	l.NumBatches = 0
}

func newBNLayer(prefix string, c int) *BNLayer {
	l := &BNLayer{Prefix: prefix, C: c, Momentum: 0.1, Eps: 1e-5,
		RunningMean: make([]float32, c), RunningVar: make([]float32, c)}
	for i := range l.RunningVar {
		l.RunningVar[i] = 1
	}
	return l
}

// BNState is what a training forward pass leaves for its backward pass.
// Forward fills it; Backward (or the graph's gradient ops) reads it.
type BNState struct {
	XHat   []float32 // normalised input
	InvStd []float64 // per channel
	M      float64   // elements per channel, over all ranks
	sums   []float64 // local [sum dy, sum dy*xhat], once per backward
	valid  bool
}

// Forward normalises x, laid out as (n, C, inner) (inner = H*W, or 1 for
// (N, C) input; n may be 0), and returns gamma*xhat + beta. In training
// mode it uses the batch statistics (spanning ranks when Sync is set),
// updates the running statistics and fills st; in eval mode it uses the
// running statistics.
func (l *BNLayer) Forward(ctx context.Context, x []float32, n, inner int, gamma, beta []float32, train bool, st *BNState) ([]float32, error) {
	c := l.C
	if len(x) != n*c*inner || len(gamma) != c || len(beta) != c {
		return nil, fmt.Errorf("nn: batch norm %s: input of %d values is not %d x %d x %d, or scale/shift not of length %d", l.Prefix, len(x), n, c, inner, c)
	}
	out := make([]float32, len(x))
	mean := make([]float64, c)
	invstd := make([]float64, c)
	if !train {
		for ch := 0; ch < c; ch++ {
			mean[ch] = float64(l.RunningMean[ch])
			invstd[ch] = 1 / math.Sqrt(float64(l.RunningVar[ch])+l.Eps)
		}
	} else {
		// Per-channel sum, then the centred second moment around this
		// rank's mean (M2): no cancellation for large means.
		stats := make([]float64, 2*c+1)
		for i := 0; i < len(x); i += inner {
			ch := (i / inner) % c
			stats[ch] += vecmath.SumF64(x[i : i+inner])
		}
		stats[2*c] = float64(n * inner)
		if stats[2*c] > 0 {
			for i := 0; i < len(x); i += inner {
				ch := (i / inner) % c
				stats[c+ch] += vecmath.SqDevF64(x[i:i+inner], stats[ch]/stats[2*c])
			}
		}
		if l.Sync != nil {
			if err := l.Sync(ctx, "forward", stats); err != nil {
				return nil, fmt.Errorf("nn: batch norm %s: %w", l.Prefix, err)
			}
		}
		m := stats[2*c]
		if m == 0 {
			return nil, errEmptyBN
		}
		for ch := 0; ch < c; ch++ {
			mean[ch] = stats[ch] / m
			vr := max(stats[c+ch]/m, 0)
			invstd[ch] = 1 / math.Sqrt(vr+l.Eps)
			unbiased := vr
			if m > 1 {
				unbiased = vr * m / (m - 1)
			}
			l.RunningMean[ch] = float32((1-l.Momentum)*float64(l.RunningMean[ch]) + l.Momentum*mean[ch])
			l.RunningVar[ch] = float32((1-l.Momentum)*float64(l.RunningVar[ch]) + l.Momentum*unbiased)
		}
		l.NumBatches++
		st.M = m
		st.InvStd = invstd
		if len(st.XHat) != len(x) {
			st.XHat = make([]float32, len(x))
		}
		st.valid = false
	}
	for i := 0; i < len(x); i += inner {
		ch := (i / inner) % c
		mu, is, g, b := mean[ch], invstd[ch], float64(gamma[ch]), float64(beta[ch])
		var xhat []float32
		if train {
			xhat = st.XHat[i : i+inner]
		}
		vecmath.BNNorm(x[i:i+inner], out[i:i+inner], xhat, &[4]float64{mu, is, g, b})
	}
	return out, nil
}

// localSums computes this rank's [sum dy, sum dy*xhat] per channel, once
// per backward pass.
func (l *BNLayer) localSums(dy []float32, inner int, st *BNState) []float64 {
	if st.valid {
		return st.sums
	}
	c := l.C
	local := make([]float64, 2*c)
	for i := 0; i < len(dy); i += inner {
		ch := (i / inner) % c
		s, sx := vecmath.SumDotF64(dy[i:i+inner], st.XHat[i:i+inner])
		local[ch] += s
		local[c+ch] += sx
	}
	st.sums = local
	st.valid = true
	return local
}

// ParamGrads returns this rank's gradients of gamma (sum dy*xhat) and beta
// (sum dy). With SyncBN they stay per rank; DDP averages them like every
// other gradient.
func (l *BNLayer) ParamGrads(dy []float32, inner int, st *BNState) (dgamma, dbeta []float32) {
	s := l.localSums(dy, inner, st)
	c := l.C
	dgamma, dbeta = make([]float32, c), make([]float32, c)
	for ch := 0; ch < c; ch++ {
		dbeta[ch] = float32(s[ch])
		dgamma[ch] = float32(s[c+ch])
	}
	return dgamma, dbeta
}

// InputGrad returns dx. With Sync set, the per-channel sums it needs span
// all ranks (one all-reduce of [sum dy, sum dy*xhat]).
func (l *BNLayer) InputGrad(ctx context.Context, dy []float32, inner int, gamma []float32, st *BNState) ([]float32, error) {
	if len(dy) != len(st.XHat) {
		return nil, fmt.Errorf("nn: batch norm %s: gradient of %d values for an input of %d", l.Prefix, len(dy), len(st.XHat))
	}
	sums := l.localSums(dy, inner, st)
	c := l.C
	if l.Sync != nil {
		sums = append([]float64(nil), sums...)
		if err := l.Sync(ctx, "backward", sums); err != nil {
			return nil, fmt.Errorf("nn: batch norm %s: %w", l.Prefix, err)
		}
	}
	out := make([]float32, len(dy))
	for i := 0; i < len(dy); i += inner {
		ch := (i / inner) % c
		k := float64(gamma[ch]) * st.InvStd[ch]
		mdy, mdyx := sums[ch]/st.M, sums[c+ch]/st.M
		vecmath.BNGrad(dy[i:i+inner], st.XHat[i:i+inner], out[i:i+inner], &[3]float64{k, mdy, mdyx})
	}
	return out, nil
}

// Backward is InputGrad and ParamGrads together.
func (l *BNLayer) Backward(ctx context.Context, dy []float32, inner int, gamma []float32, st *BNState) (dx, dgamma, dbeta []float32, err error) {
	dgamma, dbeta = l.ParamGrads(dy, inner, st)
	dx, err = l.InputGrad(ctx, dy, inner, gamma, st)
	return dx, dgamma, dbeta, err
}

type bnOp struct {
	baseOp
	dims  int
	l     *BNLayer
	train bool
	st    *BNState
	ctx   *context.Context // the running Step's
}

func (op *bnOp) Arity() int { return 3 }
func (op *bnOp) Type() hm.Type {
	return hm.NewFnType(tt(op.dims), tt(1), tt(1), tt(op.dims))
}
func (op *bnOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *bnOp) ReturnsPtr() bool { return false }

func inner(shape tensor.Shape) int {
	in := 1
	for _, d := range shape[2:] {
		in *= d
	}
	return in
}

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
	out, err := op.l.Forward(*op.ctx, x, shape[0], inner(shape), gamma, beta, op.train, op.st)
	if err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(out)), nil
}

func (op *bnOp) DiffWRT(int) []bool { return []bool{true, true, true} }
func (op *bnOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	return normGrads(inputs, grad, func(g normGrad) G.Op { return &bnGradOp{g, op} }, "bn'", op.dims)
}

// bnGradOp computes one of dx, dgamma, dbeta (normGrad) from the forward
// pass's state.
type bnGradOp struct {
	normGrad
	fwd *bnOp
}

func (op *bnGradOp) Do(v ...G.Value) (G.Value, error) {
	gamma, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	dy, shape, err := f32(v[2])
	if err != nil {
		return nil, err
	}
	l, st, in := op.fwd.l, op.fwd.st, inner(shape)
	if op.which == 0 {
		dx, err := l.InputGrad(*op.fwd.ctx, dy, in, gamma, st)
		if err != nil {
			return nil, err
		}
		return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(dx)), nil
	}
	dg, db := l.ParamGrads(dy, in, st)
	out := dg
	if op.which == 2 {
		out = db
	}
	return tensor.New(tensor.WithShape(l.C), tensor.WithBacking(out)), nil
}
