package dp_test

import (
	"context"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/internal/cliptest"
)

// zeroClipRun trains mlp for steps steps with strategy on n ranks of
// backend ("nccl": the fake's NCCL, a GPU per rank; "shm": inproc, the
// strategies' collectives through host memory, the clip's square summed
// there: sumOnHost), clipping to clip: on the device inside Update (the
// strategy built with Config.ClipGrad, a train.GradNormLogger: what
// train.Run does now), or (host) with ClipGrads between Step and Update,
// which reads each rank's shard norm on the host and sums the squares
// there (what Run did before). It returns each rank's parameters after
// the steps (gathered on the host) and the norms.
func zeroClipRun(t *testing.T, backend, strategy string, n int, onDevice bool, steps int, clip float64) (params [][]float32, norms [][]float64) {
	t.Helper()
	return cliptest.Ranks(t, backend, n, 2*time.Minute, func(ctx context.Context, c comm.Comm) ([]float32, []float64, error) {
		r := c.Rank()
		cfg := train.Config{Model: "mlp", Epochs: 1, Batch: 4, LR: 0.1, Optimizer: "adam", Strategy: strategy,
			Device: "cuda", Backend: backend, World: n}
		m, st, err := cliptest.Strategy(ctx, c, cfg, 4, onDevice, clip)
		if err != nil {
			return nil, nil, err
		}
		defer st.Close()
		return cliptest.Train(ctx, st, m, steps, onDevice, clip, func(i int) ([]float32, []int32) {
			return images(r+n*i, 4)
		})
	})
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
			hostP, hostN := zeroClipRun(t, "nccl", strategy, 2, false, steps, clip)
			devP, devN := zeroClipRun(t, "nccl", strategy, 2, true, steps, clip)
			cliptest.Same(t, hostP, devP, hostN, devN, steps, clip)
		})
	}
}
