package devmodel_test

import (
	"testing"

	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

// sigmoid is a user's layer type: no device kernels.
type sigmoid struct{}

func (sigmoid) Params() []nn.Param                            { return nil }
func (sigmoid) Fwd(b *nn.Builder, x *G.Node) (*G.Node, error) { return G.Sigmoid(x) }

// seqs is batch i of (batch, T, in) inputs and T labels of classes each
// (a function of the position and the first input: learnable).
func seqs(i, batch, t, in, classes int) ([]float32, []int32) {
	x, y := make([]float32, batch*t*in), make([]int32, batch*t)
	for j := range x {
		x[j] = float32((j*37+i*11)%29)/14 - 1
	}
	for j := range y {
		c := 2 * (j % t)
		if x[j*in] > 0 {
			c++
		}
		y[j] = int32(c % classes)
	}
	return x, y
}

// A user's layer composed of nn layers, Tanh and a PositionEmbedding on
// its own (not after an Embedding) among them, places and follows the CPU
// path (SGD; losses within 2e-5 relative to max(1, loss), parameters
// within 2e-5: the zoo's tolerances; Tanh's kernel is within
// kernels.TanhTol of nn's).
func TestTanhPositionMatchesCPU(t *testing.T) {
	const tt, in, dim, classes, batch = 4, 6, 8, 5, 3
	block := func() nn.Layer {
		return &nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: dim}, &nn.Linear{In: dim, Out: dim}, nn.Tanh{})}
	}
	mk := func() *nn.Model {
		m, err := nn.New("tanh-pos", nn.Seq(&nn.Linear{In: in, Out: dim}, &nn.PositionEmbedding{T: tt, Dim: dim, Std: 0.5},
			&nn.Tanh{}, &nn.LayerNorm{C: dim}, block(), block(), &nn.Linear{In: dim, Out: classes}), []int{tt, in}, 6)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	cfg := devmodel.Config{Device: dev, Batch: batch, Optim: optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}}
	follow(t, mk(), mk(), cfg, 8, func(i int) ([]float32, []int32) { return seqs(i, batch, tt, in, classes) }, 2e-5, 2e-5)
}
