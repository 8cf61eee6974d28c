// Package models is gdist's model zoo: the networks the train command
// trains, built from package nn's public layers exactly as a user would
// build their own. Parameter names and shapes follow the equivalent
// PyTorch nn.Sequential, so a checkpoint loads there with load_state_dict;
// initialisation is PyTorch's default (uniform in +-1/sqrt(fan_in)), drawn
// from a seeded generator: the same seed gives the same model everywhere.
//
// Models: "mlp" (784-256-128-10, ReLU), "cnn" (two conv 3x3 + ReLU + 2x2
// max-pool blocks of 32 and 64 channels, then 3136-128-10) and "cnn-bn" (the
// same with batch norm after each convolution); "mlp-xl"
// (784-4096-4096-4096-10, 36.8M parameters) for the ZeRO experiments;
// "mlp-deep" and "mlp-deep-N" for the pipeline experiments; "gpt",
// "gpt-large" and "gpt-L<l>-D<d>-H<h>-T<t>", byte-level transformer
// language models (GPT; their PyTorch twin is benchmarks/peers/gpt.py),
// with Generate to sample text from them.
package models

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/nn"
)

// Model is a zoo model: an nn.Model.
type Model = nn.Model

// Graph is a compiled model (nn.Graph).
type Graph = nn.Graph

// BNLayer and BNState are batch norm's state (package nn).
type (
	BNLayer = nn.BNLayer
	BNState = nn.BNState
)

// ParamStore is the parameter source of ZeRO stage 3 (flat.Store).
type ParamStore = flat.Store

// BLAS names the matrix-multiply implementation in use.
const BLAS = nn.BLAS

// BLASThreads is nn.BLASThreads: OpenBLAS's thread count in this process.
func BLASThreads() int { return nn.BLASThreads() }

// CrossEntropy is nn.CrossEntropy.
func CrossEntropy(logits []float32, labels []int32, k int) float64 {
	return nn.CrossEntropy(logits, labels, k)
}

// Names lists the models for real use: "mlp", "cnn", "cnn-bn".
func Names() []string { return []string{"mlp", "cnn", "cnn-bn"} }

// AllNames adds "mlp-xl" (784-4096-4096-4096-10, 36.8M parameters), a
// model large enough for communication and memory to matter in the ZeRO
// experiments.
//
// "mlp-deep" (784-784x7-10, 4.3M parameters: seven equal hidden layers) is
// the pipeline benchmark's model: its layers are many and alike, so that
// stages can be balanced (a pipeline's bubble matches theory only when
// stages take equal time). "mlp-deep-N" has N such hidden layers (1 to
// 64): more layers balance more finely.
//
// "gpt" and "gpt-large" are byte-level transformer language models
// (GPTSmall, GPTLarge; see GPT) for text; "gpt-L<layers>-D<dim>-H<heads>-T<context>"
// (GPT.Name) any other size.
func AllNames() []string {
	return append(Names(), "mlp-xl", "mlp-deep", "mlp-deep-N", "gpt", "gpt-large", "gpt-L<n>-D<n>-H<n>-T<n>")
}

// Known tells whether New builds the named model.
func Known(name string) bool {
	if _, ok := deepLayers(name); ok {
		return true
	}
	if _, ok := GPTShape(name); ok {
		return true
	}
	return slices.Contains(append(Names(), "mlp-xl"), name)
}

// deepLayers is the hidden layer count of an mlp-deep model name.
func deepLayers(name string) (int, bool) {
	if name == "mlp-deep" {
		return 7, true
	}
	n, err := strconv.Atoi(strings.TrimPrefix(name, "mlp-deep-"))
	if !strings.HasPrefix(name, "mlp-deep-") || err != nil || n < 1 || n > 64 || strconv.Itoa(n) != name[len("mlp-deep-"):] {
		return 0, false
	}
	return n, true
}

// mlp is Linear/ReLU pairs over widths, ending in a Linear.
func mlp(widths ...int) *nn.Sequential {
	s := nn.Seq()
	for i := 0; i+1 < len(widths); i++ {
		if i > 0 {
			s.Layers = append(s.Layers, nn.ReLU{})
		}
		s.Layers = append(s.Layers, &nn.Linear{In: widths[i], Out: widths[i+1]})
	}
	return s
}

// Net returns the named model's layers and sample shape.
func Net(name string) (nn.Layer, []int, error) {
	switch name {
	case "mlp":
		return mlp(784, 256, 128, 10), []int{784}, nil
	case "mlp-xl":
		return mlp(784, 4096, 4096, 4096, 10), []int{784}, nil
	case "cnn", "cnn-bn":
		s := nn.Seq()
		for _, blk := range [][2]int{{1, 32}, {32, 64}} {
			s.Layers = append(s.Layers, &nn.Conv2d{In: blk[0], Out: blk[1], K: 3, Pad: 1})
			if name == "cnn-bn" {
				s.Layers = append(s.Layers, nn.BatchNorm2d(blk[1]))
			}
			s.Layers = append(s.Layers, nn.ReLU{}, nn.MaxPool2d{})
		}
		s.Layers = append(s.Layers, nn.Flatten{}, &nn.Linear{In: 64 * 7 * 7, Out: 128}, nn.ReLU{}, &nn.Linear{In: 128, Out: 10})
		return s, []int{1, 28, 28}, nil
	}
	if g, ok := GPTShape(name); ok {
		return g.Net()
	}
	h, ok := deepLayers(name)
	if !ok {
		return nil, nil, fmt.Errorf("models: unknown model %q (have %v)", name, AllNames())
	}
	w := []int{784}
	for i := 0; i < h; i++ {
		w = append(w, 784)
	}
	return mlp(append(w, 10)...), []int{784}, nil
}

// New builds the named model, initialised from seed.
func New(name string, seed int64) (*Model, error) {
	net, in, err := Net(name)
	if err != nil {
		return nil, err
	}
	return nn.New(name, net, in, seed)
}
