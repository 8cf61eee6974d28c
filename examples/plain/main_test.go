package main

import (
	"context"
	"github.com/gdist/gdist/examples/internal/kit"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The test binary doubles as the example: with PLAIN_MAIN=1 it runs main,
// so the launcher's children (re-executions of the same binary) are the
// example too.
func TestMain(m *testing.M) {
	kit.MainIf("PLAIN_MAIN", main)
	os.Exit(m.Run())
}

const steps, perRank, ranks = 200, 16, 2

// reference trains the plain gorgonia model on one process at the global
// batch (ranks x perRank), without gdist.
func reference(t *testing.T) []float32 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ref")
	if err := run(context.Background(), config{strategy: "none", steps: steps, batch: ranks * perRank, lr: 0.1, out: out}); err != nil {
		t.Fatal(err)
	}
	return readParams(t, out)
}

func readParams(t *testing.T, path string) []float32 { return kit.Read(t, path) }

// sameParams: every element within 1e-5 relative (see kit.Same).
func sameParams(t *testing.T, name string, got, want []float32) {
	t.Helper()
	init, err := newMLP(1, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kit.Same(t, name, got, want, init.params(), []int{features * hidden, hidden, hidden * classes, classes}, 1e-5)
}

// TestGoroutines: 2 ranks x 16 == 1 rank x 32 over 200 SGD steps, ranks
// as goroutines, for DDP, ZeRO-1 and ZeRO-2, with and without taps. The
// first runs come before anything else in the process built a graph, so
// under -race they check that concurrent graph building (flat.Build) is
// safe while gorgonia's global constants are still cold.
func TestGoroutines(t *testing.T) {
	dir := t.TempDir()
	var names []string
	for _, s := range []string{"ddp", "zero1", "zero2"} {
		for _, tap := range []bool{false, true} {
			name := s
			if tap {
				name += "+tap"
			}
			cfg := config{strategy: s, backend: "inproc", nproc: ranks, steps: steps, batch: perRank, lr: 0.1, tap: tap, out: filepath.Join(dir, name)}
			if err := run(context.Background(), cfg); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			names = append(names, name)
		}
	}
	want := reference(t)
	for _, name := range names {
		sameParams(t, name, readParams(t, filepath.Join(dir, name)), want)
	}
}

// TestProcesses: the same equivalence with ranks as processes started by
// the launcher (tcp and shm).
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	want := reference(t)
	for _, c := range []struct{ strategy, backend string }{{"ddp", "tcp"}, {"zero1", "shm"}, {"zero2", "tcp"}} {
		t.Run(c.strategy+"/"+c.backend, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "p")
			cmd := exec.Command(os.Args[0], "-strategy", c.strategy, "-backend", c.backend, "-nproc", "2",
				"-steps", "200", "-batch", "16", "-tap", "-out", out)
			cmd.Env = append(os.Environ(), "PLAIN_MAIN=1")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			sameParams(t, c.strategy, readParams(t, out), want)
		})
	}
}
