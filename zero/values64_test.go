package zero_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/internal/plaintest"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// stepsOn trains steps [from, to) of a graph-per-step model wrapped with
// WrapValues, at global batch gb split over the ranks of e.
func stepsOn(ctx context.Context, e *zero.Engine, c comm.Comm, ps []*tensor.Dense, gb, from, to int) error {
	return plaintest.TrainValues(ctx, e, ps, tensor.Float64, from, to, c.Rank(), c.Size(), gb/c.Size(), false, func() error { return e.Step(ctx) })
}

// TestFloat64Checkpoint: float64 learnables under ZeRO-2 on 2 ranks save
// F64 shards (parameters and rmsprop's state); one rank reads them back
// (Params64, OptState64), loads them and trains on: the result equals an
// uninterrupted one-process run within 1e-12.
func TestFloat64Checkpoint(t *testing.T) {
	const seed, gb = 5, 8
	cfg := optim.Config{Name: "rmsprop", LR: 0.01, Clip: 0.5, L2: 1e-3}
	want, err := plaintest.Reference(tensor.Float64, seed, 8, gb, plaintest.Depth,
		G.NewRMSPropSolver(G.WithLearnRate(cfg.LR), G.WithClip(cfg.Clip), G.WithL2Reg(cfg.L2)))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.safetensors")
	err = commtest.RunRanks(context.Background(), world(t, 2), 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
		ps := plaintest.Params(tensor.Float64, seed)
		e, err := zero.WrapValues(ctx, c, plaintest.Values(ps), zero.Options{Stage: 2, Optim: cfg})
		if err != nil {
			return err
		}
		defer e.Close()
		if err := stepsOn(ctx, e, c, ps, gb, 0, 4); err != nil {
			return err
		}
		write, err := e.SnapshotShard(ctx, path, map[string]string{"model": "plaintest"}, nil, nil)
		if err != nil {
			return err
		}
		return write()
	})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := zero.ReadShards(path, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if sh.Params != nil || len(sh.Params64) != sh.NumParams || len(sh.OptState64["square_avg"]) != sh.NumParams || sh.OptStep != 4 {
		t.Fatalf("read back: %d float32 and %d float64 parameters, float64 state %v, step %d", len(sh.Params), len(sh.Params64), len(sh.OptState64), sh.OptStep)
	}
	var got []*tensor.Dense
	err = commtest.RunRanks(context.Background(), world(t, 1), 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
		ps := plaintest.Params(tensor.Float64, seed+1) // replaced by the checkpoint
		got = ps
		e, err := zero.WrapValues(ctx, c, plaintest.Values(ps), zero.Options{Stage: 1, Optim: cfg})
		if err != nil {
			return err
		}
		if err := e.LoadParams(make([]float32, sh.NumParams)); err == nil {
			t.Error("LoadParams of float32 values into float64 learnables: no error")
		}
		if err := e.LoadParams64(sh.Params64); err != nil {
			return err
		}
		if err := e.LoadOptimizerState64(sh.OptState64, sh.OptStep); err != nil {
			return err
		}
		return stepsOn(ctx, e, c, ps, gb, 4, 8)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := plaintest.Compare(got, want, 1e-12); err != nil {
		t.Fatalf("saved by 2 ranks at step 4, resumed on 1: %v", err)
	}
}
