package dp_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/train"
)

// zeroClipRun trains mlp for steps steps with strategy on two ranks of
// the fake NCCL, clipping to clip: on the device inside Update (the
// strategy built with Config.ClipGrad, a train.GradNormLogger: what
// train.Run does now), or (host) with ClipGrads between Step and
// Update, which reads each rank's shard norm on the host and sums the
// squares there (what Run did before). It returns each rank's
// parameters after the steps (gathered on the host) and the norms.
func zeroClipRun(t *testing.T, strategy string, onDevice bool, steps int, clip float64) (params [2][]float32, norms [2][]float64) {
	t.Helper()
	cs := cudafake.NCCLRanks(t, 2, 1)
	err := commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
		r := c.Rank()
		m, err := models.New("mlp", 4)
		if err != nil {
			return err
		}
		cfg := train.Config{Model: "mlp", Epochs: 1, Batch: 4, LR: 0.1, Optimizer: "adam", Strategy: strategy,
			Device: "cuda", Backend: "nccl", World: 2}
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
			x, y := images(r+2*i, 4)
			if _, err := st.Step(ctx, x, y); err != nil {
				return err
			}
			if !onDevice {
				n, err := st.(train.GradClipper).ClipGrads(ctx, clip)
				if err != nil {
					return err
				}
				norms[r] = append(norms[r], n)
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
		return st.Eval(ctx, func() error { // the parameters gathered into the host model
			params[r] = append([]float32(nil), m.Flat.Value...)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return params, norms
}

// Issue 28 follow-up: device ZeRO's clipping keeps the gradient norm on
// the device (the shard's norm squared there, all-reduced over NCCL,
// the factor computed by a kernel: no wait for the device in the step)
// and gives the same bits as the host's sum it replaces: after 4 steps
// of Adam with every step clipped, each rank's parameters and the norms
// equal those of ClipGrads between Step and Update, bit for bit.
func TestDeviceZeroClipOnDevice(t *testing.T) {
	cudafake.RequireFake(t)
	const steps, clip = 4, 0.05
	for _, strategy := range []string{"zero1", "zero2", "zero3"} {
		t.Run(strategy, func(t *testing.T) {
			hostP, hostN := zeroClipRun(t, strategy, false, steps, clip)
			devP, devN := zeroClipRun(t, strategy, true, steps, clip)
			for r := range 2 {
				if len(devN[r]) != steps || len(hostN[r]) != steps {
					t.Fatalf("rank %d: %d norms on the device, %d on the host, want %d", r, len(devN[r]), len(hostN[r]), steps)
				}
				for i := range steps {
					if math.Float64bits(devN[r][i]) != math.Float64bits(hostN[r][i]) || !(hostN[r][i] > clip) {
						t.Errorf("rank %d step %d: norm %v on the device, %v on the host (clip %v: each must clip)", r, i+1, devN[r][i], hostN[r][i], clip)
					}
				}
				diff := 0
				for i := range hostP[r] {
					if math.Float32bits(devP[r][i]) != math.Float32bits(hostP[r][i]) {
						if diff == 0 {
							t.Errorf("rank %d parameter %d: %v clipped on the device, %v on the host", r, i, devP[r][i], hostP[r][i])
						}
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
