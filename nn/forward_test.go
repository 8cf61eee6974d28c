package nn

import (
	"math"
	"testing"
)

// tapeGraph is m's evaluation graph run on gorgonia's tape machine (what
// Model.NewGraph(batch, false) built before forward.go).
func tapeGraph(t *testing.T, m *Model, batch int) *Graph {
	t.Helper()
	gr, err := m.newGraph(batch, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return gr
}

// TestEvalForwardOnly: the forward-only evaluation graph gives the tape
// machine's logits bit for bit, run after run (its buffers come back
// dirty from the pool), for every zoo model, batch norm on running
// statistics, dropout off, and over a ZeRO-3 store.
func TestEvalForwardOnly(t *testing.T) {
	for _, name := range []string{"mlp", "cnn", "cnn-bn", "seq", "dropout", "store-seq", "store-cnn-bn"} {
		t.Run(name, func(t *testing.T) {
			var m *Model
			var err error
			switch name {
			case "dropout":
				m, err = New(name, Seq(&Linear{784, 16}, &Dropout{P: 0.3, Seed: 5}, ReLU{}, &Linear{16, 10}), []int{784}, 3)
			case "store-seq", "store-cnn-bn":
				m, err = newZoo(name[len("store-"):], 3)
			default:
				m, err = newZoo(name, 3)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range m.BNs {
				for c := range b.RunningMean {
					b.RunningMean[c], b.RunningVar[c] = 0.1*float32(c%5), 0.5+0.2*float32(c%3)
				}
			}
			if name[:min(5, len(name))] == "store" {
				m.Store = &memStore{m: m, flat: append([]float32(nil), m.Flat.Value...), grad: make([]float32, len(m.Flat.Value))}
			}
			const batch = 3
			ev, err := m.NewGraph(batch, false)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Close()
			if ev.fwd == nil {
				t.Fatal("NewGraph(batch, false) runs on the tape machine")
			}
			ref := tapeGraph(t, m, batch)
			defer ref.Close()
			x, _ := testBatch(m, batch)
			for run := 0; run < 3; run++ {
				for i := range x {
					if m.Name != "seq" {
						x[i] += float32(run) * 0.25
					} else {
						x[i] = float32((i*7 + run*3) % 11)
					}
				}
				got, err := ev.Logits(x)
				if err != nil {
					t.Fatal(err)
				}
				want, err := ref.Logits(x)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("run %d: %d logits, want %d", run, len(got), len(want))
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("run %d: logit %d = %v, the tape machine's %v", run, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestEvalFreesActivations: a forward-only pass holds a few layers'
// activations at once, not the whole network's.
func TestEvalFreesActivations(t *testing.T) {
	const width, depth, batch = 64, 16, 32
	s := Seq(&Linear{width, width})
	for i := 1; i < depth; i++ {
		s.Layers = append(s.Layers, ReLU{}, &Linear{width, width})
	}
	m, err := New("deep", s, []int{width}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := m.NewGraph(batch, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	x := make([]float32, batch*width)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	for run := 0; run < 3; run++ {
		if _, err := ev.Logits(x); err != nil {
			t.Fatal(err)
		}
	}
	// 2 x depth - 1 activations of batch x width (the biases add theirs
	// in place of the product's, see affine) would all be kept; a pass
	// needs about three at a time.
	layer := batch * width
	if held := ev.fwd.pool.made; held > 4*layer {
		t.Fatalf("the pass holds %d floats (%.1f layers' activations of %d), want at most 4 layers'", held, float64(held)/float64(layer), 2*depth-1)
	}
}
