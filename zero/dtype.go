package zero

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

// f64 is what an engine over float64 learnables (a plain gorgonia model,
// stages 1 and 2) holds in place of its float32 buffers and optimizer:
// the padded parameters, the full gradient (stage 1), this rank's shard
// of the averaged gradient, and an optim.Optimizer64.
type f64 struct {
	flatP, gradFull, gradShard []float64
	opt                        optim.Optimizer64
}

// rebind re-points the views after the flat buffers moved (Close).
func (f *f64) rebind(e *Engine) {
	if f == nil {
		return
	}
	f.flatP = e.fp.Value64[:len(f.flatP)]
	if f.gradFull != nil {
		f.gradFull = e.fp.Grad64[:len(f.gradFull)]
		f.gradShard = f.gradFull[e.lo : e.lo+e.s]
	}
}

func (f *f64) memory(e *Engine) Memory {
	st, _ := f.opt.State64()
	var ob int64
	for _, v := range st {
		ob += int64(len(v)) * 8
	}
	// gorgonia's dual values hold a full gradient (stage 1 reduces it in
	// place; stage 2 also keeps its shard).
	g := int64(len(e.fp.Grad64)) * 8
	if e.inPlace {
		g += int64(len(f.gradShard)) * 8
	}
	return Memory{Params: int64(len(f.flatP)) * 8, Grads: g, Optimizer: ob}
}

// Grads64 is Grads for float64 learnables (nil for float32 ones).
func (e *Engine) Grads64() []float64 {
	if e.f64 == nil {
		return nil
	}
	return e.f64.gradShard
}

// Optimizer64 is the shard optimizer for float64 learnables (nil for
// float32 ones: see Optimizer).
func (e *Engine) Optimizer64() optim.Optimizer64 {
	if e.f64 == nil {
		return nil
	}
	return e.f64.opt
}

// WrapValues is Wrap for a model that builds a new graph every step (see
// ddp.WrapValues): it takes the parameter tensors the model keeps across
// graphs (re-backed in place onto the flat buffer, flat.BindValues),
// stages 1 and 2. Each step: Backward(ctx, func() error { run the
// machine; return e.AddGrads(nodes) }), then Step (the engine's
// optimizer updates this rank's shard and all-gathers the parameters
// into the model's tensors).
func WrapValues(ctx context.Context, c comm.Comm, values []flat.Value, opts Options) (*Engine, error) {
	if c == nil {
		return nil, comm.InvalidArgf("zero: nil comm")
	}
	if opts.Stage == 3 {
		return nil, comm.InvalidArgf("zero: rank %d: stage 3 needs a model whose layers fetch their parameters from a store (zero.Sharded); use stage 1 or 2 for a model's own tensors", c.Rank())
	}
	fp, err := flat.BindValues(values, 0)
	if err != nil {
		return nil, fmt.Errorf("zero: rank %d: %w", c.Rank(), err)
	}
	return newEngine(ctx, c, fp, nil, nil, opts)
}

// AddGrads adds one step's gradients (a model wrapped with WrapValues):
// nodes[i] is this step's graph node over parameter i (nil if unused).
// Call it inside Backward's function, after the machine ran; stage 2
// reduces each bucket to its owner as soon as its gradients are in.
func (e *Engine) AddGrads(nodes []*G.Node) error {
	if err := e.fp.AddGrads(nodes, e.tapped); err != nil {
		return fmt.Errorf("zero: rank %d: %w", e.rank, err)
	}
	return nil
}

// snapshot is SnapshotShard for float64 learnables: the same files with
// F64 tensors.
func (f *f64) snapshot(e *Engine, path string, meta map[string]string, extra []checkpoint.Tensor) (func() error, error) {
	lo, ln, _ := shardSpan(e.p, e.c.Size(), e.rank)
	st, t := f.opt.State64()
	ts := []checkpoint.Tensor{checkpoint.F64("params", []int{ln}, f.flatP[lo:lo+ln])}
	for k, v := range st {
		ts = append(ts, checkpoint.F64("optimizer."+k, []int{ln}, v[:ln]))
	}
	ts = append(ts, extra...)
	return e.shardWriter(path, ts, e.shardMeta(meta, f.opt.Name(), t)), nil
}

// LoadParams64 is LoadParams for float64 learnables (Shards.Params64).
func (e *Engine) LoadParams64(full []float64) error {
	if e.f64 == nil {
		return fmt.Errorf("%w: the model's learnables are float32: use LoadParams", ErrShard)
	}
	if len(full) != e.p {
		return fmt.Errorf("%w: %d parameters, the model has %d", ErrShard, len(full), e.p)
	}
	copy(e.f64.flatP[:e.p], full)
	return nil
}

// LoadOptimizerState64 is LoadOptimizerState for float64 learnables
// (Shards.OptState64).
func (e *Engine) LoadOptimizerState64(full map[string][]float64, step int64) error {
	if e.f64 == nil {
		return fmt.Errorf("%w: the model's learnables are float32: use LoadOptimizerState", ErrShard)
	}
	st, _ := e.f64.opt.State64()
	lo, ln, _ := shardSpan(e.p, e.c.Size(), e.rank)
	for k, dst := range st {
		src, ok := full[k]
		switch {
		case !ok:
			return fmt.Errorf("%w: no optimizer state %q for optimizer %s", ErrShard, k, e.f64.opt.Name())
		case len(src) != e.p:
			return fmt.Errorf("%w: optimizer state %q has %d values, the model has %d parameters", ErrShard, k, len(src), e.p)
		}
		clear(dst)
		copy(dst, src[lo:lo+ln])
	}
	e.f64.opt.SetStep(step)
	return nil
}
