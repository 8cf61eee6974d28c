package train_test

// A strategy in one file, registered from outside package train, with a
// flag of its own: every rank trains the whole model on the whole global
// batch, with no communication at all (N times the work, and the same
// parameters on every rank), and -verify-every N checks every N steps
// that the ranks do hold the same parameters. strategy_test.go tests it
// further. Nothing else in the tree names it: a command would import its
// package for the registration (cmd/train's imports of train/dp and
// train/pp), and AddStrategyFlags gives it the flag.

import (
	"context"
	"flag"
	"fmt"
	"hash/crc32"
	"math"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
)

func init() {
	train.Register("replicated", train.Factory{
		Doc:     "every rank trains alone on every batch (an example)",
		Options: func() train.Options { return &replicatedOptions{} },
		Check: func(cfg *train.Config) (int, error) {
			if cfg.SyncBN {
				return 0, fmt.Errorf("-syncbn: -strategy replicated has no ranks to share batches with")
			}
			if n := cfg.Options.(*replicatedOptions).VerifyEvery; n < 0 {
				return 0, fmt.Errorf("-verify-every %d: want 0 (never) or a number of steps", n)
			}
			return min(cfg.World, 1), nil // one replica, which every rank is
		},
		New: newReplicated,
	})
}

// replicatedOptions are the strategy's own settings.
type replicatedOptions struct {
	VerifyEvery int
}

func (o *replicatedOptions) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.VerifyEvery, "verify-every", o.VerifyEvery, "-strategy replicated: check every this many steps that the ranks hold the same parameters (0: never)")
}

var _ train.Strategy = (*replicated)(nil)

type replicated struct {
	c     comm.Comm
	m     *models.Model
	gr    *models.Graph
	opt   optim.Optimizer
	every int
	steps int
}

func newReplicated(_ context.Context, s train.Setup) (train.Strategy, error) {
	// Every rank built the model from the same seed: nothing to broadcast.
	opt, err := optim.New(s.Config.OptimConfig(), s.Model.NumParams())
	if err != nil {
		return nil, err
	}
	gr, err := s.Model.NewGraph(s.Config.Batch, true)
	if err != nil {
		return nil, err
	}
	every := s.Config.Options.(*replicatedOptions).VerifyEvery
	return &replicated{c: s.Comm, m: s.Model, gr: gr, opt: opt, every: every}, nil
}

// DataRank: one replica, which every rank is.
func (s *replicated) DataRank() (rank, world int) { return 0, 1 }

// Step leaves the gradients in the model's flat gradient buffer (the
// graph's default OnGrad).
func (s *replicated) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	return s.gr.Step(ctx, x, y)
}

// Update steps and, every -verify-every steps, compares the ranks'
// parameters (a checksum each).
func (s *replicated) Update(ctx context.Context) error {
	s.opt.Step(s.m.Flat.Value, s.m.Flat.Grad)
	s.m.ZeroGrad()
	s.steps++
	if s.every == 0 || s.steps%s.every != 0 {
		return nil
	}
	v := s.m.Flat.Value
	sum := crc32.ChecksumIEEE(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)))
	all, err := comm.AllGatherObject(ctx, s.c, sum)
	if err != nil {
		return err
	}
	for r, x := range all {
		if x != all[0] {
			return fmt.Errorf("replicated: after step %d rank %d's parameters differ from rank 0's", s.steps, r)
		}
	}
	return nil
}

func (s *replicated) Eval(_ context.Context, eval func() error) error { return eval() }

// Save: rank 0 writes DDP's files; every rank learns whether it worked.
func (s *replicated) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	return train.SaveFull(ctx, s.c, path, s.m, s.opt, pos, meta)
}

func (s *replicated) Load(_ context.Context, path string) (train.Position, error) {
	pos, _, err := train.LoadCheckpoint(path, s.m, s.opt)
	return pos, err
}

func (s *replicated) Memory() (train.MemoryBytes, int64) {
	return train.MemoryBytes{Params: int64(len(s.m.Flat.Value)) * 4, Grads: int64(len(s.m.Flat.Grad)) * 4, Optimizer: train.OptimizerBytes(s.opt)}, 0
}

// Report: the summary has no field for the checks (a failed one fails
// the run).
func (s *replicated) Report(context.Context, *train.Summary) error { return nil }

func (s *replicated) Close() error { return s.gr.Close() }

// Register a strategy ("replicated", above) with a flag of its own, parse
// a command line as cmd/train does, and train with it: on two ranks it
// reaches exactly the parameters DDP reaches on one (checked every 5
// steps), and the same evaluation within rounding (the test set is split
// over two ranks instead of one: other evaluation batches).
func Example_strategy() {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	strategy := fs.String("strategy", train.DefaultStrategy, "")
	strategyFlags := train.AddStrategyFlags(fs) // every registered strategy's
	if err := fs.Parse([]string{"-strategy", "replicated", "-verify-every", "5"}); err != nil {
		panic(err)
	}
	opts, err := strategyFlags.Options(*strategy)
	if err != nil {
		panic(err)
	}
	run := func(strategy string, opts train.Options, ranks int) float64 {
		cfg := train.Config{Strategy: strategy, Options: opts, Model: "mlp", DataDir: "synthetic", Epochs: 1, Batch: 16,
			LR: 0.05, Optimizer: "sgd", Momentum: 0.9, Seed: 3, Limit: 320}
		cs, err := inproc.New(ranks, comm.Options{})
		if err != nil {
			panic(err)
		}
		losses := make([]float64, ranks)
		err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
			defer c.Close()
			s, err := train.Run(ctx, c, cfg)
			if err == nil {
				losses[c.Rank()] = s.EvalLoss
			}
			return err
		})
		if err != nil {
			panic(err)
		}
		return losses[0]
	}
	a, b := run("replicated", opts, 2), run("ddp", nil, 1)
	fmt.Println(opts.(*replicatedOptions).VerifyEvery, math.Abs(a-b) <= 1e-6*b)
	// Output: 5 true
}
