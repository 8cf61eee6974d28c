package nn

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"testing"
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

type torchTensor struct {
	Shape []int     `json:"shape"`
	Data  []float32 `json:"data"`
}

// TestAttentionMatchesPyTorch: embedding, causal multi-head attention,
// layer norm, GELU and linear give PyTorch's loss and gradients on the
// same weights (loaded with load_state_dict(strict=True) under our names).
func TestAttentionMatchesPyTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skip("python3-torch is not installed (Debian: apt-get install python3-torch)")
	}
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
	in := map[string]any{"n": n, "x": x, "y": y}
	params := map[string]torchTensor{}
	for _, p := range m.Params {
		params[p.Name] = torchTensor{p.Torch, p.ToTorch(m.Flat.Value[p.Offset : p.Offset+p.Size])}
	}
	in["params"] = params
	body, _ := json.Marshal(in)
	cmd := exec.Command("/usr/bin/python3", "-c", torchLayers)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var out struct {
		Loss  float64              `json:"loss"`
		Grads map[string][]float64 `json:"grads"`
	}
	if err := json.Unmarshal(outb, &out); err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(loss)-out.Loss) > 1e-5*math.Abs(out.Loss) {
		t.Errorf("loss %v, PyTorch %v", loss, out.Loss)
	}
	for _, p := range m.Params {
		want := out.Grads[p.Name]
		got := p.ToTorch(m.Flat.Grad[p.Offset : p.Offset+p.Size])
		if len(want) != len(got) {
			t.Fatalf("%s: %d gradients, PyTorch %d", p.Name, len(got), len(want))
		}
		var scale float64
		for _, w := range want {
			scale = math.Max(scale, math.Abs(w))
		}
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-4*scale+1e-7 {
				t.Fatalf("%s[%d]: gradient %v, PyTorch %v", p.Name, i, got[i], want[i])
			}
		}
	}
}
