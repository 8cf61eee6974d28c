package pp

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	_ "github.com/gdist/gdist/comm/nccl" // cudafake.NCCLRanks' backend
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/pipeline"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/internal/cliptest"
)

// pipeClipRun trains mlp for steps Adam steps as a device pipeline of k
// stages (one replica) over backend (nccl: the fake's, a GPU per rank;
// inproc: one GPU, staged through pinned memory), clipping to clip: on
// the device inside Update (the strategy built with Config.ClipGrad, a
// train.GradNormLogger: what train.Run does now), or (host) with
// ClipGrads between Step and Update, which reads each stage's norm on
// the host and sums the squares there (what Run did before). It returns
// each rank's whole model after the steps (gathered by Eval) and norms.
func pipeClipRun(t *testing.T, backend string, k int, onDevice bool, steps int, clip float64) (params [][]float32, norms [][]float64) {
	t.Helper()
	return pipeClipRunWith(t, backend, k, k, "1f1b", onDevice, steps, clip)
}

// pipeClipRunWith is pipeClipRun on world ranks: k stages x world/k
// replicas, each replica its own batches (its seed), under schedule.
func pipeClipRunWith(t *testing.T, backend string, k, world int, schedule string, onDevice bool, steps int, clip float64) ([][]float32, [][]float64) {
	t.Helper()
	return cliptest.Ranks(t, backend, world, 3*time.Minute, func(ctx context.Context, c comm.Comm) ([]float32, []float64, error) {
		r := c.Rank()
		cfg := train.Config{Model: "mlp", Epochs: 1, Batch: 6, LR: 0.05, Optimizer: "adam", Strategy: "pipeline",
			Device: "cuda", Backend: backend, World: world, Options: &Options{Stages: k, Microbatches: 2, Schedule: schedule}}
		m, st, err := cliptest.Strategy(ctx, c, cfg, 4, onDevice, clip)
		if err != nil {
			return nil, nil, err
		}
		defer st.Close()
		if _, ok := st.(*devicePipelineStrategy); !ok {
			return nil, nil, fmt.Errorf("rank %d: %T, not the device pipeline", r, st)
		}
		rng := rand.New(rand.NewSource(5 + int64(r/k))) // a replica's own batches
		params, norms, err := cliptest.Train(ctx, st, m, steps, onDevice, clip, func(int) ([]float32, []int32) {
			x, y := make([]float32, cfg.Batch*m.InputSize()), make([]int32, cfg.Batch)
			for j := range x {
				x[j] = 4 * (rng.Float32() - 0.5)
			}
			for j := range y {
				y[j] = int32(rng.Intn(m.Classes()))
			}
			return x, y
		})
		if err != nil || !onDevice {
			return params, norms, err
		}
		last, err := st.(train.UpdateClipper).LastGradNorm()
		if err != nil {
			return nil, nil, err
		}
		if n := norms; len(n) == 0 || math.Float64bits(last) != math.Float64bits(n[len(n)-1]) {
			return nil, nil, fmt.Errorf("rank %d: LastGradNorm %v, the log %v", r, last, n)
		}
		return params, norms, nil
	})
}

// The device pipeline's clipping in Update (the stage's norm squared on
// the device, the squares all-reduced over the stages there, over NCCL
// ordered with the stage's stream by events, through pinned host memory
// over a host backend; the factor float32(max / (norm + 1e-6)) computed
// by a kernel; the norms logged there) is bit for bit the host's path
// (ClipGrads: each stage's norm read, the squares summed on the host,
// Stage.ClipGrads): parameters and norms, at 2 and 3 stages, over the
// fake's NCCL and inproc, with a bound that clips every step.
func TestDevicePipeClipOnDevice(t *testing.T) {
	cudafake.RequireFake(t)
	const steps, clip = 3, 0.05
	for _, backend := range []string{"nccl", "inproc"} {
		for _, k := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", backend, k), func(t *testing.T) {
				hp, hn := pipeClipRun(t, backend, k, false, steps, clip)
				dp, dn := pipeClipRun(t, backend, k, true, steps, clip)
				cliptest.Same(t, hp, dp, hn, dn, steps, clip)
			})
		}
	}
}

