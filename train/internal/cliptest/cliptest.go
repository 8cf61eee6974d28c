// Package cliptest holds what train/dp's and train/pp's tests of the
// clipping on the device share: a rank's training loop that clips on the
// host (train.GradClipper's ClipGrads between Step and Update, what
// train.Run did before) or on the device (a strategy built with
// Config.ClipGrad, a train.GradNormLogger: what train.Run does now), and
// the check that both give the same norms and parameters, bit for bit.
// Only tests import it.
package cliptest

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	_ "github.com/gdist/gdist/comm/nccl" // cudafake.NCCLRanks' backend
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/train"
)

// Ranks runs rank on n ranks of backend ("nccl": the fake's NCCL, rank
// r on device 1+r, cudafake.NCCLRanks(t, n, 1); any other: inproc,
// through host memory), within d, and returns what each rank returned:
// its parameters and norms (Train's). t fails with a rank's error.
func Ranks(t *testing.T, backend string, n int, d time.Duration,
	rank func(ctx context.Context, c comm.Comm) (params []float32, norms []float64, err error)) ([][]float32, [][]float64) {
	t.Helper()
	var cs []comm.Comm
	if backend == "nccl" {
		cs = cudafake.NCCLRanks(t, n, 1)
	} else {
		var err error
		if cs, err = inproc.New(n, comm.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	params, norms := make([][]float32, n), make([][]float64, n)
	err := commtest.RunRanks(context.Background(), cs, d, func(ctx context.Context, c comm.Comm) error {
		var err error
		params[c.Rank()], norms[c.Rank()], err = rank(ctx, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return params, norms
}

// Strategy makes a rank's model (models.New(cfg.Model, seed)) and its
// strategy by cfg, with cfg.ClipGrad = clip when onDevice (the clipping
// inside Update), none otherwise (Train clips on the host); the caller
// closes the strategy.
func Strategy(ctx context.Context, c comm.Comm, cfg train.Config, seed int64, onDevice bool, clip float64) (*models.Model, train.Strategy, error) {
	m, err := models.New(cfg.Model, seed)
	if err != nil {
		return nil, nil, err
	}
	if onDevice {
		cfg.ClipGrad = clip
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	st, err := train.NewStrategy(ctx, c, m, cfg)
	if err != nil {
		return nil, nil, err
	}
	return m, st, nil
}

// Train runs steps steps of st on this rank's batches (batch(i) for step
// i), clipping to clip: on the host with ClipGrads between Step and
// Update when onDevice is false, or (onDevice: st built with
// Config.ClipGrad = clip) inside Update, the norms then read from the
// strategy's train.GradNormLogger. It returns the norms, one a step, and
// m's parameters after the steps (gathered into the host model by Eval).
func Train(ctx context.Context, st train.Strategy, m *models.Model, steps int, onDevice bool, clip float64,
	batch func(i int) (x []float32, y []int32)) (params []float32, norms []float64, err error) {
	for i := 0; i < steps; i++ {
		x, y := batch(i)
		if _, err := st.Step(ctx, x, y); err != nil {
			return nil, nil, err
		}
		if !onDevice {
			n, err := st.(train.GradClipper).ClipGrads(ctx, clip)
			if err != nil {
				return nil, nil, err
			}
			norms = append(norms, n)
		}
		if err := st.Update(ctx); err != nil {
			return nil, nil, err
		}
	}
	if onDevice {
		nl, ok := st.(train.GradNormLogger)
		if !ok {
			return nil, nil, fmt.Errorf("%T on the device with -clip-grad is no train.GradNormLogger", st)
		}
		if norms, err = nl.GradNorms(); err != nil {
			return nil, nil, err
		}
	}
	err = st.Eval(ctx, func() error { // the parameters gathered into the host model
		params = append([]float32(nil), m.Flat.Value...)
		return nil
	})
	return params, norms, err
}

// Same checks, on every rank, that the norms of the clipping on the
// device (devN) are steps norms, those on the host (hostN), bit for bit,
// each above clip (every step clips), and that the parameters (devP,
// hostP) are the same bits.
func Same(t *testing.T, hostP, devP [][]float32, hostN, devN [][]float64, steps int, clip float64) {
	t.Helper()
	for r := range hostP {
		if len(devN[r]) != steps || len(hostN[r]) != steps {
			t.Fatalf("rank %d: %d norms on the device, %d on the host, want %d", r, len(devN[r]), len(hostN[r]), steps)
		}
		for i := range steps {
			if math.Float64bits(devN[r][i]) != math.Float64bits(hostN[r][i]) {
				t.Errorf("rank %d step %d: norm %v on the device, %v on the host", r, i+1, devN[r][i], hostN[r][i])
			}
			if !(hostN[r][i] > clip) {
				t.Errorf("rank %d step %d: norm %v does not clip at %v (each step must clip)", r, i+1, hostN[r][i], clip)
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
			t.Errorf("rank %d: %d of %d parameters differ from the host's clipping", r, diff, len(hostP[r]))
		}
	}
}
