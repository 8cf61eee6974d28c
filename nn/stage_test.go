package nn

import (
	"context"
	"math"
	"testing"
)

// stageRelErr is ||a-b|| / max(||b||, tiny).
func stageRelErr(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		e := float64(a[i]) - float64(b[i])
		d += e * e
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d) / math.Max(math.Sqrt(n), 1e-30)
}

// TestStagesEqualGraph: running a model as a chain of stages (forward
// through each, loss on the last, backward with received gradients) gives
// the same loss and gradients as the whole graph.
func TestStagesEqualGraph(t *testing.T) {
	cases := []struct {
		name   string
		bounds []int
	}{
		{"mlp", []int{0, 2, 5}},
		{"mlp", []int{0, 1, 2, 4, 5}}, // a parameter-less middle stage
		{"cnn", []int{0, 4, 7, 10}},   // 4-D and flattened boundaries
		{"seq", []int{0, 2, 5}},       // (N, T, C) boundaries, a label per position
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const b = 3
			ref, err := newZoo(tc.name, 5)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := newZoo(tc.name, 5)
			if n := m.NumLayers(); n != tc.bounds[len(tc.bounds)-1] {
				t.Fatalf("NumLayers %d", n)
			}
			x, y := testBatch(m, b)
			gr, err := ref.NewGraph(b, true)
			if err != nil {
				t.Fatal(err)
			}
			want, err := gr.Step(context.Background(), x, y)
			if err != nil {
				t.Fatal(err)
			}
			k := len(tc.bounds) - 1
			stages := make([]*StageGraph, k)
			total := 0
			for i := range stages {
				last := i == k-1
				if stages[i], err = m.NewStage(tc.bounds[i], tc.bounds[i+1], b, last); err != nil {
					t.Fatal(err)
				}
				off, n := m.StageRange(tc.bounds[i], tc.bounds[i+1])
				if off != total {
					t.Fatalf("stage %d starts at %d, want %d", i, off, total)
				}
				total += n
			}
			if total != m.NumParams() {
				t.Fatalf("stage ranges cover %d of %d parameters", total, m.NumParams())
			}
			ins := [][]float32{x}
			for i := 0; i < k-1; i++ {
				out, err := stages[i].Forward(ins[i])
				if err != nil {
					t.Fatal(err)
				}
				ins = append(ins, out)
			}
			// Run the last stage twice at half scale: gradients accumulate.
			stages[k-1].Scale = 0.5
			var got float32
			var g []float32
			for r := 0; r < 2; r++ {
				l, dx, err := stages[k-1].Step(ins[k-1], y)
				if err != nil {
					t.Fatal(err)
				}
				got = l
				if g == nil {
					g = dx
				} else {
					for j := range g {
						g[j] += dx[j]
					}
				}
			}
			if math.Abs(float64(got-want)) > 1e-5*math.Abs(float64(want)) {
				t.Fatalf("loss %v, want %v", got, want)
			}
			for i := k - 2; i >= 0; i-- {
				if g, err = stages[i].Backward(ins[i], g); err != nil {
					t.Fatal(err)
				}
				if (i == 0) != (g == nil) {
					t.Fatalf("stage %d: input gradient nil=%v", i, g == nil)
				}
			}
			for _, p := range m.Params {
				a := m.Flat.Grad[p.Offset : p.Offset+p.Size]
				w := ref.Flat.Grad[p.Offset : p.Offset+p.Size]
				if e := stageRelErr(a, w); e > 1e-5 {
					t.Errorf("%s: gradient relative error %g", p.Name, e)
				}
			}
			for _, s := range stages {
				s.Close()
			}
		})
	}
}

func TestStageErrors(t *testing.T) {
	m, _ := newZoo("mlp", 1)
	if _, err := m.NewStage(2, 2, 4, false); err == nil {
		t.Error("empty range accepted")
	}
	if _, err := m.NewStage(0, 6, 4, false); err == nil {
		t.Error("last=false for the last layer accepted")
	}
	if _, err := m.NewStage(0, 3, 4, true); err == nil {
		t.Error("last=true for a middle stage accepted")
	}
	bn, _ := newZoo("cnn-bn", 1)
	if _, err := bn.NewStage(0, 3, 4, false); err == nil {
		t.Error("batch norm accepted")
	}
	s, err := m.NewStage(0, 2, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forward(make([]float32, 5)); err == nil {
		t.Error("short input accepted")
	}
	if _, _, err := s.Step(nil, nil); err == nil {
		t.Error("Step on a middle stage accepted")
	}
}
