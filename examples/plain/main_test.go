package main

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The test binary doubles as the example: with PLAIN_MAIN=1 it runs main,
// so the launcher's children (re-executions of the same binary) are the
// example too.
func TestMain(m *testing.M) {
	if os.Getenv("PLAIN_MAIN") == "1" {
		var args []string
		for _, a := range os.Args[1:] {
			if !strings.HasPrefix(a, "-test.") {
				args = append(args, a)
			}
		}
		os.Args = append([]string{os.Args[0]}, args...)
		main()
		os.Exit(0)
	}
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

func readParams(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, len(b)/4)
	for i := range p {
		p[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return p
}

// sameParams: every element within 1e-5 relative (elements much smaller
// than their tensor's typical size are compared at that size: float32
// rounding of the sums is relative to the tensor's scale, not to an
// element that happens to cross zero).
func sameParams(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", name, len(got), len(want))
	}
	off := 0
	for _, n := range []int{features * hidden, hidden, hidden * classes, classes} {
		var rms float64
		for _, v := range want[off : off+n] {
			rms += float64(v) * float64(v)
		}
		rms = math.Sqrt(rms / float64(n))
		for i := off; i < off+n; i++ {
			d := math.Abs(float64(got[i]) - float64(want[i]))
			if d > 1e-5*math.Max(math.Abs(float64(want[i])), rms) {
				t.Fatalf("%s: parameter %d is %v, the one-process run has %v", name, i, got[i], want[i])
			}
		}
		off += n
	}
	// A run that did not train at all would pass nothing above; make sure
	// the parameters moved.
	init, err := newMLP(1, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0.0
	for i, v := range init.params() {
		moved = math.Max(moved, math.Abs(float64(v-want[i])))
	}
	if moved < 1e-2 {
		t.Fatalf("the reference barely trained (max change %v)", moved)
	}
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
