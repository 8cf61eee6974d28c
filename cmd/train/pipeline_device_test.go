package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/pp"
)

// pipeSummary is a summary with its pipeline section.
type pipeSummary struct {
	train.Summary
	Pipeline *pp.Summary `json:"pipeline"`
}

// trainPipe is trainEnv for a pipeline run: its summary and pipeline
// section.
func trainPipe(t *testing.T, env []string, args ...string) pipeSummary {
	t.Helper()
	out := trainOut(t, env, args...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s pipeSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || s.Event != "summary" || s.Pipeline == nil {
		t.Fatalf("last line is not a pipeline's summary (%v):\n%s", err, out)
	}
	return s
}

// TestPipelineDeviceMatchesCPU: `train -strategy pipeline -nproc 2
// -device cuda` (2 stages, each a worker process on the fake's GPU;
// 3 micro-batches of 6, 5 and 5 samples, 1F1B) ends where the unsplit
// model ends on the CPU (-device cpu, 1 rank, the same batch) within
// deviceTol, for mlp and cnn: train and eval loss, accuracy, median
// gradient norm and clipped steps (SGD with momentum, a cosine schedule,
// clipping by the norm over both stages). The activations go through host
// memory (-backend auto picks shared memory here: the one fake GPU cannot
// hold two NCCL ranks of a host, and comm/staging copies the device
// buffers); with -backend nccl (each rank its own NCCL host on the shared
// GPU) device to device over the fake's NCCL, the mlp likewise, and with
// -schedule gpipe, in 3 stages, and as 2 stages x 2 replicas at half the batch
// (-nproc 4 -stages 2); with -precision bf16 (autocast) within 2% of the CPU's
// fp32, as TestDevicePrecision allows one rank. Each stage's busy time,
// idle time and bubble (timed on the device) are sane.
func TestPipelineDeviceMatchesCPU(t *testing.T) {
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			common := []string{"-model", model, "-data", "synthetic", "-limit", "96", "-epochs", "1", "-seed", "5", "-batch", "16",
				"-lr-schedule", "cosine", "-warmup", "2", "-clip-grad", "1", "-json", "-progress=false"}
			pipe := []string{"-device", "cuda", "-strategy", "pipeline", "-nproc", "2", "-microbatches", "3"}
			gpu := trainPipe(t, fakeCUDAEnv(t), append(pipe, common...)...)
			cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-nproc", "1"}, common...)...)
			if gpu.Device != "cuda:0" || gpu.WorldSize != 2 || gpu.PeakDeviceBytes <= 0 || gpu.Pipeline.Stages != 2 || gpu.Pipeline.Microbatches != 3 {
				t.Fatalf("pipeline on the device: %+v", gpu)
			}
			checkNear(t, "pipeline on cuda vs unsplit on cpu", gpu.Summary, cpu)
			// the stages' ops timed on the device (timing events)
			for _, st := range gpu.Pipeline.PerStage {
				if st.BusyMs <= 0 || st.IdleMs < 0 || st.Bubble < 0 || st.Bubble >= 1 {
					t.Errorf("stage %d on the device: busy %v ms, idle %v ms, bubble %v", st.Stage, st.BusyMs, st.IdleMs, st.Bubble)
				}
			}
			if len(gpu.Pipeline.PerStage) != 2 || gpu.Pipeline.ReplayBubble < 0 || gpu.Pipeline.ReplayBubble >= 1 {
				t.Errorf("pipeline on the device: %+v", gpu.Pipeline)
			}
			if gpu.ClippedSteps != cpu.ClippedSteps {
				t.Errorf("clipped steps: %d (pipeline on cuda) vs %d (cpu)", gpu.ClippedSteps, cpu.ClippedSteps)
			}
			t.Logf("%s: eval loss %v (pipeline on cuda, %s, layers %v), %v (cpu, unsplit); peak device memory %d bytes",
				model, gpu.EvalLoss, gpu.Backend, gpu.Pipeline.Boundaries, cpu.EvalLoss, gpu.PeakDeviceBytes)
			if model != "mlp" {
				return
			}
			nc := trainPipe(t, ncclSharedEnv(t), append(append([]string{"-backend", "nccl"}, pipe...), common...)...)
			if nc.Backend != "nccl" {
				t.Fatalf("-backend nccl: %+v", nc)
			}
			checkNear(t, "pipeline on cuda over nccl vs unsplit on cpu", nc.Summary, cpu)
			gp := trainPipe(t, fakeCUDAEnv(t), append(append([]string{"-schedule", "gpipe"}, pipe...), common...)...)
			checkNear(t, "gpipe pipeline on cuda vs unsplit on cpu", gp.Summary, cpu)
			// 3 stages (the middle one receives and sends both ways), 5
			// micro-batches of 4, 3, 3, 3 and 3
			three := trainPipe(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-strategy", "pipeline", "-nproc", "3", "-microbatches", "5"}, common...)...)
			if three.Pipeline.Stages != 3 {
				t.Fatalf("-nproc 3: %+v", three.Pipeline)
			}
			checkNear(t, "3 stages on cuda vs unsplit on cpu", three.Summary, cpu)
			// 2 stages x 2 replicas at batch 8 (a stage's gradients
			// averaged over its replicas on the device's buffers) == 1
			// rank at 16
			var half []string
			for i := 0; i < len(common); i++ {
				if common[i] == "-batch" {
					i++
					continue
				}
				half = append(half, common[i])
			}
			dp := trainPipe(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-strategy", "pipeline", "-nproc", "4", "-stages", "2", "-microbatches", "3", "-batch", "8"}, half...)...)
			if dp.Pipeline.Replicas != 2 || dp.WorldSize != 4 {
				t.Fatalf("-nproc 4 -stages 2: %+v", dp.Pipeline)
			}
			checkNear(t, "2 stages x 2 replicas on cuda vs unsplit on cpu", dp.Summary, cpu)
			bf := trainPipe(t, fakeCUDAEnv(t), append(append([]string{"-precision", "bf16"}, pipe...), common...)...)
			if bf.Precision != "bf16" || !near(bf.EvalLoss, cpu.EvalLoss, 0.02) {
				t.Errorf("-precision bf16: %q, eval loss %v; cpu (fp32) %v", bf.Precision, bf.EvalLoss, cpu.EvalLoss)
			}
			t.Logf("mlp: eval loss %v (nccl), %v (gpipe), %v (2 replicas), %v (bf16)", nc.EvalLoss, gp.EvalLoss, dp.EvalLoss, bf.EvalLoss)
		})
	}
}

