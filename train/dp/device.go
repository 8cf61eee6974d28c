package dp

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
)

// DDP on a GPU (-device cuda): the model placed with devmodel.Place
// (parameters, gradients and the optimizer's state in device memory);
// each step uploads the batch and runs forward, backward, clipping and
// the update there. Evaluations and saves go through the host model: its
// parameters, batch-norm statistics and a host optimizer's state are
// copied down before either (once per update at most), and copied up
// after a resume, so the checkpoints are the CPU's files. One rank for
// now: the gradient all-reduce of devmodel's device buffer is to come.

// checkDDPDevice refuses what DDP cannot do on a GPU yet.
func checkDDPDevice(cfg *train.Config) error {
	o := cfg.Options.(*DDPOptions)
	switch {
	case cfg.World > 1:
		return fmt.Errorf("-device %s trains on one rank only for now (this run: %d ranks; the gradient all-reduce on the device is to come): use -nproc 1, or -device cpu", cfg.Device, cfg.World)
	case cfg.SyncBN:
		return fmt.Errorf("-syncbn: SyncBatchNorm has no device kernels (-device %s): drop -syncbn, or use -device cpu", cfg.Device)
	case o.Compress != "none":
		return fmt.Errorf("-compress %s compresses the gradient all-reduce, which -device %s does not do yet: drop -compress", o.Compress, cfg.Device)
	case o.Debug:
		return fmt.Errorf("-debug compares the ranks' parameters on the host, which -device %s does not do yet: drop -debug", cfg.Device)
	}
	return nil
}

var (
	_ train.Strategy      = (*deviceDDP)(nil)
	_ train.UpdateClipper = (*deviceDDP)(nil)
	_ train.LRSetter      = (*deviceDDP)(nil)
	_ train.Snapshotter   = (*deviceDDP)(nil)
	_ train.StateChecker  = (*deviceDDP)(nil)
)

type deviceDDP struct {
	snaps train.SnapshotBuffers
	c     comm.Comm
	m     *models.Model
	d     *devmodel.Model
	opt   optim.Optimizer // the host's copy of the device's state, for saves
	stale bool            // the host model and opt are behind the device
}

func newDeviceDDP(ctx context.Context, s train.Setup, dev int) (train.Strategy, error) {
	cfg := s.Config
	if err := devmodel.Check(s.Model); err != nil {
		return nil, fmt.Errorf("%w: -device %s: %v", train.ErrConfig, cfg.Device, err)
	}
	// Every rank starts from rank 0's parameters (one rank for now: the
	// broadcast is a formality that keeps the rule).
	if err := comm.Run(ctx)(s.Comm.Broadcast(ctx, comm.FromSlice(s.Model.Flat.Value), 0)); err != nil {
		return nil, err
	}
	opt, err := optim.New(cfg.OptimConfig(), len(s.Model.Flat.Value))
	if err != nil {
		return nil, err
	}
	d, err := devmodel.Place(s.Model, devmodel.Config{Device: dev, Batch: cfg.Batch, Optim: cfg.OptimConfig(), ClipGrad: cfg.ClipGrad})
	if err != nil {
		return nil, fmt.Errorf("train: -device %s: %w", cfg.Device, err)
	}
	return &deviceDDP{c: s.Comm, m: s.Model, d: d, opt: opt}, nil
}

// Device is the placed model (for tests and tools).
func (s *deviceDDP) Device() *devmodel.Model { return s.d }

func (s *deviceDDP) DataRank() (rank, world int) { return s.c.Rank(), s.c.Size() }

func (s *deviceDDP) Step(_ context.Context, x []float32, y []int32) (float32, error) {
	return s.d.ForwardBackward(x, y)
}

// Update clips (devmodel's Config.ClipGrad), updates and zeroes the
// gradients on the device.
func (s *deviceDDP) Update(context.Context) error {
	s.stale = true
	if err := s.d.Update(); err != nil {
		return err
	}
	return s.d.ZeroGrad()
}

func (s *deviceDDP) LastGradNorm() (float64, error) { return s.d.GradNorm() }

func (s *deviceDDP) SetLR(lr float64) {
	s.d.SetLR(lr)
	s.opt.SetLR(lr)
}

// toHost copies the device's parameters, batch-norm statistics and
// optimizer state into the host model and opt, if an update changed them
// since the last copy.
func (s *deviceDDP) toHost() error {
	if !s.stale {
		return nil
	}
	if err := s.d.CopyToHost(); err != nil {
		return fmt.Errorf("train: copying the model from the device: %w", err)
	}
	if err := s.d.OptimStateToHost(s.opt); err != nil {
		return fmt.Errorf("train: copying the optimizer state from the device: %w", err)
	}
	s.stale = false
	return nil
}

// Eval evaluates the host model (the CPU path), copied from the device.
func (s *deviceDDP) Eval(_ context.Context, eval func() error) error {
	if err := s.toHost(); err != nil {
		return err
	}
	return eval()
}

func (s *deviceDDP) meta(meta map[string]string) map[string]string {
	return train.WithMeta(meta, "world_size", strconv.Itoa(s.c.Size()))
}

func (s *deviceDDP) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	err := s.toHost()
	if err := comm.Agree(ctx, s.c, err); err != nil {
		return err
	}
	return train.SaveFull(ctx, s.c, path, s.m, s.opt, pos, s.meta(meta))
}

func (s *deviceDDP) SnapshotSave(_ context.Context, path string, pos train.Position, meta map[string]string) ([]func() error, error) {
	if err := s.toHost(); err != nil {
		return nil, err
	}
	if s.c.Rank() != 0 {
		return []func() error{nil}, nil
	}
	return []func() error{train.SnapshotFull(path, s.m, s.opt, pos, s.meta(meta), &s.snaps)}, nil
}

func (s *deviceDDP) NonFinite() string {
	if err := s.toHost(); err != nil {
		return "the device's state (" + err.Error() + ")"
	}
	if w := train.ParamsNonFinite(s.m, s.m.Flat.Value, 0); w != "" {
		return w
	}
	return train.OptimizerNonFinite(s.opt)
}

// Load reads the checkpoint into the host model and optimizer, and
// copies both up.
func (s *deviceDDP) Load(_ context.Context, path string) (train.Position, error) {
	pos, _, err := train.LoadCheckpoint(path, s.m, s.opt)
	if err != nil {
		return pos, err
	}
	if err := s.d.CopyFromHost(); err != nil {
		return pos, fmt.Errorf("train: copying the resumed model to the device: %w", err)
	}
	if err := s.d.OptimStateFromHost(s.opt); err != nil {
		return pos, fmt.Errorf("train: copying the resumed optimizer state to the device: %w", err)
	}
	s.stale = false
	return pos, nil
}

// Memory: the model state on the device (the host's copies aside).
func (s *deviceDDP) Memory() (train.MemoryBytes, int64) {
	return train.MemoryBytes{Params: int64(s.d.N) * 4, Grads: int64(s.d.N) * 4, Optimizer: train.OptimizerBytes(s.opt)}, 0
}

func (s *deviceDDP) Report(_ context.Context, sum *train.Summary) error {
	sum.Overlap = false
	sum.Buckets = 0
	sum.PeakDeviceBytes = s.d.PeakBytes()
	return nil
}

func (s *deviceDDP) Close() error {
	return errors.Join(s.d.Close())
}
