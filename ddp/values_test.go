package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/internal/plaintest"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func rmsprop() G.Solver {
	return G.NewRMSPropSolver(G.WithLearnRate(0.01), G.WithClip(0.5), G.WithL2Reg(1e-3))
}

// TestPlainDTypes: a plain gorgonia model in float32 and in float64,
// wrapped as a fixed graph (Wrap: tape machine, taps) and as a graph
// built anew every step (WrapValues: a LispMachine or a tape machine,
// AddGrads, the recurrence unrolled to each step's depth), trained with gorgonia's
// RMSProp (clip, L2) on 2 ranks x 4 samples, equals one process at 8
// samples: within 1e-5 in float32, 1e-12 in float64; both ranks hold the
// same parameters bit for bit.
func TestPlainDTypes(t *testing.T) {
	const seed, steps, b = 3, 8, 4
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, route := range []string{"wrap", "values"} {
			backends := []string{"inproc"}
			if dt == tensor.Float64 {
				backends = append(backends, "shm") // float64 gradients in shared memory
			}
			for _, backend := range backends {
				t.Run(fmt.Sprintf("%v/%s/%s", dt, route, backend), func(t *testing.T) {
					depth := plaintest.Depth
					if route == "wrap" {
						depth = func(int) int { return 2 }
					}
					want, err := plaintest.Reference(dt, seed, steps, 2*b, depth, rmsprop())
					if err != nil {
						t.Fatal(err)
					}
					got := make([][]*tensor.Dense, 2)
					cs := inprocWorld(t, 2)
					if backend == "shm" {
						cs = shmWorld(t, 2)
					}
					err = commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
						r := c.Rank()
						ps := plaintest.Params(dt, seed+10*r) // DDP broadcasts rank 0's
						got[r] = ps
						solver := rmsprop()
						if route == "wrap" {
							m, err := plaintest.BuildGrad(dt, ps, b, 2, ddp.Tap)
							if err != nil {
								return err
							}
							d, err := ddp.Wrap(ctx, c, m.Nodes, ddp.Options{})
							if err != nil {
								return err
							}
							if backend == "shm" && !d.SharedGrads() {
								return fmt.Errorf("the gradients are not in shared memory: %v", d.SharedGradsErr())
							}
							return plaintest.TrainTape(ctx, d, m, dt, steps, r, 2, b, func() error {
								return solver.Step(G.NodesToValueGrads(m.Nodes))
							})
						}
						d, err := ddp.WrapValues(ctx, c, plaintest.Values(ps), ddp.Options{})
						if err != nil {
							return err
						}
						// Odd steps run a tape machine (gorgonia.Grad, dual
						// values), even ones a LispMachine: AddGrads takes both.
						return plaintest.TrainValues(ctx, d, ps, dt, 0, steps, r, 2, b, true, func() error {
							return solver.Step(d.ValueGrads())
						})
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

// TestMixedDTypes: float32 learnables on one rank and float64 on another
// fail on every rank before any buffer is mixed, naming the ranks.
func TestMixedDTypes(t *testing.T) {
	err := commtest.RunRanks(context.Background(), inprocWorld(t, 2), time.Minute, func(ctx context.Context, c comm.Comm) error {
		dt := tensor.Float32
		if c.Rank() == 1 {
			dt = tensor.Float64
		}
		_, err := ddp.WrapValues(ctx, c, plaintest.Values(plaintest.Params(dt, 1)), ddp.Options{})
		if err == nil || !strings.Contains(err.Error(), "rank 1 has \"float64 ") {
			return fmt.Errorf("got %v, want an error naming rank 1's float64", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFloat64Hooks: the fp16/bf16 hooks take float32 gradients: with
// float64 learnables Wrap says so, naming the hook.
func TestFloat64Hooks(t *testing.T) {
	err := commtest.RunRanks(context.Background(), inprocWorld(t, 1), time.Minute, func(ctx context.Context, c comm.Comm) error {
		_, err := ddp.WrapValues(ctx, c, plaintest.Values(plaintest.Params(tensor.Float64, 1)), ddp.Options{Hook: ddp.FP16Compress{}})
		if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), `hook "fp16" takes float32 gradients only`) {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