// TestPipelineDeviceGPT: a small gpt (2 blocks, dimension 16, context 8)
// as a 2-stage pipeline on the device ends where it ends unsplit on the
// CPU (AdamW, clipping: train's gpt defaults), within deviceTol.
func TestPipelineDeviceGPT(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 60)), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"-model", "gpt-L2-D16-H2-T8", "-data", text, "-steps", "6", "-warmup", "2", "-batch", "4", "-eval-batch", "8", "-eval-every", "0",
		"-seed", "3", "-json", "-progress=false"}
	gpu := trainPipe(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-strategy", "pipeline", "-nproc", "2", "-microbatches", "2"}, common...)...)
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-nproc", "1"}, common...)...)
	if gpu.Pipeline.Stages != 2 {
		t.Fatalf("pipeline: %+v", gpu.Pipeline)
	}
	checkNear(t, "gpt pipeline on cuda vs unsplit on cpu", gpu.Summary, cpu)
	t.Logf("gpt: eval loss %v (pipeline on cuda, layers %v), %v (cpu)", gpu.EvalLoss, gpu.Pipeline.Boundaries, cpu.EvalLoss)
}

// TestPipelineDeviceResumeAcross: a 2-stage pipeline saved on the GPU
// resumes as a pipeline on the CPU, and one saved on the CPU resumes on
// the GPU, each ending where the unsplit model ends on the CPU
// throughout (deviceTol): the checkpoints are the CPU pipeline's files
// (DDP's), the stages' parameters and Adam's state gathered from the
// devices.
func TestPipelineDeviceResumeAcross(t *testing.T) {
	env := fakeCUDAEnv(t)
	dir := t.TempDir()
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "192", "-epochs", "2", "-batch", "16",
		"-seed", "3", "-optimizer", "adam", "-lr", "1e-4", "-json", "-progress=false"}
	pipe := []string{"-strategy", "pipeline", "-nproc", "2", "-microbatches", "2"}
	whole := trainEnv(t, nil, append([]string{"-nproc", "1"}, common...)...)
	for _, c := range []struct{ first, then string }{{"cuda", "cpu"}, {"cpu", "cuda"}} {
		t.Run(c.first+"-then-"+c.then, func(t *testing.T) {
			save := filepath.Join(dir, c.first+".safetensors")
			half := trainPipe(t, env, append(append([]string{"-device", c.first, "-save", save, "-max-steps", "15"}, pipe...), common...)...)
			if half.Steps != 15 {
				t.Fatalf("first part: %d steps", half.Steps)
			}
			end := trainPipe(t, env, append(append([]string{"-device", c.then, "-save", save, "-resume", save}, pipe...), common...)...)
			if end.ResumedStep != 15 || end.Steps != whole.Steps {
				t.Fatalf("resumed: %+v; whole: %+v", end.Summary, whole)
			}
			if !near(end.EvalLoss, whole.EvalLoss, deviceTol) || !near(end.TestAccuracy, whole.TestAccuracy, deviceTol) {
				t.Fatalf("resumed on %s: eval loss %v, accuracy %v; unsplit on the CPU throughout: %v, %v",
					c.then, end.EvalLoss, end.TestAccuracy, whole.EvalLoss, whole.TestAccuracy)
			}
			t.Logf("eval loss %v (pipeline on %s, then %s) vs %v (unsplit on the cpu throughout)", end.EvalLoss, c.first, c.then, whole.EvalLoss)
		})
	}
}

// TestPipelineDeviceRefused: what a pipeline cannot do on the device is
// refused before any rank starts, saying why.
func TestPipelineDeviceRefused(t *testing.T) {
	base := []string{"-data", "synthetic", "-limit", "64", "-epochs", "1", "-progress=false", "-device", "cuda", "-strategy", "pipeline", "-nproc", "2"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-balance", "time"}, "-balance time times the layers on the CPU, not on -device cuda: use -balance params"},
		{[]string{"-model", "cnn-bn"}, "-strategy pipeline does not support batch norm"},
	} {
		_, errOut, err := trainCmd(t, append(c.args, base...)...)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("train %s: %v, stderr %q; want an error saying %q", strings.Join(c.args, " "), err, errOut, c.want)
		}
	}
}
