package gpu_test

import (
	"bufio"
	"encoding/json"
	"fmt"
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
// one GPU, DDP's overlapped buckets against -no-overlap, SyncBN over
// NCCL, zero1-3, the pipeline, resuming on the CPU) with their
// references: a row per comparison, each within tolerance, the train
// processes sharing one kernel cache. The gpt step's bf16 runs with
// GDIST_BF16_CAST=cublas and GDIST_AUTOCAST_CACHE=0 are checked against
// the default cast's (the fake's cuBLAS rounds as the cast kernel does,
// the cache holds the same values: the same losses), the
// bf16bench step summarises BenchmarkBF16Step's rows, and the launch
// audit the kernels step writes is read back beside a GPT-2-small
// profile (TestAuditBesideProfile's check, on this run's audit.md). The
// gpt step's fp32+fused and bf16+fused variants (GDIST_ATTENTION=fused)
// train and are compared with the default attention's runs, within
// their tolerance; a comparison they fail fails the step
// (fusedMismatchFails).
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
	variants := map[string]map[string]any{}
	benchWays := map[string]bool{}
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
		} else if r["bench"] == "bf16variant" {
			variants[r["variant"].(string)] = r
		} else if r["bench"] == "bf16step" {
			benchWays[r["part"].(string)+"/"+r["way"].(string)] = r["tflops"].(float64) > 0
		} else if r["bench"] == "nccl" {
			benchRows++
			if r["correct"] != true {
				t.Errorf("benchmark row not checked correct: %v", r)
			}
		}
	}
	for _, name := range []string{"inventory", "cuda", "kernels", "nccl", "ranks2", "kill", "train", "device", "strategies", "gpt", "bf16bench", "bench", "staging"} {
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
	if r := variants["bf16+headscopy"]; r == nil || r["ok"] != true || r["dry"] != true {
		t.Errorf("gpt: no passing check of bf16 with GDIST_ATTENTION_HEADS=copy against the default: %v", r)
	}
	for _, v := range []string{"bf16+cublas", "bf16+nocache"} {
		if r := variants[v]; r == nil || r["ok"] != true || r["dry"] != true {
			t.Errorf("gpt: no passing check of %s against the default cast: %v", v, r)
		} else if d := r["rel_diff"].(map[string]any); d["train_loss"] != 0.0 || d["eval_loss"] != 0.0 {
			t.Errorf("gpt: %s on the fake (whose cuBLAS rounds as the cast kernel; the cache holds the same values): losses %v, want the default cast's exactly", v, d)
		}
	}
	// the fused attention's variants: each trained (its wall time in the
	// step's detail) and compared with its precision's default run
	for _, v := range []string{"fp32+fused", "bf16+fused"} {
		r := variants[v]
		if r == nil || r["ok"] != true || r["dry"] != true {
			t.Errorf("gpt: no passing check of %s (GDIST_ATTENTION=fused) against the default attention: %v", v, r)
			continue
		}
		d, _ := r["rel_diff"].(map[string]any)
		for _, m := range []string{"train_loss", "eval_loss"} {
			if x, ok := d[m].(float64); !ok || !(x <= r["tol"].(float64)) {
				t.Errorf("gpt: %s: %s compared %v, want within %v of the default run's", v, m, d[m], r["tol"])
			}
		}
		if d, _ := steps["gpt"]["detail"].(string); !strings.Contains(d, "gdist "+v+" ") {
			t.Errorf("gpt: the detail has no wall time of %s: %q", v, d)
		}
	}
	fusedMismatchFails(t, bundle)
	for _, part := range []string{"linear", "attention"} {
		for _, way := range []string{"fp32", "bf16-kernel-nocache", "bf16-kernel-cache", "bf16-cublas"} {
			if !benchWays[part+"/"+way] {
				t.Errorf("bf16bench: no row %s/%s with its TFLOP/s", part, way)
			}
		}
	}
	auditBesideProfile(t, filepath.Join(out, "audit.md"))
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
		"syncbn cnn-bn: nccl (device) == shm (host hook)", "syncbn cnn-bn: 2 x 4 nccl == cpu 1 x 8", "syncbn cnn-bn: zero3 nccl == cpu 1 x 8",
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
	for _, name := range []string{"summary.txt", "inventory.txt", "bench.txt", "strategies.txt", "bf16_casts.txt", "bf16bench.txt", "audit.md", "logs.tar.gz"} {
		if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", name, err)
		}
	}
}

