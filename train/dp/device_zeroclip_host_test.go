package dp_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/train"
)

// zeroClipHostRun is zeroClipRun over a host backend (inproc: the
// strategies' collectives through host memory, the clip's square summed
// there: sumOnHost) on n ranks.
func zeroClipHostRun(t *testing.T, strategy string, n int, onDevice bool, steps int, clip float64) (params [][]float32, norms [][]float64) {
	t.Helper()
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	params, norms = make([][]float32, n), make([][]float64, n)
	err = commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
		r := c.Rank()
		m, err := models.New("mlp", 4)
		if err != nil {
			return err
		}
		cfg := train.Config{Model: "mlp", Epochs: 1, Batch: 4, LR: 0.1, Optimizer: "adam", Strategy: strategy,
			Device: "cuda", Backend: "shm", World: n}
		if onDevice {
			cfg.ClipGrad = clip
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		st, err := train.NewStrategy(ctx, c, m, cfg)
		if err != nil {
			return err
		}
		defer st.Close()
		for i := 0; i < steps; i++ {
			x, y := images(r+n*i, 4)
			if _, err := st.Step(ctx, x, y); err != nil {
				return err
			}
			if !onDevice {
				g, err := st.(train.GradClipper).ClipGrads(ctx, clip)
				if err != nil {
					return err
				}
				norms[r] = append(norms[r], g)
			}
			if err := st.Update(ctx); err != nil {
				return err
			}
		}
		if onDevice {
			nl, ok := st.(train.GradNormLogger)
			if !ok {
				return fmt.Errorf("%s on the device with -clip-grad is no train.GradNormLogger", strategy)
			}
			if norms[r], err = nl.GradNorms(); err != nil {
				return err
			}
		}
		return st.Eval(ctx, func() error {
			params[r] = append([]float32(nil), m.Flat.Value...)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return params, norms
}

// Device ZeRO's clipping in Update through a host backend (-backend
// shm: the square of the shard's norm comes down, is summed over the
// ranks on the host and goes back up, sumOnHost) gives the bits of
// ClipGrads between Step and Update at 2 ranks, and at 1 rank (no sum)
// those of ddp's own clipping in Update: parameters and norms after 4
// clipped Adam steps. TestDeviceZeroClipOnDevice checks the NCCL path
// only.
func TestDeviceZeroClipOnDeviceHostBackend(t *testing.T) {
	cudafake.RequireFake(t)
	const steps, clip = 4, 0.05
	for _, n := range []int{1, 2} {
		for _, strategy := range []string{"zero1", "zero3"} {
			t.Run(fmt.Sprintf("%s/%d", strategy, n), func(t *testing.T) {
				// at 1 rank the reference is ddp's own clipping in Update
				ref, refDev := strategy, false
				if n == 1 {
					ref, refDev = "ddp", true
				}
				hostP, hostN := zeroClipHostRun(t, ref, n, refDev, steps, clip)
				devP, devN := zeroClipHostRun(t, strategy, n, true, steps, clip)
				for r := range n {
					if len(devN[r]) != steps || len(hostN[r]) != steps {
						t.Fatalf("rank %d: %d norms on the device, %d on the host, want %d", r, len(devN[r]), len(hostN[r]), steps)
					}
					for i := range steps {
						if math.Float64bits(devN[r][i]) != math.Float64bits(hostN[r][i]) || !(hostN[r][i] > clip) {
							t.Errorf("rank %d step %d: norm %v on the device, %v on the host", r, i+1, devN[r][i], hostN[r][i])
						}
					}
					diff := 0
					for i := range hostP[r] {
						if math.Float32bits(devP[r][i]) != math.Float32bits(hostP[r][i]) {
							diff++
						}
					}
					if diff > 0 {
						t.Errorf("rank %d: %d of %d parameters differ", r, diff, len(hostP[r]))
					}
				}
			})
		}
	}
}
