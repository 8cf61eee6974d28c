package train_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/train"
)

// errClose is what a strategy's failed Close says in these tests (as a
// device strategy's does when it aborted a pending collective).
var errClose = errors.New("fake: rank 1: a collective pending on the device was aborted; its buffers were not freed")

// closeFails makes rank 1's strategy fail to close (after closing it)
// for the rest of t.
func closeFails(t *testing.T) {
	*train.TestHookClose = func(rank int, s train.Strategy) error {
		err := s.Close()
		if rank == 1 {
			err = errors.Join(err, errClose)
		}
		return err
	}
	t.Cleanup(func() { *train.TestHookClose = nil })
}

// Issue 28 follow-up: a strategy whose Close fails fails the run, even
// one that ended well: that rank's Run returns the summary with an error
// naming the rank, the strategy and Close's error, saying the run ended
// well and where its checkpoint is; the checkpoint, saved before, is
// whole (it holds the last step). The other rank's run succeeds. Before,
// Run dropped Close's error and every rank returned nil.
func TestRunFailsWhenCloseFails(t *testing.T) {
	closeFails(t)
	cfg := train.Config{Model: "mlp", DataDir: "synthetic", Epochs: 1, Batch: 16, LR: 0.05, Optimizer: "sgd",
		Seed: 3, Limit: 64, Backend: "inproc", Strategy: "ddp", Save: filepath.Join(t.TempDir(), "m.safetensors")}
	cs, err := inproc.New(2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sums, errs := make([]*train.Summary, 2), make([]error, 2)
	err = commtest.RunRanks(context.Background(), cs, 3*time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		sums[c.Rank()], errs[c.Rank()] = train.Run(ctx, c, cfg)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || sums[0] == nil {
		t.Errorf("rank 0, whose strategy closed: %v", errs[0])
	}
	t.Logf("rank 1: %v", errs[1])
	for _, want := range []string{"train: rank 1:", "the run ended well (step 2; its checkpoint at " + cfg.Save + " is complete)", "closing -strategy ddp failed", errClose.Error()} {
		if errs[1] == nil || !strings.Contains(errs[1].Error(), want) {
			t.Errorf("rank 1, whose strategy failed to close: %v, want an error saying %q", errs[1], want)
		}
	}
	if !errors.Is(errs[1], errClose) {
		t.Errorf("rank 1's error %v does not wrap Close's", errs[1])
	}
	if sums[1] == nil || sums[1].Steps != 2 {
		t.Errorf("rank 1's summary: %+v, want the run's (2 steps)", sums[1])
	}
	if _, meta, err := checkpoint.Read(cfg.Save); err != nil || meta["step"] != strconv.Itoa(2) {
		t.Errorf("the checkpoint saved before Close: step %q, %v; want step 2", meta["step"], err)
	}
}

// A run that fails and whose strategy then fails to close returns both
// errors joined, the run's first: here a run cancelled after its first
// step.
func TestRunJoinsCloseError(t *testing.T) {
	closeFails(t)
	cfg := train.Config{Model: "mlp", DataDir: "synthetic", Epochs: 1, Batch: 16, LR: 0.05, Optimizer: "sgd",
		Seed: 3, Limit: 64, Backend: "inproc", Strategy: "ddp"}
	cs, err := inproc.New(2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.AfterStep = func(rank int, step int64) { cancel() }
	errs := make([]error, 2)
	err = commtest.RunRanks(ctx, cs, 3*time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		_, errs[c.Rank()] = train.Run(ctx, c, cfg)
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if !errors.Is(errs[0], context.Canceled) || errors.Is(errs[0], errClose) {
		t.Errorf("rank 0, whose strategy closed: %v, want the cancellation alone", errs[0])
	}
	t.Logf("rank 1: %v", errs[1])
	msg := ""
	if errs[1] != nil {
		msg = errs[1].Error()
	}
	run, closing := strings.Index(msg, context.Canceled.Error()), strings.Index(msg, "train: rank 1: closing -strategy ddp: "+errClose.Error())
	if !errors.Is(errs[1], context.Canceled) || !errors.Is(errs[1], errClose) || run < 0 || closing < run || strings.Contains(msg, "ended well") {
		t.Errorf("rank 1, cancelled and failing to close: %v, want the cancellation, then Close's error naming the rank and the strategy", errs[1])
	}
}
