package dp_test

import (
	"context"
	"errors"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	_ "github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/internal/hangtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/syncbn"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/dp"
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

// deviceWorld is ranks NCCL ranks on the fake (one GPU each) with the
// device strategy at batch each (newDeviceRanks), and a ctx of 2 minutes
// that ends with t.
func deviceWorld(t *testing.T, ranks int, strategy string, batch int) (context.Context, []comm.Comm, []train.Strategy) {
	t.Helper()
	cs := cudafake.NCCLRanks(t, ranks, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, cs, newDeviceRanks(t, ctx, cs, strategy, batch)
}

// newDeviceRanks builds strategy (ddp, zero1-3) for mlp on n ranks of
// the fake's NCCL, one goroutine each (NewStrategy is collective).
func newDeviceRanks(t *testing.T, ctx context.Context, cs []comm.Comm, strategy string, batch int) []train.Strategy {
	t.Helper()
	sts := make([]train.Strategy, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			m, err := models.New("mlp", 4)
			if err == nil {
				cfg := train.Config{Model: "mlp", Epochs: 1, Batch: batch, LR: 0.1, Strategy: strategy,
					Device: "cuda", Backend: "nccl", World: len(cs)}
				if err = cfg.Validate(); err == nil {
					sts[r], err = train.NewStrategy(ctx, c, m, cfg)
				}
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return sts
}

// Issue 28 follow-up: a device strategy's Close with collectives still
// pending whose peer never comes (rank 1 stepped alone, its gradients'
// all-reduces waiting on the device for rank 0's) does not hang until
// the Comm's timeout (30 minutes by default): it waits DeviceCloseWait
// for them, then aborts the Comm (which ends the kernels, as comm/nccl
// does on a failure) and frees the model, returning an error that names
// the rank and the pending collective; rank 0 learns of the abort at
// its next collective instead of waiting for rank 1. Before, Close
// blocked in the model stream's synchronization (the stream waits for
// the all-reduces) for the Comm's timeout. (ZeRO-2 and 3 cannot be set up
// so: their step itself waits for the peer, within its ctx, the loss
// coming after the units' reductions and gathers.)
func TestDeviceCloseAbortsPendingCollectives(t *testing.T) {
	cudafake.RequireFake(t)
	defer dp.SetDeviceCloseWait(time.Second)()
	for _, strategy := range []string{"ddp", "zero1"} {
		t.Run(strategy, func(t *testing.T) {
			const ranks, batch = 2, 4
			ctx, cs, sts := deviceWorld(t, ranks, strategy, batch)
			freed := cudafake.FreedUses(t)
			x, y := images(1, batch)
			if _, err := sts[1].Step(ctx, x, y); err != nil {
				t.Fatalf("rank 1's step: %v", err)
			}
			err := hangtest.Within(t, 30*time.Second, "rank 1's Close with its collectives pending", sts[1].Close)
			t.Logf("rank 1's Close: %v", err)
			if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "pending") {
				t.Errorf("rank 1's Close: %v, want an error naming rank 1 and the pending collective", err)
			}
			// rank 0 learns that rank 1 aborted, and does not wait for it
			err = hangtest.Within(t, 30*time.Second, "rank 0's all-reduce after rank 1 aborted", func() error {
				v := []float32{1}
				return comm.Run(ctx)(cs[0].AllReduce(ctx, comm.FromSlice(v), comm.Sum))
			})
			if err == nil {
				t.Errorf("rank 0's all-reduce after rank 1 closed with collectives pending succeeded")
			}
			if err := hangtest.Within(t, 30*time.Second, "rank 0's Close", sts[0].Close); err != nil {
				t.Errorf("rank 0's Close (nothing pending): %v", err)
			}
			if n := cudafake.FreedUses(t) - freed; n != 0 {
				t.Errorf("%d uses of freed device memory", n)
			}
		})
	}
}

// A good run's Close waits for the last step's collectives, still
// running on the device (the host never waits for them within a step;
// the fake's NCCL starts each 100 ms late), and returns no error; the
// Comm is not aborted (a collective after it succeeds).
func TestDeviceCloseWaitsForLastStep(t *testing.T) {
	cudafake.RequireFake(t)
	for _, strategy := range []string{"ddp", "zero2", "zero3"} {
		t.Run(strategy, func(t *testing.T) {
			const ranks, batch = 2, 4
			ctx, cs, sts := deviceWorld(t, ranks, strategy, batch)
			freed := cudafake.FreedUses(t)
			cudafake.NCCLDelay(t, 100*time.Millisecond)
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for r := range cs {
				wg.Go(func() {
					x, y := images(r, batch)
					if _, err := sts[r].Step(ctx, x, y); err != nil {
						errs[r] = err
						sts[r].Close()
						return
					}
					if err := sts[r].Update(ctx); err != nil {
						errs[r] = err
						sts[r].Close()
						return
					}
					errs[r] = sts[r].Close()
				})
			}
			wg.Wait()
			cudafake.NCCLDelay(t, 0)
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			if err := commtest.RunRanks(ctx, cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
				v := []float32{1}
				return comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(v), comm.Sum))
			}); err != nil {
				t.Errorf("an all-reduce after the strategies closed: %v (the Comm was aborted?)", err)
			}
			if n := cudafake.FreedUses(t) - freed; n != 0 {
				t.Errorf("%d uses of freed device memory", n)
			}
		})
	}
}

