package zero_test

import (
	"context"
	"fmt"
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

// TestPlainDTypes: a plain gorgonia model in float32 and in float64,
// wrapped as a fixed graph (Wrap: tape machine, taps) and as a graph
// built anew every step (WrapValues: a LispMachine, AddGrads), under
// stages 1 and 2 with rmsprop (clip, L2) on 2 ranks x 4 samples, equals
// one process at 8 samples with gorgonia's own RMSPropSolver: within
// 1e-5 in float32, 1e-12 in float64; the model's own tensors hold the
// result on both ranks, bit for bit the same.
func TestPlainDTypes(t *testing.T) {
	const seed, steps, b = 3, 8, 4
	cfg := optim.Config{Name: "rmsprop", LR: 0.01, Clip: 0.5, L2: 1e-3}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, route := range []string{"wrap", "values"} {
			for _, stage := range []int{1, 2} {
				backends := []string{"inproc"}
				if dt == tensor.Float64 {
					backends = append(backends, "shm") // float64 buffers in shared memory
				}
				for _, backend := range backends {
					t.Run(fmt.Sprintf("%v/%s/stage%d/%s", dt, route, stage, backend), func(t *testing.T) {
						depth := plaintest.Depth
						if route == "wrap" {
							depth = func(int) int { return 2 }
						}
						want, err := plaintest.Reference(dt, seed, steps, 2*b, depth,
							G.NewRMSPropSolver(G.WithLearnRate(cfg.LR), G.WithClip(cfg.Clip), G.WithL2Reg(cfg.L2)))
						if err != nil {
							t.Fatal(err)
						}
						got := make([][]*tensor.Dense, 2)
						opts := zero.Options{Stage: stage, Optim: cfg}
						cs := world(t, 2)
						if backend == "shm" {
							cs = shmWorld(t, 2)
						}
						err = commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
							r := c.Rank()
							ps := plaintest.Params(dt, seed+10*r) // the engine broadcasts rank 0's
							got[r] = ps
							if route == "wrap" {
								m, err := plaintest.BuildGrad(dt, ps, b, 2, zero.Tap)
								if err != nil {
									return err
								}
								e, err := zero.Wrap(ctx, c, m.Nodes, opts)
								if err != nil {
									return err
								}
								if backend == "shm" && !e.SharedBuffers() {
									return fmt.Errorf("the buffers are not in shared memory: %v", e.SharedBuffersErr())
								}
								defer e.Close()
								return plaintest.TrainTape(ctx, e, m, dt, steps, r, 2, b, func() error { return e.Step(ctx) })
							}
							e, err := zero.WrapValues(ctx, c, plaintest.Values(ps), opts)
							if err != nil {
								return err
							}
							defer e.Close()
							return plaintest.TrainValues(ctx, e, ps, dt, 0, steps, r, 2, b, false, func() error { return e.Step(ctx) })
						})
						if err != nil {
							t.Fatal(err)
						}
						if err := plaintest.CheckRanks(got, want, dt, b); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
		}
	}
}
