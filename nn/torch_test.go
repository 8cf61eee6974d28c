package nn

import (
	"context"
	"testing"

	"github.com/gdist/gdist/internal/torchref"
)

// The PyTorch twin of layerCases' "attention" model. It reads the
// parameters (PyTorch layout), the input and the labels as JSON and
// prints the loss and the gradients.
const torchLayers = `
import json, sys, torch, torch.nn as nn
torch.set_default_dtype(torch.float64)
inp = json.load(sys.stdin)
class CausalSA(nn.MultiheadAttention):
    def forward(self, x):
        T = x.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        return super().forward(x, x, x, attn_mask=mask, need_weights=False)[0]
m = nn.Sequential(nn.Embedding(11, 8), CausalSA(8, 2, batch_first=True), nn.LayerNorm(8), nn.GELU(), nn.Flatten(), nn.Linear(40, 3))
sd = {k: torch.tensor(v["data"]).reshape(v["shape"]) for k, v in inp["params"].items()}
m.load_state_dict(sd, strict=True)
x = torch.tensor(inp["x"], dtype=torch.long).reshape(inp["n"], -1)
y = torch.tensor(inp["y"], dtype=torch.long)
loss = nn.functional.cross_entropy(m(x), y)
loss.backward()
json.dump({"loss": loss.item(), "grads": {k: p.grad.reshape(-1).tolist() for k, p in m.named_parameters()}}, sys.stdout)
`

// TestAttentionMatchesPyTorch: embedding, causal multi-head attention,
// layer norm, GELU and linear give PyTorch's loss and gradients on the
// same weights (loaded with load_state_dict(strict=True) under our names).
func TestAttentionMatchesPyTorch(t *testing.T) {
	torchref.Require(t)
	var c layerCase
	for _, lc := range layerCases() {
		if lc.name == "attention" {
			c = lc
		}
	}
	m, err := New(c.name, c.net(), c.in, 3)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	x, y := c.batch(m, n)
	gr, err := m.NewGraph(n, true)
	if err != nil {
		t.Fatal(err)
	}
	loss, err := gr.Step(context.Background(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]torchref.Tensor{}
	grads := map[string][]float32{}
	for _, p := range m.Params {
		params[p.Name] = torchref.Tensor{Shape: p.Torch, Data: p.ToTorch(m.Flat.Value[p.Offset : p.Offset+p.Size])}
		grads[p.Name] = p.ToTorch(m.Flat.Grad[p.Offset : p.Offset+p.Size])
	}
	ref := torchref.Run(t, torchLayers, map[string]any{"n": n, "x": x, "y": y, "params": params})
	ref.Check(t, loss, 1e-5, grads, 1e-4, 1e-7)
}
