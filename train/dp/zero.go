package dp

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/zero"
)

// ZeRO stages 1, 2 and 3 (package zero): the optimizer state, then also
// the gradients, then also the parameters, sharded over the ranks.
// Checkpoints are sharded: every rank writes its shard file and rank 0
// the whole model beside them (train.SaveZero).

func init() {
	for stage, doc := range []string{
		1: "ZeRO stage 1: sharded optimizer state",
		2: "ZeRO stage 2: sharded optimizer state and gradients",
		3: "ZeRO stage 3: sharded optimizer state, gradients and parameters",
	} {
		if stage == 0 {
			continue
		}
		train.Register(fmt.Sprintf("zero%d", stage), train.Factory{
			Doc:     doc,
			Options: func() train.Options { return NewZeroOptions() },
			Check:   checkZero,
			New:     func(ctx context.Context, s train.Setup) (train.Strategy, error) { return newZero(ctx, s, stage) },
			// The shard files hold the parameters beside the model file.
			CheckpointCopies: 1,
			Device:           true, // zero_device.go
		})
	}
}

// ZeroOptions are the options of -strategy zero1, zero2 and zero3: DDP's
// bucket caps (stage 2 reduces its gradients in buckets).
type ZeroOptions struct {
	Buckets
}

// NewZeroOptions returns ZeRO's defaults (Factory.Options).
func NewZeroOptions() *ZeroOptions { return &ZeroOptions{Buckets: DefaultBuckets} }

// AddFlags defines -bucket-mb and -first-bucket-mb.
func (o *ZeroOptions) AddFlags(fs *flag.FlagSet) { o.Buckets.AddFlags(fs) }

func checkZero(cfg *train.Config) (int, error) {
	// Every ZeRO setting works on the device too (-syncbn as with DDP).
	return cfg.World, cfg.Options.(*ZeroOptions).check()
}

var _ train.Strategy = (*zeroStrategy)(nil)

type zeroStrategy struct {
	snaps train.SnapshotBuffers // save snapshots' buffers, reused
	name  string
	c     comm.Comm
	m     *models.Model
	e     *zero.Engine
	gr    *models.Graph
	opt   optim.Config
}

func newZero(ctx context.Context, s train.Setup, stage int) (train.Strategy, error) {
	cfg := s.Config
	if dev, _ := cfg.CUDADevice(); dev >= 0 {
		return newDeviceZero(ctx, s, stage, dev)
	}
	o := cfg.Options.(*ZeroOptions)
	e, err := zero.New(ctx, s.Comm, s.Model, zero.Options{Stage: stage, Optim: cfg.OptimConfig(),
		BucketMB: o.MB, FirstBucketMB: o.FirstMB})
	if err != nil {
		return nil, err
	}
	// After zero.New, which pads the model's buffers (stages 1 and 2) or
	// makes itself the model's parameter store (stage 3).
	gr, err := s.Model.NewGraph(cfg.Batch, true)
	if err != nil {
		return nil, err
	}
	gr.OnGrad = e.AddGrad // stage 3's layers hand theirs to the store
	return &zeroStrategy{name: cfg.Strategy, c: s.Comm, m: s.Model, e: e, gr: gr, opt: cfg.OptimConfig()}, nil
}

// Engine is the strategy's ZeRO engine (for tests and tools).
func (s *zeroStrategy) Engine() *zero.Engine { return s.e }

func (s *zeroStrategy) DataRank() (rank, world int) { return s.c.Rank(), s.c.Size() }

func (s *zeroStrategy) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	return s.gr.StepIn(ctx, s.e.Backward, x, y)
}

func (s *zeroStrategy) Update(ctx context.Context) error { return s.e.Step(ctx) }

// ClipGrads: the norm is over every rank's gradient shard.
func (s *zeroStrategy) ClipGrads(ctx context.Context, max float64) (float64, error) {
	return train.ClipGradNorm(ctx, s.c, s.e.Grads(), max)
}

func (s *zeroStrategy) SetLR(lr float64) { s.e.Optimizer().SetLR(lr) }

func (s *zeroStrategy) Eval(ctx context.Context, eval func() error) error { return s.e.Eval(ctx, eval) }

func (s *zeroStrategy) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	return train.SaveZero(ctx, s.c, path, s.m, s.e, pos, train.WithMeta(meta, "strategy", s.name))
}

func (s *zeroStrategy) SnapshotSave(ctx context.Context, path string, pos train.Position, meta map[string]string) ([]func() error, error) {
	return train.SnapshotZero(ctx, s.c, path, s.m, s.e, pos, train.WithMeta(meta, "strategy", s.name), &s.snaps)
}

// Load reads the checkpoint into the model (stage 3, whose model holds no
// parameters: into a full-size copy, of which the engine takes its
// shards) and a full-size optimizer, of which the engine takes its shard.
func (s *zeroStrategy) Load(_ context.Context, path string) (train.Position, error) {
	full, err := optim.New(s.opt, s.m.NumParams())
	if err != nil {
		return train.Position{}, err
	}
	into := s.m
	if s.m.Store != nil {
		cp := *s.m
		cp.Flat = &flat.Params{Value: make([]float32, s.m.NumParams()), Spans: s.m.Flat.Spans}
		into = &cp
	}
	pos, _, err := train.LoadCheckpoint(path, into, full)
	if err != nil {
		return train.Position{}, err
	}
	if into != s.m {
		if err := s.e.LoadParams(into.Flat.Value); err != nil {
			return train.Position{}, fmt.Errorf("%w: %w", train.ErrCheckpoint, err)
		}
	}
	st, t := full.State()
	if err := s.e.LoadOptimizerState(st, t); err != nil {
		return train.Position{}, fmt.Errorf("%w: %w", train.ErrCheckpoint, err)
	}
	return pos, nil
}

// NonFinite: this rank's shard of the optimizer state and, with stages 1
// and 2, the parameters every rank holds whole (stage 3's are checked
// where rank 0 gathers them for the model file).
func (s *zeroStrategy) NonFinite() string {
	if s.m.Store == nil {
		if w := train.ParamsNonFinite(s.m, s.m.Flat.Value[:min(len(s.m.Flat.Value), s.m.NumParams())], 0); w != "" {
			return w
		}
	}
	return train.OptimizerNonFinite(s.e.Optimizer())
}

func (s *zeroStrategy) Memory() (train.MemoryBytes, int64) {
	m := s.e.Memory()
	return train.MemoryBytes{Params: m.Params, Grads: m.Grads, Optimizer: m.Optimizer}, m.PeakTransient
}

func (s *zeroStrategy) Report(_ context.Context, sum *train.Summary) error {
	sum.SharedMemory = s.e.SharedBuffers()
	if err := s.e.SharedBuffersErr(); err != nil {
		sum.SharedMemoryNote = err.Error()
	}
	return nil
}

func (s *zeroStrategy) Close() error {
	return errors.Join(s.gr.Close(), s.e.Close())
}
