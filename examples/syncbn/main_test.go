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
	kit.MainIf("SYNCBN_MAIN", main)
	os.Exit(m.Run())
}

func sizes(t *testing.T) ([]int, []float32) {
	m, err := newCNN(1)
	if err != nil {
		t.Fatal(err)
	}
	var s []int
	for _, p := range m.Params {
		s = append(s, p.Size)
	}
	for _, k := range m.BufferNames() {
		s = append(s, len(m.Buffers()[k]))
	}
	return s, state(m)
}

func train(t *testing.T, cfg config) []float32 {
	t.Helper()
	cfg.out = filepath.Join(t.TempDir(), "state")
	if cfg.steps == 0 {
		cfg.steps, cfg.lr = 30, 0.05
	}
	if err := run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return kit.Read(t, cfg.out)
}

// TestSyncBN: with SyncBatchNorm, 2 ranks x 8 == 1 rank x 16 within 1e-5
// over 30 SGD steps, parameters and running statistics alike, ranks as
// goroutines and as processes (tcp); without it, per-rank statistics make
// the runs differ.
func TestSyncBN(t *testing.T) {
	s, init := sizes(t)
	want := train(t, config{backend: "inproc", nproc: 1, batch: 16, sync: true})
	got := train(t, config{backend: "inproc", nproc: 2, batch: 8, sync: true})
	kit.Same(t, "syncbn/inproc", got, want, init, s, 1e-5)

	plain := train(t, config{backend: "inproc", nproc: 2, batch: 8, sync: false})
	var d float64
	for i := range plain {
		d = math.Max(d, math.Abs(float64(plain[i]-want[i])))
	}
	if d < 1e-3 {
		t.Fatalf("per-rank batch norm matches the whole-batch run (max difference %v): the test cannot tell SyncBN from plain BN", d)
	}

	if testing.Short() {
		return
	}
	out := filepath.Join(t.TempDir(), "p")
	cmd := exec.Command(os.Args[0], "-backend", "tcp", "-nproc", "2", "-batch", "8", "-out", out)
	cmd.Env = append(os.Environ(), "SYNCBN_MAIN=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	kit.Same(t, "syncbn/tcp", kit.Read(t, out), want, init, s, 1e-5)
}
