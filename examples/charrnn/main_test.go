package main

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gdist/gdist/examples/internal/kit"
)

// The test binary doubles as the example: with CHARRNN_MAIN=1 it runs
// main, so the launcher's children (re-executions of the same binary)
// are the example too.
func TestMain(m *testing.M) {
	kit.MainIf("CHARRNN_MAIN", main)
	os.Exit(m.Run())
}

const steps, perRank, ranks = 40, 4, 2

// tolerance of a distributed run against the one-process run, relative
// to 1 + |value|: the sums over ranks are rounded in another order.
func tolerance(dtype string) float64 {
	if dtype == "float32" {
		return 1e-5
	}
	return 1e-12
}

func readParams(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(b)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// reference trains on one process at the global batch, without gdist.
func reference(t *testing.T, dtype string) []float64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ref")
	if err := run(context.Background(), config{strategy: "none", dtype: dtype, steps: steps, batch: ranks * perRank, lr: 0.01, out: out}); err != nil {
		t.Fatal(err)
	}
	return readParams(t, out)
}

func same(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", name, len(got), len(want))
	}
	worst, at := 0.0, 0
	for i := range want {
		d := math.Abs(got[i]-want[i]) / (1 + math.Abs(want[i]))
		if !(d <= worst) {
			worst, at = d, i
		}
	}
	if !(worst <= tol) {
		t.Fatalf("%s: parameter %d is %v, the one-process run's %v (relative difference %.3g > %.3g)", name, at, got[at], want[at], worst, tol)
	}
	t.Logf("%s: largest relative difference %.3g (tolerance %.3g)", name, worst, tol)
}

// TestGoroutines: the graph-per-step GRU on 2 ranks x 4 sequences equals
// one process at 8 sequences over 40 steps of RMSProp with clipping, for
// DDP (gorgonia's solver on the averaged gradients) and ZeRO-2 (its rules
// on each rank's shard), in float64 and float32.
func TestGoroutines(t *testing.T) {
	for _, dtype := range []string{"float64", "float32"} {
		want := reference(t, dtype)
		for _, s := range []string{"ddp", "zero2"} {
			out := filepath.Join(t.TempDir(), s)
			cfg := config{strategy: s, backend: "inproc", dtype: dtype, nproc: ranks, steps: steps, batch: perRank, lr: 0.01, out: out}
			if err := run(context.Background(), cfg); err != nil {
				t.Fatalf("%s %s: %v", s, dtype, err)
			}
			same(t, s+" "+dtype, readParams(t, out), want, tolerance(dtype))
		}
	}
}

// TestProcesses: the same equivalence with ranks as processes started by
// the launcher (tcp), float64.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	want := reference(t, "float64")
	out := filepath.Join(t.TempDir(), "p")
	cmd := exec.Command(os.Args[0], "-strategy", "zero2", "-backend", "tcp", "-nproc", "2",
		"-steps", "40", "-batch", "4", "-out", out)
	cmd.Env = append(os.Environ(), "CHARRNN_MAIN=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	same(t, "zero2 float64 over tcp", readParams(t, out), want, tolerance("float64"))
}
