package gpu_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyDryRun runs the GPU verification script end to end on this
// machine, against the fake CUDA and NCCL (DRY=1): build.sh makes the
// bundle, verify.sh runs every step with its timeouts and writes its
// results. Every step must pass except the ones that need a real GPU
// (compute-sanitizer, ncu), which must say they were skipped and why; the
// benchmark rows must be there and checked, and the two-rank steps must
// have run two ranks on the one (fake) GPU. The gpt step trains a tiny
// gpt on the fake with the device profile on, and, where a python3 has
// torch, the PyTorch peer on the CPU (a row per model compared). The
// strategies step compares the device strategies (two NCCL ranks on the
// one GPU, DDP's overlapped buckets against -no-overlap, zero1-3, the
// pipeline, resuming on the CPU) with their references: a row per
// comparison, each within tolerance, the train processes sharing one
// kernel cache.
func TestVerifyDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the whole bundle (about a minute)")
	}
	for _, tool := range []string{"bash", "gcc", "timeout", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	bundle, out := filepath.Join(dir, "gpu"), filepath.Join(dir, "out")
	build := exec.Command("bash", "build.sh", bundle)
	build.Env = append(os.Environ(), "PACK=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	verify := exec.Command("bash", "verify.sh")
	verify.Env = append(os.Environ(), "DRY=1", "BUNDLE="+bundle, "OUT="+out, "BUDGET=600")
	b, err := verify.CombinedOutput()
	t.Logf("verify.sh:\n%s", tail(string(b), 4000))
	if err != nil {
		t.Errorf("verify.sh (dry run): %v", err)
	}
	steps := map[string]map[string]any{}
	benchRows := 0
	trainRows := map[string]map[string]any{}
	stratRows := map[string]map[string]any{}
	var profile map[string]any
	f, err := os.Open(filepath.Join(out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("results.jsonl: %q: %v", sc.Text(), err)
		}
		if s, ok := r["step"].(string); ok {
			steps[s] = r
		} else if r["bench"] == "train" {
			trainRows[r["model"].(string)] = r
		} else if r["bench"] == "strategies" {
			stratRows[r["check"].(string)] = r
			if r["ok"] != true || r["dry"] != true {
				t.Errorf("strategies: %s: %v", r["check"], r["problems"])
			}
		} else if r["bench"] == "profile" {
			profile = r
		} else if r["bench"] == "nccl" {
			benchRows++
			if r["correct"] != true {
				t.Errorf("benchmark row not checked correct: %v", r)
			}
		}
	}
	for _, name := range []string{"inventory", "cuda", "kernels", "nccl", "ranks2", "kill", "train", "device", "strategies", "gpt", "bench", "staging"} {
		r := steps[name]
		if r == nil {
			t.Errorf("step %s: no result row", name)
			continue
		}
		if r["status"] != "PASS" || r["dry"] != true {
			t.Errorf("step %s: %v: %v", name, r["status"], r["detail"])
		}
	}
	if r := steps["sanitizer"]; r == nil || r["status"] != "SKIP" || !strings.Contains(r["detail"].(string), "GPU") {
		t.Errorf("step sanitizer: want SKIP saying it needs a GPU, got %v", r)
	}
	if r := steps["ncu"]; r == nil || r["status"] != "SKIP" || !strings.Contains(r["detail"].(string), "GPU") {
		t.Errorf("step ncu: want SKIP saying it needs a GPU, got %v", r)
	}
	if profile == nil || profile["model"] != "gpt-L1-D32-H2-T16" || profile["steps"].(float64) < 1 {
		t.Errorf("gpt: no device profile row of the tiny gpt: %v", profile)
	}
	if torchPython() != "" {
		for _, m := range []string{"mlp", "gpt-L1-D32-H2-T16"} {
			r := trainRows[m]
			if r == nil || r["dry"] != true || !(r["gdist_rate"].(float64) > 0) || !(r["torch_rate"].(float64) > 0) || len(r["problems"].([]any)) != 0 {
				t.Errorf("no comparison of %s with the PyTorch peer (python3 has torch here): %v", m, r)
			}
		}
	}
	for _, c := range []string{"overlap mlp: small buckets == -no-overlap", "ranks mlp: 2 x 8 == 1 x 16 (cuda)", "ranks mlp: 2 x 8 cuda == 1 x 16 cpu",
		"zero: zero1 cuda == ddp cuda", "zero: zero2 cuda == ddp cuda", "zero: zero3 cuda == ddp cuda", "pipeline mlp: 2 stages cuda == cpu",
		"pipeline mlp: over nccl == cpu", "resume ddp: cuda -> cpu == cpu", "resume zero3: cuda -> cpu == cpu"} {
		if stratRows[c] == nil {
			t.Errorf("strategies: no comparison %q (have %d)", c, len(stratRows))
		}
	}
	if d, _ := steps["strategies"]["detail"].(string); !strings.Contains(d, "kernel cache: ") || strings.Contains(d, "kernel cache: 0 images") {
		t.Errorf("strategies: %q: want the kernel cache filled", d)
	}
	if d, _ := steps["kill"]["detail"].(string); !strings.Contains(d, "naming rank 1") {
		t.Errorf("kill: %q does not say the killed rank was named", d)
	}
	if d, _ := steps["bench"]["detail"].(string); !strings.Contains(d, "ranks [1, 2]") {
		t.Errorf("bench: %q: want rows at 1 and 2 ranks", d)
	}
	if benchRows < 20 {
		t.Errorf("%d benchmark rows in results.jsonl, want every op at 1 and 2 ranks", benchRows)
	}
	for _, name := range []string{"summary.txt", "inventory.txt", "bench.txt", "strategies.txt", "logs.tar.gz"} {
		if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", name, err)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
