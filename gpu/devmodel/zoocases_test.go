package devmodel_test

import (
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
)

// zooCase is a model of the zoo and its batches (batch(i): the i-th).
type zooCase struct {
	name  string
	model func() (*nn.Model, error)
	batch func(i int) ([]float32, []int32)
}

// everyLayer is the mlp, the cnn-bn and a gpt of 2 blocks: every layer
// type of the zoo, at shapes small enough for the fake's kernels.
func everyLayer() []zooCase {
	shape := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	return []zooCase{
		{"mlp", func() (*nn.Model, error) { return models.New("mlp", 1) }, func(i int) ([]float32, []int32) { return devtest.Images(i, 8, 784) }},
		{"cnn-bn", func() (*nn.Model, error) { return models.New("cnn-bn", 1) }, func(i int) ([]float32, []int32) { return devtest.Images(i, 4, 784) }},
		{"gpt", func() (*nn.Model, error) { return models.NewGPT(shape.Name(), shape, 3) }, func(i int) ([]float32, []int32) { return text(i, 2, 8) }},
	}
}
