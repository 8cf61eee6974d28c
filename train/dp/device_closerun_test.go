package dp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/internal/hangtest"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/dp"
)

// Issue 28 follow-up, on the device path: a run whose device fails (a
// sticky error after its last step, as a kernel fault leaves) fails, and
// the device DDP's Close, which then fails too (it cannot use the
// device), is in train.Run's error after the run's own, naming the rank
// and the strategy. Before, Run dropped Close's error.
func TestDeviceRunJoinsCloseError(t *testing.T) {
	cudafake.RequireFake(t)
	defer dp.SetDeviceCloseWait(200 * time.Millisecond)()
	live := cudafake.LiveEvents(t)
	t.Run("sticky", func(t *testing.T) { // its end repairs the device and closes the Comm
		cs := cudafake.NCCLRanks(t, 1, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cfg := train.Config{Model: "mlp", DataDir: "synthetic", Epochs: 1, Batch: 8, Limit: 16, LR: 0.1, Optimizer: "sgd",
			Seed: 3, Strategy: "ddp", Device: "cuda", Backend: "nccl"}
		cfg.AfterStep = func(rank int, step int64) {
			if step == 2 {
				cudafake.StickyError(t, 0)
			}
		}
		err := hangtest.Within(t, time.Minute, "a run whose device fails", func() error {
			_, err := train.Run(ctx, cs[0], cfg)
			return err
		})
		t.Logf("Run: %v", err)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		closing := strings.Index(msg, "train: rank 0: closing -strategy ddp: ")
		if closing <= 0 || !strings.Contains(msg[closing:], "the device") || strings.Contains(msg, "ended well") {
			t.Errorf("a run whose device failed after its last step: %v, want the run's error, then the device DDP's Close's naming rank 0, the strategy and the device", err)
		}
	})
	// The Comm frees its events once its stream is idle: leave none for
	// the tests that count them (TestDeviceCloseFreesSyncBN).
	got := cudafake.LiveEvents(t)
	for end := time.Now().Add(time.Minute); got > live && time.Now().Before(end); got = cudafake.LiveEvents(t) {
		time.Sleep(10 * time.Millisecond)
	}
	if got > live {
		t.Logf("%d CUDA events alive after the run, %d before", got, live)
	}
}
