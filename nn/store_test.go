package nn

import (
	"context"
	"github.com/gdist/gdist/flat"
	"math"
	"testing"
)

// memStore serves parameters from a copy of Flat and collects gradients,
// counting fetches and what is out at once.
type memStore struct {
	m        *Model
	flat     []float32
	grad     []float32
	out, max int
	fetches  int
}

func (s *memStore) Fetch(idx []int, backward bool) ([][]float32, error) {
	vals := make([][]float32, len(idx))
	for k, i := range idx {
		p := s.m.Params[i]
		vals[k] = append([]float32(nil), s.flat[p.Offset:p.Offset+p.Size]...)
		s.out += p.Size
	}
	s.max = max(s.max, s.out)
	s.fetches++
	return vals, nil
}

func (s *memStore) Release(idx []int) {
	for _, i := range idx {
		s.out -= s.m.Params[i].Size
	}
}

func (s *memStore) AddGrad(i int, g []float32) error {
	p := s.m.Params[i]
	flat.AddTo(s.grad[p.Offset:p.Offset+p.Size], g)
	return nil
}

// TestStoreMode: graphs built over a ParamStore compute the same loss,
// gradients and evaluation outputs as graphs over Flat, and never hold
// more than one layer's parameters out at once.
func TestStoreMode(t *testing.T) {
	for _, name := range []string{"mlp", "cnn", "cnn-bn", "seq"} {
		t.Run(name, func(t *testing.T) {
			ref, _ := newZoo(name, 5)
			gr, _ := ref.NewGraph(3, true)
			x, y := testBatch(ref, 3)
			want, err := gr.Step(context.Background(), x, y)
			if err != nil {
				t.Fatal(err)
			}

			m, _ := newZoo(name, 5)
			st := &memStore{m: m, flat: append([]float32(nil), m.Flat.Value...), grad: make([]float32, len(m.Flat.Value))}
			m.Store = st
			sg, err := m.NewGraph(3, true)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sg.Step(context.Background(), x, y)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(float64(got-want)) > 1e-6*math.Abs(float64(want)) {
				t.Fatalf("loss %v, want %v", got, want)
			}
			for i := range st.grad {
				if math.Abs(float64(st.grad[i]-ref.Flat.Grad[i])) > 1e-4*math.Max(1e-3, math.Abs(float64(ref.Flat.Grad[i]))) {
					t.Fatalf("gradient %d: %v, want %v", i, st.grad[i], ref.Flat.Grad[i])
				}
			}
			largest := 0
			for _, l := range m.LayerParams() {
				n := 0
				for _, i := range l {
					n += m.Params[i].Size
				}
				largest = max(largest, n)
			}
			if st.out != 0 || st.max > largest {
				t.Fatalf("parameters out after the step: %d; most out at once %d (largest layer %d)", st.out, st.max, largest)
			}
			// Evaluation graphs use the store too.
			evRef, _ := ref.NewGraph(2, false)
			ev, _ := m.NewGraph(2, false)
			a, _ := evRef.Logits(x[:2*ref.InputSize()])
			b, err := ev.Logits(x[:2*ref.InputSize()])
			if err != nil {
				t.Fatal(err)
			}
			for i := range a {
				if math.Abs(float64(a[i]-b[i])) > 1e-5 {
					t.Fatalf("eval logit %d: %v, want %v", i, b[i], a[i])
				}
			}
		})
	}
}
