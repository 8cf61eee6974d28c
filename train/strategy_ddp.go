package train

import (
	"context"
	"errors"
	"strconv"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// DDP: every rank holds the whole model, its gradients and the optimizer
// state; gradients are averaged in buckets (package ddp) while backward
// runs. Checkpoints are Save's two files, written by rank 0.

func init() {
	Register("ddp", Factory{
		New:   newDDP,
		Check: checkDDP,
		Doc:   "data parallel: gradients all-reduced in buckets during backward",
	})
}

func checkDDP(cfg *Config) error {
	_, err := ddp.HookByName(cfg.Compress)
	return err
}

var _ Strategy = (*ddpStrategy)(nil)

type ddpStrategy struct {
	snaps snapBufs // save snapshots' buffers, reused
	c     comm.Comm
	d     *ddp.DDP
	m     *models.Model
	gr    *models.Graph
	opt   optim.Optimizer // full size
}

func newDDP(ctx context.Context, s Setup) (Strategy, error) {
	cfg := s.Config
	opt, err := optim.New(cfg.OptimConfig(), s.Model.NumParams())
	if err != nil {
		return nil, err
	}
	hook, _ := ddp.HookByName(cfg.Compress)
	d, err := ddp.New(ctx, s.Comm, s.Model, ddp.Options{BucketMB: cfg.BucketMB, FirstBucketMB: cfg.FirstBucket, NoOverlap: cfg.NoOverlap, Hook: hook, Debug: cfg.Debug})
	if err != nil {
		return nil, err
	}
	gr, err := s.Model.NewGraph(cfg.Batch, true)
	if err != nil {
		return nil, err
	}
	gr.OnGrad = d.AddGrad
	return &ddpStrategy{c: s.Comm, d: d, m: s.Model, gr: gr, opt: opt}, nil
}

// Optimizer is the strategy's optimizer, over the whole model (for tests
// and tools).
func (s *ddpStrategy) Optimizer() optim.Optimizer { return s.opt }

func (s *ddpStrategy) DataRank() (rank, world int) { return s.c.Rank(), s.c.Size() }

func (s *ddpStrategy) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	return s.gr.StepIn(ctx, s.d.Backward, x, y)
}

func (s *ddpStrategy) Update(ctx context.Context) error {
	s.opt.Step(s.m.Flat.Value, s.m.Flat.Grad)
	s.m.ZeroGrad()
	return nil
}

func (s *ddpStrategy) Eval(_ context.Context, eval func() error) error { return eval() }

func (s *ddpStrategy) Save(ctx context.Context, path string, pos Position, meta map[string]string) error {
	return saveFull(ctx, s.c, path, s.m, s.opt, pos, withMeta(meta, "world_size", strconv.Itoa(s.c.Size())))
}

// SnapshotSave: rank 0 copies the model and optimizer state and writes
// them in the background; the others have nothing to write.
func (s *ddpStrategy) SnapshotSave(_ context.Context, path string, pos Position, meta map[string]string) ([]func() error, error) {
	if s.c.Rank() != 0 {
		return []func() error{nil}, nil
	}
	return []func() error{snapshotFull(path, s.m, s.opt, pos, withMeta(meta, "world_size", strconv.Itoa(s.c.Size())), &s.snaps)}, nil
}

// nonFinite: rank 0 saves the whole model and optimizer, which every rank
// holds alike.
func (s *ddpStrategy) nonFinite() string {
	if w := paramsNonFinite(s.m, s.m.Flat.Value, 0); w != "" {
		return w
	}
	return optimNonFinite(s.opt)
}

func (s *ddpStrategy) Load(_ context.Context, path string) (Position, error) {
	pos, _, err := LoadCheckpoint(path, s.m, s.opt)
	return pos, err
}

func (s *ddpStrategy) Memory() (MemoryBytes, int64) {
	return MemoryBytes{Params: int64(len(s.m.Flat.Value)) * 4, Grads: int64(len(s.m.Flat.Grad)) * 4, Optimizer: optimBytes(s.opt)}, 0
}

func (s *ddpStrategy) Report(_ context.Context, sum *Summary) error {
	sum.Buckets = len(s.d.Buckets())
	sum.SharedMemory = s.d.SharedGrads()
	if err := s.d.SharedGradsErr(); err != nil {
		sum.SharedMemoryNote = err.Error()
	}
	return nil
}

func (s *ddpStrategy) Close() error {
	return errors.Join(s.gr.Close(), s.d.Close())
}