// fusedMismatchFails runs verify.sh's gpt step again (DRY=1, STEPS=gpt,
// the fused variants only) on a copy of the bundle whose train reports
// an eval_loss 10% off when GDIST_ATTENTION=fused: both fused variants'
// comparisons must fail, naming eval_loss, and so must the step (and
// verify.sh's exit status), while the default runs still pass.
func fusedMismatchFails(t *testing.T, bundle string) {
	t.Helper()
	dir := t.TempDir()
	broken, out := filepath.Join(dir, "gpu"), filepath.Join(dir, "out")
	if err := os.Mkdir(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "train" {
			if err := os.Symlink(filepath.Join(bundle, e.Name()), filepath.Join(broken, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	wrapper := `#!/usr/bin/env bash
[ "${GDIST_ATTENTION:-}" = fused ] || exec "` + filepath.Join(bundle, "train") + `" "$@"
"` + filepath.Join(bundle, "train") + `" "$@" | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        sys.stdout.write(line)
        continue
    if isinstance(r, dict) and isinstance(r.get("eval_loss"), (int, float)):
        r["eval_loss"] *= 1.1
    print(json.dumps(r), flush=True)
'
exit ${PIPESTATUS[0]}
`
	if err := os.WriteFile(filepath.Join(broken, "train"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	verify := exec.Command("bash", "verify.sh")
	verify.Env = append(os.Environ(), "DRY=1", "BUNDLE="+broken, "OUT="+out, "BUDGET=300", "STEPS=gpt", "GPT_FP32_VARIANTS=fused", "GPT_BF16_CASTS=fused")
	b, err := verify.CombinedOutput()
	if err == nil {
		t.Errorf("verify.sh (dry run, the fused runs' eval_loss 10%% off) exited 0:\n%s", tail(string(b), 3000))
	}
	raw, rerr := os.ReadFile(filepath.Join(out, "results.jsonl"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("results.jsonl: %q: %v", line, err)
		}
		switch {
		case r["step"] == "gpt":
			if r["status"] != "FAIL" {
				t.Errorf("gpt with the fused runs' eval_loss 10%% off: %v: %v", r["status"], r["detail"])
			}
		case r["bench"] == "bf16variant":
			v, _ := r["variant"].(string)
			seen[v] = true
			if r["ok"] != false || !strings.Contains(fmt.Sprint(r["problems"]), "eval_loss") {
				t.Errorf("%s with its eval_loss 10%% off: ok %v, problems %v: want the eval_loss comparison failed", v, r["ok"], r["problems"])
			}
		}
	}
	if !seen["fp32+fused"] || !seen["bf16+fused"] {
		t.Errorf("the fused variants compared: %v, want fp32+fused and bf16+fused:\n%s", seen, tail(string(b), 3000))
	}
}

// auditBesideProfile checks that trainbench.py reads gpu/kernels' launch
// audit (as the kernels step wrote it) and puts its prediction beside a
// GPT-2-small profile's kinds: the gpt step's line on the GPU machine.
// The profile's times are made up; the predictions are the audit's.
func auditBesideProfile(t *testing.T, audit string) {
	t.Helper()
	dir := t.TempDir()
	prof := filepath.Join(dir, "profile.json")
	kinds := `[{"kind":"linear","layers":49,"forward_ms":30,"backward_ms":55,"total_ms":85,"share":0.7},` +
		`{"kind":"attention","layers":12,"forward_ms":8,"backward_ms":12,"total_ms":20,"share":0.17},` +
		`{"kind":"gaps","layers":0,"forward_ms":0,"backward_ms":0,"total_ms":15.5,"share":0.13}]`
	if err := os.WriteFile(prof, []byte(`{"model":"gpt-L12-D768-H12-T1024","batch":8,"steps":6,"warmup_steps":2,"step_ms":120.5,"kinds":`+kinds+`,"layers":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ prec, gpu string }{{"fp32", "NVIDIA H100 80GB HBM3"}, {"bf16", "NVIDIA H200"}} {
		res, tab := filepath.Join(dir, c.prec+".jsonl"), filepath.Join(dir, "vs.txt")
		cmd := exec.Command("python3", "trainbench.py", "profile", prof, "--precision", c.prec, "--audit", audit, "--gpu", c.gpu, "--table", tab, "--results", res)
		b, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(b), "measured/audit: linear") {
			t.Errorf("trainbench.py profile --audit (%s): %v: %s", c.prec, err, b)
			continue
		}
		raw, err := os.ReadFile(res)
		if err != nil {
			t.Fatal(err)
		}
		var row struct {
			Audit []struct {
				Kind        string   `json:"kind"`
				MeasuredMs  float64  `json:"measured_ms"`
				PredictedMs *float64 `json:"predicted_ms"`
				Ratio       *float64 `json:"ratio"`
			} `json:"audit"`
		}
		if err := json.Unmarshal(raw, &row); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got := map[string]float64{}
		for _, k := range row.Audit {
			if k.PredictedMs != nil {
				got[k.Kind] = *k.PredictedMs
			}
		}
		// Products dominate linear's prediction: fp32's at 67 TFLOP/s is
		// tens of ms a step, bf16's a few; gaps have none.
		lin, att, tot := got["linear"], got["attention"], got["total"]
		if lin <= 0 || att <= 0 || tot < lin+att || got["gaps"] != 0 || (c.prec == "fp32") != (lin > 20) {
			t.Errorf("%s: predictions %v (from %s): want linear (over 20 ms at fp32 only), attention, a total above both, none for gaps", c.prec, got, audit)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
