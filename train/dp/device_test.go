package dp_test

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	_ "github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/syncbn"
	"github.com/gdist/gdist/train"
	_ "github.com/gdist/gdist/train/dp"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

// images is a batch of n 28x28 images and labels, a function of (r, i).
func images(r, n int) ([]float32, []int32) {
	x, y := make([]float32, n*784), make([]int32, n)
	for i := range x {
		x[i] = float32((i*7+r*13)%29) / 29
	}
	for i := range y {
		y[i] = int32((i + 3*r) % 10)
	}
	return x, y
}

// Issue 28: -syncbn on the device over NCCL (syncbn.Device) gives its
// device memory and events back at the strategy's Close, not whenever
// the garbage collector runs: after two ranks of cnn-bn trained a step
// with ddp and zero1 and every strategy, syncbn Syncer and Comm was
// closed, the process holds no more CUDA events than before
// (cudafake.LiveEvents, the garbage collector off; the syncbn.Device's
// two per rank were left before).
func TestDeviceCloseFreesSyncBN(t *testing.T) {
	cudafake.RequireFake(t)
	// no garbage collection: what the strategies do not free stays
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, strategy := range []string{"ddp", "zero1"} {
		t.Run(strategy, func(t *testing.T) {
			const ranks, batch = 2, 4
			live := cudafake.LiveEvents(t)
			cs := cudafake.NCCLRanks(t, ranks, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for r, c := range cs {
				wg.Go(func() {
					errs[r] = func() error {
						m, err := models.New("cnn-bn", 4)
						if err != nil {
							return err
						}
						sy, err := syncbn.Convert(ctx, m, c)
						if err != nil {
							return err
						}
						defer sy.Close()
						cfg := train.Config{Model: "cnn-bn", Epochs: 1, Batch: batch, LR: 0.1, Strategy: strategy,
							Device: "cuda", Backend: "nccl", World: ranks, SyncBN: true}
						if err := cfg.Validate(); err != nil {
							return err
						}
						st, err := train.NewStrategy(ctx, c, m, cfg)
						if err != nil {
							return err
						}
						x, y := images(r, batch)
						if _, err := st.Step(ctx, x, y); err != nil {
							st.Close()
							return err
						}
						return st.Close()
					}()
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for _, c := range cs {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
			// the Comms free theirs once their streams are idle
			got := cudafake.LiveEvents(t)
			for end := time.Now().Add(time.Minute); got != live && time.Now().Before(end); got = cudafake.LiveEvents(t) {
				time.Sleep(10 * time.Millisecond)
			}
			if got != live {
				t.Errorf("%d CUDA events alive after the strategies, the Syncers and the Comms were closed, %d before", got, live)
			}
		})
	}
}
