package dp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"runtime"
	"strconv"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
)

// DDP: every rank holds the whole model, its gradients and the optimizer
// state; gradients are averaged in buckets (package ddp) while backward
// runs. Checkpoints are train.Save's two files, written by rank 0.

func init() {
	train.Register("ddp", train.Factory{
		Doc:     "data parallel: gradients all-reduced in buckets during backward",
		Options: func() train.Options { return NewDDPOptions() },
		Check:   checkDDP,
		New:     newDDP,
		Device:  true,
	})
}

// Buckets are the caps of the gradient buckets of DDP and ZeRO in MiB,
// -bucket-mb and -first-bucket-mb.
type Buckets struct {
	MB      float64 // every bucket's but the first
	FirstMB float64 // the first's (the last layers': reduced first)
}

// AddFlags defines -bucket-mb and -first-bucket-mb.
func (b *Buckets) AddFlags(fs *flag.FlagSet) {
	fs.Float64Var(&b.MB, "bucket-mb", b.MB, "DDP bucket cap in MiB")
	fs.Float64Var(&b.FirstMB, "first-bucket-mb", b.FirstMB, "DDP first bucket cap in MiB")
}

// DefaultBuckets are the engines' defaults (PyTorch's).
var DefaultBuckets = Buckets{MB: ddp.DefaultBucketMB, FirstMB: ddp.DefaultFirstBucketMB}

// check refuses a cap that is not a positive number.
func (b Buckets) check() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"bucket-mb", b.MB}, {"first-bucket-mb", b.FirstMB}} {
		switch {
		case f.v == 0:
			return fmt.Errorf("-%s 0: want a positive number of MiB (-bucket-mb is %g by default, -first-bucket-mb %g)", f.name, DefaultBuckets.MB, DefaultBuckets.FirstMB)
		case !(f.v > 0) || math.IsInf(f.v, 0):
			return fmt.Errorf("-%s %v: want a positive number of MiB", f.name, f.v)
		}
	}
	return nil
}

// DDPOptions are -strategy ddp's options.
type DDPOptions struct {
	Buckets
	// NoOverlap starts the gradient all-reduces only after backward. Left
	// unset, DDP does so when the host's ranks fill its cores
	// (Config.LocalRanks at least the CPUs this process may run on):
	// overlapping pays where communication has resources of its own;
	// with a rank on every core the reduction and its waiting run on the
	// cores the ranks compute on, and cost more than they hide (cnn, 2
	// ranks on 2 cores: steps about 1.3x longer with overlap).
	NoOverlap Choice
	Compress  string // gradient compression: none, fp16, bf16 (ddp.HookByName)
	Debug     bool   // check after every step that all ranks hold identical parameters
}

// NewDDPOptions returns DDP's defaults (Factory.Options).
func NewDDPOptions() *DDPOptions { return &DDPOptions{Buckets: DefaultBuckets, Compress: "none"} }

// AddFlags defines -bucket-mb, -first-bucket-mb, -no-overlap, -compress
// and -debug.
func (o *DDPOptions) AddFlags(fs *flag.FlagSet) {
	o.Buckets.AddFlags(fs)
	fs.Var(&o.NoOverlap, "no-overlap", "start gradient all-reduces only after backward (default: so when this host runs at least as many ranks as it has cores, where communicating during backward takes cores from the ranks' compute; -no-overlap=false overlaps anyway)")
	fs.StringVar(&o.Compress, "compress", o.Compress, "gradient compression: none, fp16, bf16")
	fs.BoolVar(&o.Debug, "debug", o.Debug, "check after every step that all ranks hold identical parameters")
}

// noOverlap is NoOverlap's value for one of local ranks on a host with
// cores cores: as set, or else true when the ranks fill the cores.
func (o *DDPOptions) noOverlap(local, cores int) bool {
	if on, set := o.NoOverlap.Get(); set {
		return on
	}
	return local >= max(cores, 1)
}

// A Choice is a boolean option that, left unset, the strategy decides
// (-no-overlap). The zero value is unset; its flag is a bool flag.
type Choice struct{ on, set bool }

// Choose returns a Choice set to on.
func Choose(on bool) Choice { return Choice{on: on, set: true} }

// Get returns the choice and whether it was made.
func (c Choice) Get() (on, set bool) { return c.on, c.set }

// String is "true" or "false" ("false" when unset).
func (c *Choice) String() string {
	if c == nil {
		return "false"
	}
	return strconv.FormatBool(c.on)
}