// After a failed step (rank 1's batch has the wrong size), Close aborts
// the Comm before anything else, as the pipeline's step does on an
// error: rank 0, which waits in a collective for rank 1, fails at once
// naming the abort instead of waiting for its timeout (30 minutes by
// default: before, a closed rank's peers waited for it).
func TestDeviceCloseAfterFailedStepAborts(t *testing.T) {
	cudafake.RequireFake(t)
	const ranks, batch = 2, 4
	ctx, cs, sts := deviceWorld(t, ranks, "ddp", batch)
	x, y := images(1, batch)
	if _, err := sts[1].Step(ctx, x[:len(x)-1], y); err == nil {
		t.Fatal("rank 1's step on a short batch succeeded")
	}
	v := []float32{1}
	w, err := cs[0].AllReduce(ctx, comm.FromSlice(v), comm.Sum) // rank 1 never joins
	if err != nil {
		t.Fatal(err)
	}
	if err := hangtest.Within(t, 30*time.Second, "rank 1's Close after its failed step", sts[1].Close); err != nil {
		t.Logf("rank 1's Close: %v", err)
	}
	err = hangtest.Within(t, 30*time.Second, "rank 0's all-reduce", func() error { return w.Wait(ctx) })
	if !errors.Is(err, comm.ErrAborted) {
		t.Errorf("rank 0's all-reduce, rank 1 closed after a failed step: %v, want comm.ErrAborted", err)
	}
	if err := hangtest.Within(t, 30*time.Second, "rank 0's Close", sts[0].Close); err != nil {
		t.Errorf("rank 0's Close: %v", err)
	}
}

// A model's stream that does not finish (its work held by the fake, as a
// kernel waits for a peer that never comes) does not hang Close either:
// it waits DeviceCloseWait, aborts the Comm and waits again, and then
// frees nothing (the held work may still touch the model's memory),
// saying so and naming the rank. Before, Close synchronized the stream
// with no bound.
func TestDeviceCloseLeaksBusyDevice(t *testing.T) {
	cudafake.RequireFake(t)
	if !cuda.HasHostFunc() {
		t.Skip("no cudaLaunchHostFunc")
	}
	defer dp.SetDeviceCloseWait(200 * time.Millisecond)()
	_, _, sts := deviceWorld(t, 1, "ddp", 4)
	st := sts[0]
	s := st.(interface{ Device() *devmodel.Model }).Device().Stream()
	cudafake.Gate(t, false)
	defer cudafake.Gate(t, true)
	if err := s.LaunchHostFunc(cudafake.HoldFunc(t), 0); err != nil {
		t.Fatal(err)
	}
	err := hangtest.Within(t, 30*time.Second, "Close with the model's stream held", st.Close)
	t.Logf("Close: %v", err)
	if err == nil || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "not freed") {
		t.Errorf("Close with the model's stream held: %v, want an error naming rank 0 and saying nothing was freed", err)
	}
	cudafake.Gate(t, true)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
