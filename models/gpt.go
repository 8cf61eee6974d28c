package models

import (
	"fmt"

	"github.com/gdist/gdist/nn"
)

// GPT is the shape of a decoder-only byte-level transformer: Layers
// pre-LayerNorm blocks of causal multi-head self-attention (Heads heads)
// and a GELU MLP (4 x Dim), over Context bytes (vocabulary 256: no
// tokenizer), learnt position embeddings, a final LayerNorm and an untied
// output head.
type GPT struct{ Layers, Dim, Heads, Context int }

// The GPT presets: "gpt" trains usefully on 2 CPU cores in minutes (about
// 1.6M parameters); "gpt-large" is for the ZeRO and pipeline experiments.
var (
	GPTSmall = GPT{Layers: 4, Dim: 160, Heads: 4, Context: 64}
	GPTLarge = GPT{Layers: 8, Dim: 256, Heads: 8, Context: 128}
)

// Name is the model name that builds g with New (and that checkpoints
// record): "gpt-L<layers>-D<dim>-H<heads>-T<context>".
func (g GPT) Name() string {
	return fmt.Sprintf("gpt-L%d-D%d-H%d-T%d", g.Layers, g.Dim, g.Heads, g.Context)
}

// ParseGPT reads a name Name wrote.
func ParseGPT(name string) (GPT, bool) {
	var g GPT
	n, err := fmt.Sscanf(name, "gpt-L%d-D%d-H%d-T%d", &g.Layers, &g.Dim, &g.Heads, &g.Context)
	if err != nil || n != 4 || g.Name() != name {
		return GPT{}, false
	}
	return g, true
}

// GPTShape is the shape of a gpt model name: a preset ("gpt", "gpt-large")
// or a name Name wrote.
func GPTShape(name string) (GPT, bool) {
	switch name {
	case "gpt":
		return GPTSmall, true
	case "gpt-large":
		return GPTLarge, true
	}
	return ParseGPT(name)
}

// Vocab is the GPT models' vocabulary: bytes.
const Vocab = 256

// Net returns the layers, as one Sequential whose children are, in order:
// the token embedding, the position embedding, two residual blocks per
// layer (attention, then MLP: each x + fn(LayerNorm(x))), the final
// LayerNorm and the head. Parameter names follow the PyTorch reference
// module in benchmarks/peers/gpt.py, so checkpoints load there. Input:
// Context byte values per sample (as float32); output: (batch, Context,
// 256) logits, the prediction for each next byte.
func (g GPT) Net() (nn.Layer, []int, error) {
	if g.Layers < 1 || g.Dim < 1 || g.Heads < 1 || g.Context < 1 || g.Dim%g.Heads != 0 {
		return nil, nil, fmt.Errorf("models: gpt with %d layers, dimension %d, %d heads, context %d: all must be positive and the heads must divide the dimension", g.Layers, g.Dim, g.Heads, g.Context)
	}
	d := g.Dim
	// Token embeddings N(0, 1), PyTorch's nn.Embedding default (the twin's):
	// GPT-2's N(0, 0.02^2) cost 0.25 held-out bits per byte after the
	// default 200-step comparison run, on both sides (benchmarks/NOTES.md).
	s := nn.Seq(&nn.Embedding{Num: Vocab, Dim: d}, &nn.PositionEmbedding{T: g.Context, Dim: d, Std: 0.02})
	for i := 0; i < g.Layers; i++ {
		s.Layers = append(s.Layers,
			&nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: d}, &nn.CausalSelfAttention{Dim: d, Heads: g.Heads})},
			&nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: d}, &nn.Linear{In: d, Out: 4 * d}, nn.GELU{}, &nn.Linear{In: 4 * d, Out: d})})
	}
	s.Layers = append(s.Layers, &nn.LayerNorm{C: d}, &nn.Linear{In: d, Out: Vocab})
	return s, []int{g.Context}, nil
}

// NewGPT builds a GPT of shape g, initialised from seed.
func NewGPT(name string, g GPT, seed int64) (*Model, error) {
	net, in, err := g.Net()
	if err != nil {
		return nil, err
	}
	return nn.New(name, net, in, seed)
}