// Set parses s as a bool (flag.Value).
func (c *Choice) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("parse error") // the flag package's word for it
	}
	*c = Choose(on)
	return nil
}

// IsBoolFlag makes -no-overlap a flag without a value.
func (c *Choice) IsBoolFlag() bool { return true }

func checkDDP(cfg *train.Config) (int, error) {
	o := cfg.Options.(*DDPOptions)
	if err := o.Buckets.check(); err != nil {
		return 0, err
	}
	_, err := ddp.HookByName(o.Compress)
	if n, _ := cfg.CUDADevice(); err == nil && n >= 0 {
		err = checkDDPDevice(cfg)
	}
	return cfg.World, err
}

var _ train.Strategy = (*ddpStrategy)(nil)

type ddpStrategy struct {
	snaps     train.SnapshotBuffers // save snapshots' buffers, reused
	c         comm.Comm
	d         *ddp.DDP
	m         *models.Model
	gr        *models.Graph
	opt       optim.Optimizer // full size
	noOverlap bool
}

func newDDP(ctx context.Context, s train.Setup) (train.Strategy, error) {
	cfg := s.Config
	if dev, _ := cfg.CUDADevice(); dev >= 0 {
		return newDeviceDDP(ctx, s, dev)
	}
	o := cfg.Options.(*DDPOptions)
	opt, err := optim.New(cfg.OptimConfig(), s.Model.NumParams())
	if err != nil {
		return nil, err
	}
	hook, _ := ddp.HookByName(o.Compress)
	noOverlap := o.noOverlap(cfg.LocalRanks, runtime.NumCPU())
	d, err := ddp.New(ctx, s.Comm, s.Model, ddp.Options{BucketMB: o.MB, FirstBucketMB: o.FirstMB, NoOverlap: noOverlap, Hook: hook, Debug: o.Debug})
	if err != nil {
		return nil, err
	}
	gr, err := s.Model.NewGraph(cfg.Batch, true)
	if err != nil {
		return nil, err
	}
	gr.OnGrad = d.AddGrad
	return &ddpStrategy{c: s.Comm, d: d, m: s.Model, gr: gr, opt: opt, noOverlap: noOverlap}, nil
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

// ClipGrads: every rank holds the whole averaged gradient.
func (s *ddpStrategy) ClipGrads(ctx context.Context, max float64) (float64, error) {
	return train.ClipGradNorm(ctx, nil, s.m.Flat.Grad, max)
}

func (s *ddpStrategy) SetLR(lr float64) { s.opt.SetLR(lr) }

func (s *ddpStrategy) Eval(_ context.Context, eval func() error) error { return eval() }

func (s *ddpStrategy) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	return train.SaveFull(ctx, s.c, path, s.m, s.opt, pos, train.WithMeta(meta, "world_size", strconv.Itoa(s.c.Size())))
}

// SnapshotSave: rank 0 copies the model and optimizer state and writes
// them in the background; the others have nothing to write.
func (s *ddpStrategy) SnapshotSave(_ context.Context, path string, pos train.Position, meta map[string]string) ([]func() error, error) {
	if s.c.Rank() != 0 {
		return []func() error{nil}, nil
	}
	return []func() error{train.SnapshotFull(path, s.m, s.opt, pos, train.WithMeta(meta, "world_size", strconv.Itoa(s.c.Size())), &s.snaps)}, nil
}

// NonFinite: rank 0 saves the whole model and optimizer, which every rank
// holds alike.
func (s *ddpStrategy) NonFinite() string {
	if w := train.ParamsNonFinite(s.m, s.m.Flat.Value, 0); w != "" {
		return w
	}
	return train.OptimizerNonFinite(s.opt)
}

func (s *ddpStrategy) Load(_ context.Context, path string) (train.Position, error) {
	pos, _, err := train.LoadCheckpoint(path, s.m, s.opt)
	return pos, err
}

func (s *ddpStrategy) Memory() (train.MemoryBytes, int64) {
	return train.MemoryBytes{Params: int64(len(s.m.Flat.Value)) * 4, Grads: int64(len(s.m.Flat.Grad)) * 4, Optimizer: train.OptimizerBytes(s.opt)}, 0
}

func (s *ddpStrategy) Report(_ context.Context, sum *train.Summary) error {
	sum.Overlap = !s.noOverlap
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
