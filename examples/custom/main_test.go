package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gdist/gdist/examples/internal/kit"
)

func TestMain(m *testing.M) {
	kit.MainIf("CUSTOM_MAIN", main)
	os.Exit(m.Run())
}

const steps, perRank, ranks = 100, 16, 2

// check compares a run's parameters with the one-process run's.
func check(t *testing.T, name string, got, want []float32) {
	t.Helper()
	init, err := newModel(1)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, p := range init.Params {
		sizes = append(sizes, p.Size)
	}
	kit.Same(t, name, got, want, init.Flat.Value, sizes, 1e-5)
}

func reference(t *testing.T, optimizer string) []float32 {
	t.Helper()
	r, err := single(context.Background(), config{strategy: "none", steps: steps, batch: ranks * perRank, lr: lr(optimizer), optimizer: optimizer})
	if err != nil {
		t.Fatal(err)
	}
	return r.params
}

func lr(optimizer string) float64 {
	if optimizer == "adam" {
		return 1e-3
	}
	return 0.1
}

// TestStrategies: the model with the user's Gated layer, 2 ranks x 16 ==
// 1 rank x 32 over 100 SGD steps for DDP and ZeRO stages 1 to 3, and a
// 2-stage pipeline on the whole batch == the one-process run; ranks as
// goroutines.
func TestStrategies(t *testing.T) {
	want := reference(t, "sgd")
	for _, s := range []string{"ddp", "zero1", "zero2", "zero3", "pipeline"} {
		t.Run(s, func(t *testing.T) {
			cfg := config{strategy: s, backend: "inproc", nproc: ranks, steps: steps, batch: perRank, lr: 0.1, optimizer: "sgd"}
			if s == "pipeline" {
				cfg.batch = ranks * perRank
			}
			r, err := runRanks(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			check(t, s, r.params, want)
		})
	}
}

// TestZeRO3Memory: with Adam, ZeRO-3 keeps 16P/N bytes of model state per
// rank (parameters, gradients and both moments, each sharded), within 5%,
// and trains like the one-process run.
func TestZeRO3Memory(t *testing.T) {
	want := reference(t, "adam")
	r, err := runRanks(context.Background(), config{strategy: "zero3", backend: "inproc", nproc: ranks, steps: steps, batch: perRank, lr: 1e-3, optimizer: "adam"})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "zero3/adam", r.params, want)
	p := float64(len(want))
	got := float64(r.mem.Params + r.mem.Grads + r.mem.Optimizer)
	if ideal := 16 * p / ranks; math.Abs(got-ideal) > 0.05*ideal {
		t.Fatalf("model state %v bytes per rank (params %d, grads %d, optimizer %d); 16P/N is %v", got, r.mem.Params, r.mem.Grads, r.mem.Optimizer, ideal)
	}
}

// TestProcesses: ZeRO-3 with ranks as processes (shm) equals the
// one-process run too.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	want := reference(t, "sgd")
	out := filepath.Join(t.TempDir(), "p")
	cmd := exec.Command(os.Args[0], "-strategy", "zero3", "-backend", "shm", "-nproc", "2",
		"-steps", "100", "-batch", "16", "-out", out)
	cmd.Env = append(os.Environ(), "CUSTOM_MAIN=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	check(t, "zero3/shm", kit.Read(t, out), want)
}
