package devmodel_test

import (
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/optim"
)

// TestPlanAfterFailedGrowth: a step at a larger batch whose training
// plan cannot get its region (out of memory: the smaller plan's region
// is freed first) fails, naming the bytes; the model then steps and
// evaluates at the old batch as a model that never tried (the same
// bits), using no freed memory: the old plan, whose region is gone, is
// not run again, nor do forward-only plans borrow it (a batch-size
// search that backs off after an out-of-memory error did both).
func TestPlanAfterFailedGrowth(t *testing.T) {
	cudafake.RequireFake(t)
	cfg := devmodel.Config{Device: dev, Batch: 4, Optim: optim.Config{Name: "sgd", LR: 0.03}}
	x, y := devtest.Images(1, 16, 784)
	ex, ey := devtest.Images(2, 6, 784)
	tried, err := devmodel.Place(zoo(t, "mlp"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tried.Close()
	ref, err := devmodel.Place(zoo(t, "mlp"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, d := range []*devmodel.Model{tried, ref} {
		if _, err := d.Step(x[:4*784], y[:4]); err != nil {
			t.Fatal(err)
		}
	}
	freed := cudafake.FreedUses(t)
	cudafake.MemLimit(t, 1) // every cudaMalloc fails
	if _, err := tried.Step(x, y); err == nil {
		t.Fatal("a step at batch 16 with no memory to plan it: no error")
	} else {
		t.Logf("batch 16: %v", err)
	}
	cudafake.MemLimit(t, 0) // lifted
	for i := 0; i < 2; i++ {
		lt, err := tried.Step(x[:4*784], y[:4])
		if err != nil {
			t.Fatalf("a step at batch 4 after the failed one: %v", err)
		}
		lr, err := ref.Step(x[:4*784], y[:4])
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(lt) != math.Float32bits(lr) {
			t.Fatalf("step %d at batch 4 after the failed one: loss %v; without it %v", i, lt, lr)
		}
		et, ct, err := tried.Eval(ex, ey)
		if err != nil {
			t.Fatalf("Eval after the failed step: %v", err)
		}
		er, cr, err := ref.Eval(ex, ey)
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(et) != math.Float32bits(er) || ct != cr {
			t.Fatalf("Eval after the failed step: %v (%d correct); without it %v (%d)", et, ct, er, cr)
		}
	}
	if n := cudafake.FreedUses(t) - freed; n != 0 {
		t.Fatalf("%d calls used freed device memory after the failed step", n)
	}
}
