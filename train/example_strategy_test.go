package train_test

// A strategy in one file, registered from outside package train: every
// rank trains the whole model on the whole global batch, with no
// communication at all (N times the work, and the same parameters on
// every rank). strategy_test.go tests it further.

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
)

func init() {
	train.Register("replicated", train.Factory{
		New: newReplicated,
		Check: func(cfg *train.Config) error {
			if cfg.SyncBN {
				return fmt.Errorf("-syncbn: -strategy replicated has no ranks to share batches with")
			}
			return nil
		},
		Doc: "every rank trains alone on every batch (an example)",
	})
}

var _ train.Strategy = (*replicated)(nil)

type replicated struct {
	c   comm.Comm
	m   *models.Model
	gr  *models.Graph
	opt optim.Optimizer
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
	return &replicated{c: s.Comm, m: s.Model, gr: gr, opt: opt}, nil
}

// DataRank: one replica, which every rank is.
func (s *replicated) DataRank() (rank, world int) { return 0, 1 }

// Step leaves the gradients in the model's flat gradient buffer (the
// graph's default OnGrad).
func (s *replicated) Step(ctx context.Context, x []float32, y []int32) (float32, error) {
	return s.gr.Step(ctx, x, y)
}

func (s *replicated) Update(context.Context) error {
	s.opt.Step(s.m.Flat.Value, s.m.Flat.Grad)
	s.m.ZeroGrad()
	return nil
}

func (s *replicated) Eval(_ context.Context, eval func() error) error { return eval() }

// Save: rank 0 writes DDP's files; every rank learns whether it worked.
func (s *replicated) Save(ctx context.Context, path string, pos train.Position, meta map[string]string) error {
	msg := ""
	if s.c.Rank() == 0 {
		if err := train.Save(path, s.m, s.opt, pos, meta); err != nil {
			msg = err.Error()
		}
	}
	if err := comm.BroadcastObject(ctx, s.c, &msg, 0); err != nil {
		return err
	}
	if msg != "" {
		return fmt.Errorf("replicated: rank 0 failed to save: %s", msg)
	}
	return nil
}

func (s *replicated) Load(_ context.Context, path string) (train.Position, error) {
	pos, _, err := train.LoadCheckpoint(path, s.m, s.opt)
	return pos, err
}

func (s *replicated) Memory() (train.MemoryBytes, int64) {
	st, _ := s.opt.State()
	var ob int64
	for _, v := range st {
		ob += int64(len(v)) * 4
	}
	return train.MemoryBytes{Params: int64(len(s.m.Flat.Value)) * 4, Grads: int64(len(s.m.Flat.Grad)) * 4, Optimizer: ob}, 0
}

func (s *replicated) Report(context.Context, *train.Summary) error { return nil }

func (s *replicated) Close() error { return s.gr.Close() }

// Register a strategy ("replicated", above) and train with it: on two
// ranks it reaches exactly the parameters DDP reaches on one, and the
// same evaluation within rounding (the test set is split over two ranks
// instead of one: other evaluation batches).
func Example_strategy() {
	run := func(strategy string, ranks int) float64 {
		cfg := train.Config{Strategy: strategy, Model: "mlp", DataDir: "synthetic", Epochs: 1, Batch: 16,
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
	a, b := run("replicated", 2), run("ddp", 1)
	fmt.Println(math.Abs(a-b) <= 1e-6*b)
	// Output: true
}