// The all-reduce of the norm's square that a device stage's clipping
// leaves on NCCL is tracked with the stage's sends and receives: a Close
// while it is pending (its peer, stage 0, never clips) waits for it,
// bounded (deviceCloseWait), aborts the Comm (ending NCCL's kernel and
// the stage's stream's wait for it) and names it; it then frees the
// stage (the stream done).
func TestDevicePipeCloseClipPending(t *testing.T) {
	cudafake.RequireFake(t)
	defer func(d time.Duration) { deviceCloseWait = d }(deviceCloseWait)
	deviceCloseWait = 200 * time.Millisecond
	const batch, micro = 8, 2
	cs := cudafake.NCCLRanks(t, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ps [2]*devicePipe
	err := commtest.RunRanks(ctx, cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		m, err := models.New("mlp", 3)
		if err != nil {
			return err
		}
		bounds, err := pipeline.Split(ctx, c, m, 2, "params", batch/micro+1)
		if err != nil {
			return err
		}
		p, err := newDevicePipe(ctx, deviceComm(c), m, bounds, micro, "1f1b", batch, 1+c.Rank(),
			devmodel.Config{Optim: optim.Config{Name: "sgd", LR: 0.05}, ClipGrad: 1})
		if err != nil {
			return err
		}
		p.direct = true
		ps[c.Rank()] = p
		return p.connect(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ps[0].Close()
	p := ps[1]
	if err := p.clip(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if len(p.clipOps) != 1 {
		t.Fatalf("%d all-reduces tracked after clip, want 1", len(p.clipOps))
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close with the norm's all-reduce pending did not return within 30s")
	}
	t.Logf("Close: %v", err)
	if err == nil || !strings.Contains(err.Error(), "stage 1") || !strings.Contains(err.Error(), "all-reduce of the gradient norm's square") {
		t.Errorf("Close with the norm's all-reduce pending: %v, want an error naming stage 1 and the all-reduce", err)
	}
	if err != nil && strings.Contains(err.Error(), "not freed") {
		t.Errorf("Close after the abort: %v, want the stage freed (the stream done)", err)
	}
}

// With replicas (2 stages x 2 replicas, each replica its own batches)
// the device's clipping is still bit for bit the host's path, under
// GPipe and 1F1B: the stage's gradients averaged over the replicas
// before its norm, the norm summed over the stages only (counted over
// the replicas too it would be sqrt(2) times the host's), every rank of
// a replica the same norm, and the replicas the same parameters.
func TestDevicePipeClipOnDeviceReplicas(t *testing.T) {
	cudafake.RequireFake(t)
	const steps, clip, k, world = 2, 0.05, 2, 4
	for _, backend := range []string{"nccl", "inproc"} {
		for _, schedule := range []string{"gpipe", "1f1b"} {
			t.Run(backend+"/"+schedule, func(t *testing.T) {
				hp, hn := pipeClipRunWith(t, backend, k, world, schedule, false, steps, clip)
				dp, dn := pipeClipRunWith(t, backend, k, world, schedule, true, steps, clip)
				cliptest.Same(t, hp, dp, hn, dn, steps, clip)
				for r := 1; r < world; r++ { // the replicas agree
					for i := range dn[r] {
						if math.Float64bits(dn[r][i]) != math.Float64bits(dn[0][i]) {
							t.Errorf("rank %d step %d: norm %v, rank 0's %v", r, i, dn[r][i], dn[0][i])
						}
					}
					other := 0
					for j := range dp[r] {
						if math.Float32bits(dp[r][j]) != math.Float32bits(dp[0][j]) {
							other++
						}
					}
					if other > 0 {
						t.Errorf("rank %d: %d of %d parameters differ from rank 0's", r, other, len(dp[r]))
					}
				}
			})
		}
	}
}
