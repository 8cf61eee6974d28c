package gpu_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
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
		{"--model", "gpt-L1-D32-H2-T16", "--batch", "2", "--precision", "tf32", "--profile-steps", "2"},
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
		if slices.Contains(args, "--profile-steps") {
			if top, _ := r["profile_top"].([]any); len(top) == 0 {
				t.Errorf("%v: no profile_top: %v", args, r["profile_top"])
			}
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

// TestTrainbenchMFU: verify.sh's comparison of a gdist summary with the
// peer's line: the ratio of the median rates, and each side's MFU by
// PaLM's 6 N + 12 L D T over the GPU's dense peak for the precision (an
// H200 at bf16: 989.4 TFLOP/s), N without the embedding tables; a
// parameter count that differs is a mismatch (exit 1); the profile's
// line gives the linear layers' TFLOP/s.
func TestTrainbenchMFU(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	const model, n = "gpt-L12-D768-H12-T1024", 86235904
	write := func(name, s string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	g := write("g", `{"event":"summary","model":"`+model+`","num_params":86235904,"global_batch":8,"steps":20,"step_ms_p50":100,"tokens_per_sec":80000,"eval_loss":5,"peak_device_bytes":4000000000}`)
	tp := write("t", `{"peer":"torch","model":"`+model+`","params":86235904,"batch":8,"precision":"bf16","step_ms_p50":50,"tokens_per_sec":163840,"peak_memory_bytes":5000000000}`)
	res := dir + "/r.jsonl"
	out, err := exec.Command("python3", "trainbench.py", "compare", g, tp, "--precision", "bf16", "--gpu", "NVIDIA H200",
		"--results", res, "--table", dir+"/t.txt").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%s", out)
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	fpt := 6*float64(n-256*768-1024*768) + 12*12*768*1024
	rate := 8 * 1024 / 0.1
	near := func(k string, want float64) {
		if v, _ := r[k].(float64); math.Abs(v-want) > 1e-9*math.Abs(want) {
			t.Errorf("%s = %v, want %v", k, r[k], want)
		}
	}
	near("flops_per_token", fpt)
	near("gdist_rate", rate)
	near("ratio", rate/163840)
	near("gdist_mfu", rate*fpt/989.4e12)
	near("torch_mfu", 163840*fpt/989.4e12)
	// The profile's line: a gpt's linear kind's TFLOP/s (3 x the
	// forward's products: the MLPs', attention's projections and the
	// head's).
	pf := write("p", `{"model":"`+model+`","batch":8,"steps":6,"step_ms":20,"kinds":[{"kind":"linear","total_ms":10,"share":0.5}]}`)
	out, err = exec.Command("python3", "trainbench.py", "profile", pf, "--precision", "bf16", "--results", dir+"/p.jsonl").CombinedOutput()
	rows := 8.0 * 1024
	lin := 3 * (12*2*rows*(768*3072*2+768*768*4) + 2*rows*768*256) / 0.010 / 1e12
	if want := fmt.Sprintf("linear 50%% (%.1f TFLOP/s)", lin); err != nil || !strings.Contains(string(out), want) {
		t.Errorf("profile line: %v: %s; want %q", err, out, want)
	}
	bad := write("t2", `{"peer":"torch","model":"`+model+`","params":86235905,"batch":8,"precision":"bf16","step_ms_p50":50,"tokens_per_sec":163840}`)
	out, err = exec.Command("python3", "trainbench.py", "compare", g, bad, "--precision", "bf16", "--gpu", "NVIDIA H200",
		"--results", res, "--table", dir+"/t.txt").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "MISMATCH") {
		t.Errorf("a parameter count that differs: %v: %s", err, out)
	}
}

// TestTrainbenchNCU: verify.sh's ncu step reads Nsight Compute's CSV
// (--csv --print-units base: a row per kernel launch and metric, its own
// and the program's other lines around it) into a row per kernel name:
// calls, time in microseconds, mean SM and memory throughput.
func TestTrainbenchNCU(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	hdr := `"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"`
	row := func(id, kernel, metric, unit, value string) string {
		return `"` + id + `","1","train","127.0.0.1","` + kernel + `","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","GPU Speed Of Light Throughput","` + metric + `","` + unit + `","` + value + `"`
	}
	csv := strings.Join([]string{
		"==PROF== Connected to process 1 (train)",
		`{"event":"summary"}`,
		hdr,
		row("0", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32(void)", "Duration", "nsecond", "200,000"),
		row("0", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32(void)", "Compute (SM) Throughput", "%", "80"),
		row("0", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32(void)", "Memory Throughput", "%", "40"),
		row("1", "layernorm_fwd(float*, const float*, int)", "Duration", "nsecond", "50000"),
		row("1", "layernorm_fwd(float*, const float*, int)", "Memory Throughput", "%", "90"),
		row("2", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32(void)", "Duration", "nsecond", "100000"),
		row("2", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32(void)", "Compute (SM) Throughput", "%", "60"),
		row("2", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32(void)", "Memory Throughput", "%", "20"),
		"==PROF== Disconnected from process 1",
	}, "\n") + "\n"
	src := dir + "/ncu.csv"
	if err := os.WriteFile(src, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("python3", "trainbench.py", "ncu", src, "--txt", dir+"/ncu.txt", "--results", dir+"/r.jsonl", "--precision", "bf16").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "3 kernels profiled (bf16), by time: sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32 86% (SM 70%, mem 30%); layernorm_fwd 14% (SM 0%, mem 90%)"
	if strings.TrimSpace(string(out)) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	b, _ := os.ReadFile(dir + "/r.jsonl")
	var r map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(string(b), "\n", 2)[0]), &r); err != nil || r["calls"] != 2.0 || r["us"] != 300.0 {
		t.Errorf("first row %v (%v); want the gemm: 2 calls, 300 us", r, err)
	}
}
