package nn

import (
	"fmt"
	"math"
)

// newZoo builds the zoo's small models (package models builds the same
// from the same layers; models imports nn, so nn's tests cannot use it).
func newZoo(name string, seed int64) (*Model, error) {
	switch name {
	case "mlp":
		return New(name, Seq(&Linear{784, 256}, ReLU{}, &Linear{256, 128}, ReLU{}, &Linear{128, 10}), []int{784}, seed)
	case "cnn", "cnn-bn":
		s := Seq()
		for _, blk := range [][2]int{{1, 32}, {32, 64}} {
			s.Layers = append(s.Layers, &Conv2d{In: blk[0], Out: blk[1], K: 3, Pad: 1})
			if name == "cnn-bn" {
				s.Layers = append(s.Layers, BatchNorm2d(blk[1]))
			}
			s.Layers = append(s.Layers, ReLU{}, MaxPool2d{})
		}
		s.Layers = append(s.Layers, Flatten{}, &Linear{3136, 128}, ReLU{}, &Linear{128, 10})
		return New(name, s, []int{1, 28, 28}, seed)
	case "seq": // a tiny language model: one label per position
		return New(name, Seq(&Embedding{Num: 11, Dim: 8}, &PositionEmbedding{T: 5, Dim: 8, Std: 0.3},
			&Residual{Fn: Seq(&LayerNorm{C: 8}, &CausalSelfAttention{Dim: 8, Heads: 2})}, &LayerNorm{C: 8}, &Linear{8, 11}), []int{5}, seed)
	}
	return nil, fmt.Errorf("no test model %q", name)
}

func testBatch(m *Model, b int) ([]float32, []int32) {
	x := make([]float32, b*m.InputSize())
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.37)) * 1.5
		if m.Name == "seq" {
			x[i] = float32((i * 7) % 11) // token ids
		}
	}
	y := make([]int32, b*m.LabelsPerSample())
	for i := range y {
		y[i] = int32((i * 7) % m.Classes())
	}
	return x, y
}
