package gpu_test

import (
	"encoding/json"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gdist/gdist/models"
)

// torchPython is a python3 that imports torch (Debian's /usr/bin/python3
// with its PyTorch here, the GPU machine's venv there), or "" if none.
func torchPython() string {
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import torch").Run() == nil {
			return py
		}
	}
	return ""
}

// peer runs benchmarks/peers/torch_gpu_train.py with args and decodes
// its JSON line.
func peer(t *testing.T, py string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(py, append([]string{"../peers/torch_gpu_train.py"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("torch_gpu_train.py %v: %v\n%s%s", args, err, out, stderr.String())
	}
	var r map[string]any
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("torch_gpu_train.py %v: %v: %q", args, err, out)
	}
	return r
}

// TestTorchPeerMatchesZoo: the PyTorch peer of verify.sh's gpt and device
// steps (benchmarks/peers/torch_gpu_train.py) builds the zoo's models with
// gdist's parameter count exactly (gdist's own model here, the script's
// formula there), GPT-2 small's shape included, and its training loop
// runs (on the CPU: --device cpu, tiny shapes, every precision and both
// attention paths) and prints the fields verify.sh reads. Skipped where no
// python3 imports torch.
func TestTorchPeerMatchesZoo(t *testing.T) {
	py := torchPython()
	if py == "" {
		t.Skip("no python3 with torch (Debian: python3-torch)")
	}
	count := func(name string) float64 {
		m, err := models.New(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		return float64(m.NumParams())
	}
	for _, name := range []string{"gpt-L12-D768-H12-T1024", "gpt", "gpt-large"} {
		r := peer(t, py, "--params-only", "--model", name)
		if want := count(name); r["params"] != want || r["gdist_params"] != want {
			t.Errorf("%s: torch has %v parameters, the script's gdist formula %v; gdist's model %v", name, r["params"], r["gdist_params"], want)
		}
	}
	runs := [][]string{
		{"--model", "gpt-L1-D32-H2-T16", "--batch", "2"},
		{"--model", "gpt-L2-D32-H4-T8", "--batch", "3", "--precision", "bf16", "--attn", "mha"},
		{"--model", "gpt-L1-D32-H2-T16", "--batch", "2", "--precision", "tf32"},
		{"--model", "mlp", "--batch", "4", "--lr", "0.01"},
		{"--model", "cnn", "--batch", "2"},
		{"--model", "cnn-bn", "--batch", "2"},
	}
	for _, args := range runs {
		args = append(args, "--device", "cpu", "--steps", "2", "--warmup", "1", "--threads", "1")
		r := peer(t, py, args...)
		name := args[1]
		if want := count(name); r["params"] != want || r["params_match"] != true {
			t.Errorf("%v: %v parameters, gdist's %s has %v", args, r["params"], name, want)
		}
		keys := []string{"step_ms_p50", "samples_per_sec", "loss_last"}
		if strings.HasPrefix(name, "gpt") {
			keys = append(keys, "tokens_per_sec")
			b, _ := strconv.Atoi(args[3])
			g, _ := models.GPTShape(name)
			if tps, sps := r["tokens_per_sec"].(float64), r["samples_per_sec"].(float64); math.Abs(tps-sps*float64(g.Context)) > 1e-6*tps || b != int(r["batch"].(float64)) {
				t.Errorf("%v: %v tokens/s, %v samples/s of %d tokens, batch %v", args, tps, sps, g.Context, r["batch"])
			}
		}
		for _, k := range keys {
			if v, ok := r[k].(float64); !ok || v <= 0 || math.IsInf(v, 0) {
				t.Errorf("%v: %s = %v, want a positive number", args, k, r[k])
			}
		}
	}
	// The twin refuses a shape gdist refuses.
	cmd := exec.Command(py, "../peers/torch_gpu_train.py", "--params-only", "--model", "gpt-L1-D30-H4-T8")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "do not divide") {
		t.Errorf("gpt-L1-D30-H4-T8 (4 heads, dimension 30): %v: %s", err, out)
	}
}
