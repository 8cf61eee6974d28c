package train

import (
	"context"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/pipeline"
	"github.com/gdist/gdist/zero"
)

// strategy is how the ranks share the work of one training step.
type strategy interface {
	// step runs forward and backward on one batch and synchronises the
	// gradients.
	step(ctx context.Context, gr *models.Graph, x []float32, y []int32) (float32, error)
	// update applies the optimizer and clears the gradients.
	update(ctx context.Context) error
	// memory is what this rank holds persistently, and the most it held
	// transiently on top.
	memory() (MemoryBytes, int64)
	buckets() int
	// eval runs a forward-only pass (evaluation) under ctx.
	eval(ctx context.Context, run func() error) error
}

// zooModel adapts a built-in model to pipeline.Model.
type zooModel struct{ *models.Model }

func (m zooModel) NewStage(from, to, batch int, last bool) (pipeline.Stage, error) {
	g, err := m.NewStageGraph(from, to, batch, last)
	if err != nil {
		return nil, err
	}
	return g, nil
}

type ddpStrategy struct {
	d   *ddp.DDP
	m   *models.Model
	opt optim.Optimizer
}

func (s *ddpStrategy) step(ctx context.Context, gr *models.Graph, x []float32, y []int32) (float32, error) {
	gr.OnGrad = s.d.AddGrad
	return gr.StepIn(ctx, s.d.Backward, x, y)
}

func (s *ddpStrategy) eval(_ context.Context, run func() error) error { return run() }

func (s *ddpStrategy) update(ctx context.Context) error {
	s.opt.Step(s.m.Flat.Value, s.m.Flat.Grad)
	s.m.ZeroGrad()
	return nil
}

func (s *ddpStrategy) memory() (MemoryBytes, int64) {
	st, _ := s.opt.State()
	var ob int64
	for _, v := range st {
		ob += int64(len(v)) * 4
	}
	return MemoryBytes{Params: int64(len(s.m.Flat.Value)) * 4, Grads: int64(len(s.m.Flat.Grad)) * 4, Optimizer: ob}, 0
}

func (s *ddpStrategy) buckets() int { return len(s.d.Buckets()) }

type zeroStrategy struct{ e *zero.Engine }

func (s *zeroStrategy) step(ctx context.Context, gr *models.Graph, x []float32, y []int32) (float32, error) {
	gr.OnGrad = s.e.AddGrad // stage 3's layers hand theirs to the store
	return gr.StepIn(ctx, s.e.Backward, x, y)
}

func (s *zeroStrategy) update(ctx context.Context) error { return s.e.Step(ctx) }

func (s *zeroStrategy) eval(ctx context.Context, run func() error) error { return s.e.Eval(ctx, run) }

func (s *zeroStrategy) memory() (MemoryBytes, int64) {
	m := s.e.Memory()
	return MemoryBytes{Params: m.Params, Grads: m.Grads, Optimizer: m.Optimizer}, m.PeakTransient
}

func (s *zeroStrategy) buckets() int { return 0 }

// newStrategy builds cfg's strategy for m on c (blocking: it broadcasts
// rank 0's state). opt is the full-size optimizer DDP uses (and a resume
// has filled); ZeRO makes its own shard-sized one.
func newStrategy(ctx context.Context, c comm.Comm, m *models.Model, opt optim.Optimizer, cfg Config) (strategy, error) {
	switch cfg.Strategy {
	case "pipeline":
		return newPipeline(ctx, c, m, cfg)
	case "zero1", "zero2", "zero3":
		e, err := zero.New(ctx, c, m, zero.Options{Stage: int(cfg.Strategy[4] - '0'), Optim: cfg.optimConfig(),
			BucketMB: cfg.BucketMB, FirstBucketMB: cfg.FirstBucket})
		if err != nil {
			return nil, err
		}
		return &zeroStrategy{e}, nil
	}
	hook, _ := ddp.HookByName(cfg.Compress)
	d, err := ddp.New(ctx, c, m, ddp.Options{BucketMB: cfg.BucketMB, FirstBucketMB: cfg.FirstBucket, NoOverlap: cfg.NoOverlap, Hook: hook, Debug: cfg.Debug})
	if err != nil {
		return nil, err
	}
	return &ddpStrategy{d: d, m: m, opt: opt}, nil
}
