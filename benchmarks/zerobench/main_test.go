package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMovedMatchesPaper: what rank 0 moves per step on shared memory (the
// default backend on one host: its collectives on shared buffers are
// zero-copy, so they send almost nothing) is the ZeRO paper's volume
// within 5% for ddp, zero2 and zero3 at 2 and 4 ranks, all of it by shm;
// stage 3 less the first Linear's backward gather, which it skips. Runs
// train as processes on the small mlp (a few seconds each).
func TestMovedMatchesPaper(t *testing.T) {
	if testing.Short() {
		t.Skip("runs train 6 times")
	}
	bin := filepath.Join(t.TempDir(), "train")
	build := exec.Command("go", "build", "-o", bin, "./cmd/train")
	build.Dir = "../.."
	if o, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building train: %v\n%s", err, o)
	}
	os.Setenv("GDIST_SHM_DIR", t.TempDir())
	const first = 784*256 + 256 // the mlp's first Linear
	for _, w := range []int{2, 4} {
		for _, st := range []string{"ddp", "zero2", "zero3"} {
			r, err := once(bin, "mlp", st, w, 16, 4)
			if err != nil {
				t.Fatalf("%s at %d ranks: %v", st, w, err)
			}
			p, n := float64(r.NumParams), float64(w)
			want := commFormula(st, p, n)
			if st == "zero3" {
				want -= first * 4 * (n - 1) / n
			}
			if d := r.CommPerStep/want - 1; d < -0.05 || d > 0.05 {
				t.Errorf("%s at %d ranks: moved %.0f bytes per step, want %.0f (within 5%%)", st, w, r.CommPerStep, want)
			}
			if len(r.CommBy) != 1 || r.CommBy["shm"] != r.CommPerStep {
				t.Errorf("%s at %d ranks: moved by transport %v, want all by shm", st, w, r.CommBy)
			}
		}
	}
}
