// Package torchref runs a PyTorch script (Debian's python3-torch) on the
// weights and batch of a gdist test and checks gdist's loss and gradients
// against the script's: the shared half of the tests that match layers and
// models against PyTorch.
package torchref

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"testing"
)

// Python is the interpreter that has Debian's torch.
const Python = "/usr/bin/python3"

// Require skips the test, with the install command, where torch is absent.
func Require(t testing.TB) {
	t.Helper()
	if err := exec.Command(Python, "-c", "import torch").Run(); err != nil {
		t.Skip("python3-torch is not installed (Debian: apt-get install python3-torch)")
	}
}

// Tensor is one parameter as the scripts read it (PyTorch's shape, row-major data).
type Tensor struct {
	Shape []int     `json:"shape"`
	Data  []float32 `json:"data"`
}

// Result is what a script prints: the loss and every parameter's gradient.
type Result struct {
	Loss  float64              `json:"loss"`
	Grads map[string][]float64 `json:"grads"`
}

// Run runs script (python -c script args...) with in as JSON on its stdin
// and reads its Result from stdout.
func Run(t testing.TB, script string, in any, args ...string) Result {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Python, append([]string{"-c", script}, args...)...)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Check compares gdist's loss (within lossRel relative) and gradients (each
// element within gradRel of the parameter's largest PyTorch gradient, plus
// gradAbs) with r, naming the first parameter and element that differ.
func (r Result) Check(t testing.TB, loss float32, lossRel float64, grads map[string][]float32, gradRel, gradAbs float64) {
	t.Helper()
	if math.Abs(float64(loss)-r.Loss) > lossRel*math.Abs(r.Loss) {
		t.Errorf("loss %v, PyTorch %v", loss, r.Loss)
	}
	for name, got := range grads {
		want := r.Grads[name]
		if len(want) != len(got) {
			t.Fatalf("%s: %d gradients, PyTorch %d", name, len(got), len(want))
		}
		var scale float64
		for _, w := range want {
			scale = math.Max(scale, math.Abs(w))
		}
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[i]); d > gradRel*scale+gradAbs {
				t.Fatalf("%s[%d]: gradient %v, PyTorch %v (largest %v)", name, i, got[i], want[i], scale)
			}
		}
	}
}
