package nn

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestClosedGraphsAreFreed: closed training graphs and pipeline stages are
// garbage with their activations (pipeline profiling compiles dozens of
// them; each of gpt-large's held 400 MB after Close). gorgonia's global
// constant 1, the seed of every backward pass, points at the last graph
// that used it: one more graph is built before the check.
func TestClosedGraphsAreFreed(t *testing.T) {
	m, err := New("freed", Seq(&Linear{In: 64, Out: 64}, GELU{}, &Linear{In: 64, Out: 3}), []int{64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	x, y := m.Sample(8, 1)
	var freed atomic.Int32
	for i := 0; i < 3; i++ {
		gr, err := m.NewGraph(8, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
		gr.Close()
		runtime.SetFinalizer(gr, func(*Graph) { freed.Add(1) })
		s, err := m.NewStage(1, 3, 8, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Step(make([]float32, s.InSize()), y); err != nil {
			t.Fatal(err)
		}
		s.Close()
		runtime.SetFinalizer(s, func(*StageGraph) { freed.Add(1) })
	}
	last, err := m.NewGraph(8, true)
	if err != nil {
		t.Fatal(err)
	}
	defer last.Close()
	for i := 0; i < 10 && freed.Load() < 6; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := freed.Load(); n != 6 {
		t.Errorf("%d of 6 closed graphs freed", n)
	}
}
