package dp_test

import (
	"fmt"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/train/internal/cliptest"
)

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
				hostP, hostN := zeroClipRun(t, "shm", ref, n, refDev, steps, clip)
				devP, devN := zeroClipRun(t, "shm", strategy, n, true, steps, clip)
				cliptest.Same(t, hostP, devP, hostN, devN, steps, clip)
			})
		}
	}
}
