package devmodel_test

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/optim"
)

// A stage's ClipQueued fills its norms' log (here of 2: SetNormCap) and
// goes on (the full log brought down, one wait): after 5 steps GradNorms
// has the 5 norms GradNorm and ClipGrads give, bit for bit, and so are
// the parameters (mlp, one stage: the sum over the stages its own).
func TestStageClipQueuedLogFull(t *testing.T) {
	cudafake.RequireCUDA(t)
	defer devmodel.SetNormCap(2)()
	const clip, batch = 0.05, 4
	m := zoo(t, "mlp")
	cfg := devmodel.Config{Device: dev, Batch: batch, Optim: optim.Config{Name: "sgd", LR: 0.1}}
	host, err := devmodel.PlaceStage(m, 0, m.NumLayers(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	cfg.ClipGrad = clip
	q, err := devmodel.PlaceStage(m, 0, m.NumLayers(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var want []float64
	for i := 0; i < 5; i++ {
		xs, ys := devtest.Images(i, batch, 784)
		x := devtest.Upload(t, dev, xs)
		for _, s := range []*devmodel.Stage{q, host} {
			if _, err := s.Forward(x, batch); err != nil {
				t.Fatal(err)
			}
			if _, err := s.LossBackward(ys, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.ClipQueued(clip, func(uintptr) error { return nil }); err != nil {
			t.Fatal(err)
		}
		n, err := host.GradNorm()
		if err != nil {
			t.Fatal(err)
		}
		norm := math.Sqrt(n * n)
		if err := host.ClipGrads(norm, clip); err != nil {
			t.Fatal(err)
		}
		want = append(want, norm)
		for _, s := range []*devmodel.Stage{q, host} {
			if err := s.Update(); err != nil {
				t.Fatal(err)
			}
			if err := s.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := q.GradNorms()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d norms, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("norm %d: %v want %v", i, got[i], want[i])
		}
	}
	if err := cuda.DeviceSynchronize(dev); err != nil {
		t.Fatal(err)
	}
	if i, ok := bitsEqual(devtest.Floats(t, dev, q.Params, q.N), devtest.Floats(t, dev, host.Params, host.N)); !ok {
		t.Errorf("param %d differs", i)
	}
}

// A stage with no parameters (mlp's ReLU alone) takes part in the
// clipping over the stages: its square is 0, and it logs the global
// norm the sum gives (the other stages' squares: 16 here, norm 4).
func TestStageClipQueuedNoParams(t *testing.T) {
	cudafake.RequireCUDA(t)
	m := zoo(t, "mlp")
	from := -1
	for i := 0; i < m.NumLayers(); i++ {
		lo, _, _ := m.LayerParamRange(i)
		hi, _, _ := m.LayerParamRange(i + 1)
		if hi == lo {
			from = i
			break
		}
	}
	if from < 0 {
		t.Fatal("mlp has no layer without parameters")
	}
	cfg := devmodel.Config{Device: dev, Batch: 2, Optim: optim.Config{Name: "sgd", LR: 0.1}, ClipGrad: 1}
	s, err := devmodel.PlaceStage(m, from, from+1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.N != 0 {
		t.Fatalf("stage [%d, %d): %d parameters, want 0", from, from+1, s.N)
	}
	err = s.ClipQueued(1, func(sq uintptr) error {
		if err := s.Stream().Synchronize(); err != nil {
			return err
		}
		var z [1]float64
		if err := cuda.CopyDtoH(dev, unsafe.Slice((*byte)(unsafe.Pointer(&z[0])), 8), sq); err != nil {
			return err
		}
		if z[0] != 0 {
			return fmt.Errorf("the stage's square %v, want 0", z[0])
		}
		v := []float64{16}
		if err := cuda.CopyHtoD(dev, sq, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8)); err != nil {
			return err
		}
		return cuda.DeviceSynchronize(dev)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(); err != nil {
		t.Fatal(err)
	}
	got, err := s.GradNorms()
	if err != nil || len(got) != 1 || got[0] != 4 {
		t.Errorf("norms %v, %v; want [4]", got, err)
	}
}

// A stage placed with Config.ClipGrad (the norms' log) holds what
// StageMemoryPlan says, as one placed without.
func TestStageMemoryPlanClipLog(t *testing.T) {
	cudafake.RequireCUDA(t)
	m := zoo(t, "mlp")
	for _, clip := range []float64{0, 1} {
		cfg := devmodel.Config{Device: dev, Batch: 3, Optim: optim.Config{Name: "sgd", LR: 0.1}, ClipGrad: clip}
		want, err := devmodel.StageMemoryPlan(m, 0, 2, 3, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st, err := devmodel.PlaceStage(m, 0, 2, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.PeakBytes(); got != want.Peak {
			t.Errorf("clip %v: PeakBytes %d, plan %d\n%s", clip, got, want.Peak, want)
		}
		st.Close()
	}
}
