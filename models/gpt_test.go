package models

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/gdist/gdist/internal/torchref"
)

// torchGPT loads the weights (PyTorch layout) into the reference module of
// benchmarks/peers/gpt.py with load_state_dict(strict=True), runs the
// batch in float64 and prints the loss and the gradients.
const torchGPT = `
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import gpt
torch.set_default_dtype(torch.float64)
inp = json.load(sys.stdin)
m = gpt.GPT(*inp["shape"])
m.load_state_dict({k: torch.tensor(v["data"]).reshape(v["shape"]) for k, v in inp["params"].items()}, strict=True)
x = torch.tensor(inp["x"]).reshape(inp["n"], -1)
y = torch.tensor(inp["y"], dtype=torch.long)
loss = torch.nn.functional.cross_entropy(m(x).reshape(-1, gpt.VOCAB), y)
loss.backward()
json.dump({"loss": loss.item(), "grads": {k: p.grad.reshape(-1).tolist() for k, p in m.named_parameters()}}, sys.stdout)
`

// TestGPTMatchesPyTorch: a small GPT's loss and every parameter's gradient
// equal the PyTorch reference module's on the same weights and batch
// within 1e-4 (relative to each tensor's largest gradient).
func TestGPTMatchesPyTorch(t *testing.T) {
	torchref.Require(t)
	g := GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	m, err := NewGPT("gpt-test", g, 3)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	text := []byte("func main() {\n\tfmt.Println(\"hello, world\")\n}\n")
	x := make([]float32, n*g.Context)
	y := make([]int32, n*g.Context)
	for i := 0; i < n; i++ {
		for j := 0; j < g.Context; j++ {
			x[i*g.Context+j] = float32(text[i*5+j])
			y[i*g.Context+j] = int32(text[i*5+j+1])
		}
	}
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
	peers, _ := filepath.Abs("../benchmarks/peers")
	in := map[string]any{"shape": []int{g.Layers, g.Dim, g.Heads, g.Context}, "params": params, "n": n, "x": x, "y": y}
	ref := torchref.Run(t, torchGPT, in, peers)
	ref.Check(t, loss, 1e-4, grads, 1e-4, 1e-9)
}

func TestGPTSizes(t *testing.T) {
	m, err := New("gpt", 1)
	if err != nil {
		t.Fatal(err)
	}
	if p := m.NumParams(); p < 1e6 || p > 4e6 {
		t.Errorf("gpt has %d parameters; the default should be 1-4M", p)
	}
	if m.LabelsPerSample() != GPTSmall.Context || m.Classes() != Vocab || m.InputSize() != GPTSmall.Context {
		t.Errorf("gpt: %d labels per sample, %d classes, %d inputs", m.LabelsPerSample(), m.Classes(), m.InputSize())
	}
	if _, err := NewGPT("bad", GPT{Layers: 1, Dim: 10, Heads: 3, Context: 4}, 1); err == nil {
		t.Error("3 heads over dimension 10 accepted")
	}
}

// TestGenerate: a GPT trained for a few steps on one repeated line
// continues it; the same seed gives the same text.
func TestGenerate(t *testing.T) {
	g := GPT{Layers: 1, Dim: 32, Heads: 2, Context: 16}
	m, err := NewGPT("gpt-gen", g, 1)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte("abcdefgh")
	text := bytes.Repeat(line, 8)
	const n = 4
	x := make([]float32, n*g.Context)
	y := make([]int32, n*g.Context)
	for i := 0; i < n; i++ {
		for j := 0; j < g.Context; j++ {
			x[i*g.Context+j] = float32(text[i+j])
			y[i*g.Context+j] = int32(text[i+j+1])
		}
	}
	gr, err := m.NewGraph(n, true)
	if err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 150; step++ {
		if _, err := gr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
		for i, v := range m.Flat.Grad {
			m.Flat.Value[i] -= 0.1 * v
		}
		m.ZeroGrad()
	}
	out, err := Generate(m, []byte("abc"), 10, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "defghabcde" {
		t.Errorf("greedy continuation of %q: %q", "abc", out)
	}
	a, _ := Generate(m, []byte("ab"), 12, 0.8, 7)
	b, _ := Generate(m, []byte("ab"), 12, 0.8, 7)
	if string(a) != string(b) {
		t.Errorf("same seed, different text: %q and %q", a, b)
	}
	if _, err := Generate(m, nil, 3, -1, 1); err == nil {
		t.Error("negative temperature accepted")
	}
}

func TestGPTNames(t *testing.T) {
	g := GPT{Layers: 2, Dim: 24, Heads: 3, Context: 10}
	if !Known(g.Name()) {
		t.Fatalf("%s not known", g.Name())
	}
	m, err := New(g.Name(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.InputSize() != 10 || m.Name != "gpt-L2-D24-H3-T10" {
		t.Errorf("%s: %d inputs", m.Name, m.InputSize())
	}
	for _, bad := range []string{"gpt-L2-D24-H3", "gpt-L02-D24-H3-T10", "gpt-L2-D24-H5-T10x"} {
		if Known(bad) {
			t.Errorf("%q known", bad)
		}
	}
	if _, err := New("gpt-L2-D24-H5-T10", 1); err == nil {
		t.Error("5 heads over dimension 24 built")
	}
}

// BenchmarkGPTStep times one training step (forward, loss, backward; no
// optimizer) of the "gpt" preset at train's default gpt batch, 8 windows
// of 64 bytes, and the forward pass alone at the evaluation batch (64).
// Run with OPENBLAS_NUM_THREADS=1 for a rank on one core.
func BenchmarkGPTStep(b *testing.B) {
	for _, bc := range []struct {
		name  string
		batch int
		grad  bool
	}{{"train-8", 8, true}, {"eval-64", 64, false}} {
		b.Run(bc.name, func(b *testing.B) {
			g := GPTSmall
			m, err := NewGPT("gpt", g, 1)
			if err != nil {
				b.Fatal(err)
			}
			gr, err := m.NewGraph(bc.batch, bc.grad)
			if err != nil {
				b.Fatal(err)
			}
			defer gr.Close()
			text := []byte("func main() {\n\tfor i := range 10 {\n\t\tfmt.Println(i, \"hello, world\")\n\t}\n}\n")
			x := make([]float32, bc.batch*g.Context)
			y := make([]int32, bc.batch*g.Context)
			for i := range x {
				x[i] = float32(text[(i*7)%len(text)])
				y[i] = int32(text[(i*7+1)%len(text)])
			}
			for b.Loop() {
				if bc.grad {
					m.ZeroGrad()
					if _, err := gr.Step(context.Background(), x, y); err != nil {
						b.Fatal(err)
					}
				} else if _, err := gr.Logits(x); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(bc.batch*g.Context)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
