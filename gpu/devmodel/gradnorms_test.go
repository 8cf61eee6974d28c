package devmodel_test

import (
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// Issue 28 follow-up: Update logs its clipping's norm on the device, and
// GradNorms brings the log down at once: the same norms, bit for bit,
// that GradNorm read after each Update (a wait for the device each
// step, which GradNorms spares). The log holds 3 norms here, so 7
// updates fill it twice (read by Update when full) and GradNorms reads
// the last one; the clip bound is low enough that every update clips.
func TestGradNormsLog(t *testing.T) {
	cudafake.RequireCUDA(t)
	defer devmodel.SetNormCap(3)()
	const batch, steps = 4, 7
	m, err := models.New("mlp", 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: batch, Optim: optim.Config{Name: "sgd", LR: 0.1}, ClipGrad: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var want []float64
	for i := 0; i < steps; i++ {
		x, y := devtest.Images(i, batch, 784)
		if _, err := d.Step(x, y); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // GradNorms does not depend on these reads
			n, err := d.GradNorm()
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, n)
		} else {
			want = append(want, -1)
		}
	}
	got, err := d.GradNorms()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != steps {
		t.Fatalf("GradNorms: %d norms after %d updates", len(got), steps)
	}
	for i, n := range got {
		if want[i] >= 0 && n != want[i] {
			t.Errorf("update %d: GradNorms says %v, GradNorm read %v", i, n, want[i])
		}
		if !(n > 0.05) {
			t.Errorf("update %d: norm %v: the test wants every update clipped", i, n)
		}
	}
	again, err := d.GradNorms()
	if err != nil || len(again) != steps {
		t.Fatalf("GradNorms again: %d norms, %v", len(again), err)
	}
	t.Logf("norms %v", got)
}
