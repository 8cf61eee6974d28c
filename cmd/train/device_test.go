package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/train"
)

// deviceTol is how far a -device cuda run's losses may be from -device
// cpu's (relative): the device's kernels are within gpu/kernels'
// whole-model tolerances (2e-5 a step) of the CPU path. Measured on the
// fake: mlp 1.5e-7 (eval) and 3e-8 (train), cnn similar.
const deviceTol = 1e-4

// fakeCUDAEnv is the environment of a train process on the fake CUDA
// (gpu/cudafake) with one device; the test skips without a fake.
func fakeCUDAEnv(t *testing.T) []string {
	t.Helper()
	if os.Getenv("GDIST_CUDA_TEST") == "real" {
		t.Skip("GDIST_CUDA_TEST=real: these tests run on the fake")
	}
	lib, err := cudafake.Build()
	if err != nil {
		t.Skipf("no fake CUDA: %v", err)
	}
	return []string{cuda.EnvLibrary + "=" + lib, cudafake.EnvNCCL + "=" + lib, cudafake.EnvCUBLAS + "=" + lib,
		cudafake.EnvNVRTC + "=" + lib, cudafake.EnvDriver + "=" + lib, "FAKE_CUDA_DEVICES=1"}
}

// trainEnv runs train with args in env (trainOut): its summary.
func trainEnv(t *testing.T, env []string, args ...string) train.Summary {
	t.Helper()
	return summary(t, trainOut(t, env, args...))
}

// trainOut runs train with args in env (KEY=value, set for the test):
// its standard output; a failed run fails the test.
func trainOut(t *testing.T, env []string, args ...string) string {
	t.Helper()
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}
	out, errOut, err := trainCmd(t, args...)
	if err != nil {
		t.Fatalf("train %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1e-3, math.Abs(b)) }

// TestDeviceMatchesCPU: `train -device cuda` (the fake's GPU) ends with
// -device cpu's losses within deviceTol, for mlp and cnn (same seed,
// synthetic data, SGD with momentum, a cosine schedule and clipping).
func TestDeviceMatchesCPU(t *testing.T) {
	env := fakeCUDAEnv(t)
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			common := []string{"-model", model, "-data", "synthetic", "-limit", "128", "-epochs", "1", "-batch", "16",
				"-seed", "5", "-lr-schedule", "cosine", "-warmup", "2", "-clip-grad", "1", "-json", "-progress=false"}
			gpu := trainEnv(t, env, append([]string{"-device", "cuda"}, common...)...)
			cpu := trainEnv(t, nil, append([]string{"-nproc", "1"}, common...)...)
			if gpu.Device != "cuda:0" || cpu.Device != "cpu" || gpu.PeakDeviceBytes <= 0 || gpu.Steps != cpu.Steps || gpu.WorldSize != 1 {
				t.Fatalf("summaries: %+v / %+v", gpu, cpu)
			}
			for _, v := range [][3]any{{"train loss", gpu.TrainLoss, cpu.TrainLoss}, {"eval loss", gpu.EvalLoss, cpu.EvalLoss},
				{"grad norm p50", gpu.GradNormP50, cpu.GradNormP50}} {
				if !near(v[1].(float64), v[2].(float64), deviceTol) {
					t.Errorf("%s: %v (cuda) vs %v (cpu)", v[0], v[1], v[2])
				}
			}
			if gpu.ClippedSteps != cpu.ClippedSteps {
				t.Errorf("clipped steps: %d (cuda) vs %d (cpu)", gpu.ClippedSteps, cpu.ClippedSteps)
			}
			t.Logf("%s: eval loss %v (cuda) vs %v (cpu), train loss %v vs %v, peak device memory %d bytes",
				model, gpu.EvalLoss, cpu.EvalLoss, gpu.TrainLoss, cpu.TrainLoss, gpu.PeakDeviceBytes)
		})
	}
}

// TestDeviceResumeAcross: a run saved on the GPU resumes on the CPU, and
// one saved on the CPU resumes on the GPU, each ending where a run on
// one device ends (deviceTol): the checkpoints are the same files.
func TestDeviceResumeAcross(t *testing.T) {
	env := fakeCUDAEnv(t)
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "256", "-epochs", "2", "-batch", "16",
		"-seed", "3", "-optimizer", "adam", "-lr", "1e-4", "-json", "-progress=false", "-nproc", "1"}
	whole := trainEnv(t, nil, common...)
	resumeAcross(t, whole, func(string) []string { return env }, func(device string) []string { return append([]string{"-device", device}, common...) })
}

// resumeAcross trains 20 steps on one device and saves, resumes on the
// other (cuda then cpu, and cpu then cuda) and checks that the resumed
// run ends where whole, a run on the CPU throughout, ends (deviceTol).
// env(device) is the environment of a run on device, args(device) its
// arguments (-device included; -save, -max-steps and -resume are
// added).
func resumeAcross(t *testing.T, whole train.Summary, env func(device string) []string, args func(device string) []string) {
	t.Helper()
	dir := t.TempDir()
	for _, c := range []struct{ first, then string }{{"cuda", "cpu"}, {"cpu", "cuda"}} {
		t.Run(c.first+"-then-"+c.then, func(t *testing.T) {
			save := filepath.Join(dir, c.first+".safetensors")
			half := trainEnv(t, env(c.first), append(args(c.first), "-save", save, "-max-steps", "20")...)
			if half.Steps != 20 {
				t.Fatalf("first part: %d steps", half.Steps)
			}
			end := trainEnv(t, env(c.then), append(args(c.then), "-save", save, "-resume", save)...)
			if end.ResumedStep != 20 || end.Steps != whole.Steps || end.Device != (&train.Config{Device: c.then}).DeviceName() {
				t.Fatalf("resumed: %+v; whole: %+v", end, whole)
			}
			// (The train loss is the resumed part's of the epoch.)
			if !near(end.EvalLoss, whole.EvalLoss, deviceTol) || !near(end.TestAccuracy, whole.TestAccuracy, deviceTol) {
				t.Fatalf("resumed on %s: eval loss %v, accuracy %v; on the CPU throughout: %v, %v",
					c.then, end.EvalLoss, end.TestAccuracy, whole.EvalLoss, whole.TestAccuracy)
			}
			t.Logf("eval loss %v (%s, then %s) vs %v (cpu throughout)", end.EvalLoss, c.first, c.then, whole.EvalLoss)
		})
	}
}

func TestDeviceRefused(t *testing.T) {
	base := []string{"-data", "synthetic", "-limit", "64", "-epochs", "1", "-progress=false"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-device", "gpu"}, `-device "gpu": want cpu, cuda or cuda:N`},
		{[]string{"-device", "cuda:-1"}, `want cpu, cuda or cuda:N`},
		{[]string{"-device", "cuda:1", "-backend", "nccl"}, "-device cuda:1 with -backend nccl: NCCL puts each rank on the GPU of its LOCAL_RANK"},
		{[]string{"-device", "cuda", "-compress", "bf16"}, "-compress bf16 compresses the gradient all-reduce"},
	} {
		_, errOut, err := trainCmd(t, append(c.args, base...)...)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("train %s: %v, stderr %q; want an error saying %q", strings.Join(c.args, " "), err, errOut, c.want)
		}
	}
}

// ncclSharedEnv is fakeCUDAEnv for several train workers on the fake's
// one GPU over its NCCL: the launcher gives each worker an NCCL_HOSTID of
// its own (GDIST_NCCL_SHARE_GPU=1), as on a machine with one real GPU.
func ncclSharedEnv(t *testing.T) []string {
	return append(fakeCUDAEnv(t), "GDIST_NCCL_SHARE_GPU=1", "NCCL_SOCKET_IFNAME=lo", "FAKE_NCCL_PROCESSES=1", "FAKE_NCCL_DIR="+t.TempDir())
}

// checkNear fails t for each of the summaries' train loss, eval loss,
// test accuracy and median gradient norm farther than deviceTol from the
// reference's.
func checkNear(t *testing.T, what string, got, want train.Summary) {
	t.Helper()
	if got.Steps != want.Steps {
		t.Fatalf("%s: %d steps, want %d", what, got.Steps, want.Steps)
	}
	for _, v := range [][3]any{{"train loss", got.TrainLoss, want.TrainLoss}, {"eval loss", got.EvalLoss, want.EvalLoss},
		{"test accuracy", got.TestAccuracy, want.TestAccuracy}, {"grad norm p50", got.GradNormP50, want.GradNormP50}} {
		if !near(v[1].(float64), v[2].(float64), deviceTol) {
			t.Errorf("%s: %s %v, want %v", what, v[0], v[1], v[2])
		}
	}
}

// TestDeviceRanksMatchOneRank: `train -device cuda -nproc 2 -backend nccl`
// at batch B (two worker processes sharing the fake's GPU, the gradients
// averaged by NCCL on the device) ends where `-device cuda -nproc 1` at
// batch 2B and `-device cpu -nproc 1` at 2B end, within deviceTol, for
// mlp and cnn; and so does -backend shm (the gradients through host
// memory), with mlp.
func TestDeviceRanksMatchOneRank(t *testing.T) {
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			common := []string{"-model", model, "-data", "synthetic", "-limit", "128", "-epochs", "1", "-seed", "5",
				"-lr-schedule", "cosine", "-warmup", "2", "-clip-grad", "1", "-json", "-progress=false"}
			two := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-nproc", "2", "-backend", "nccl", "-batch", "8"}, common...)...)
			one := trainEnv(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-nproc", "1", "-batch", "16"}, common...)...)
			cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-nproc", "1", "-batch", "16"}, common...)...)
			if two.WorldSize != 2 || two.Backend != "nccl" || two.Device != "cuda:0" || two.PeakDeviceBytes <= 0 {
				t.Fatalf("2 ranks: %+v", two)
			}
			checkNear(t, "cuda, 2 ranks (nccl) vs cuda, 1 rank", two, one)
			checkNear(t, "cuda, 2 ranks (nccl) vs cpu, 1 rank", two, cpu)
			if model == "mlp" {
				shm := trainEnv(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-nproc", "2", "-backend", "shm", "-batch", "8"}, common...)...)
				checkNear(t, "cuda, 2 ranks (shm) vs cpu, 1 rank", shm, cpu)
			}
			t.Logf("%s: eval loss %v (cuda, 2 ranks), %v (cuda, 1 rank), %v (cpu)", model, two.EvalLoss, one.EvalLoss, cpu.EvalLoss)
		})
	}
}

// TestDeviceZeroMatchesDDP: `train -device cuda -strategy zero1|zero2|zero3
// -nproc 2 -backend nccl` (the gradients reduced to their shards' owners
// in buckets during backward and the parameters all-gathered on the
// device, each rank's shard updated there with its shard of Adam's
// state, clipped by the global norm) ends where -strategy ddp on the
// device and -device cpu (ddp, 2 ranks) end, within deviceTol; zero1
// with small buckets (several per shard) too; zero2 and zero3 with
// small units (-bucket-mb: a layer's gradients reduced, and with zero3
// its parameters gathered, at a time: devmodel's ShardGrads,
// ShardParams), and through host memory (-backend shm).
func TestDeviceZeroMatchesDDP(t *testing.T) {
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "128", "-epochs", "1", "-seed", "5", "-batch", "8", "-nproc", "2",
		"-optimizer", "adam", "-lr", "1e-3", "-clip-grad", "0.5", "-json", "-progress=false"}
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-backend", "shm", "-strategy", "ddp"}, common...)...)
	ddp := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-backend", "nccl", "-strategy", "ddp"}, common...)...)
	checkNear(t, "ddp, cuda vs cpu", ddp, cpu)
	if cpu.ClippedSteps == 0 {
		t.Fatalf("no step clipped: the test checks nothing of clipping (%+v)", cpu)
	}
	small := []string{"-first-bucket-mb", "0.05", "-bucket-mb", "0.2"}
	units := []string{"-bucket-mb", "0.01"}
	for _, c := range []struct {
		strategy, backend string
		buckets           int // reported
		args              []string
	}{
		// 235146 floats, a shard of 117573 each: the first bucket (1 MiB)
		// holds both shards' halves; so does zero2's and zero3's one unit
		// (the whole model: -bucket-mb 25).
		{"zero1", "nccl", 2, nil}, {"zero2", "nccl", 2, nil}, {"zero3", "nccl", 2, nil},
		// 13107, then 52428 floats, split at 117573.
		{"zero1", "nccl", 7, small},
		// units of at least 2621 floats: the last two layers (34186),
		// the first (200960) split at 117573.
		{"zero2", "nccl", 3, units}, {"zero3", "nccl", 3, units},
		{"zero2", "shm", 0, nil}, {"zero3", "shm", 0, units},
	} {
		env := fakeCUDAEnv(t)
		if c.backend == "nccl" {
			env = ncclSharedEnv(t)
		}
		z := trainEnv(t, env, append(append([]string{"-device", "cuda", "-backend", c.backend, "-strategy", c.strategy}, c.args...), common...)...)
		what := c.strategy + " (" + c.backend + ")"
		if c.args != nil {
			what += " " + strings.Join(c.args, " ")
		}
		if z.Strategy != c.strategy || z.Device != "cuda:0" || z.PeakDeviceBytes <= 0 || z.ClippedSteps != cpu.ClippedSteps ||
			z.Buckets != c.buckets || z.Overlap != (c.buckets > 0) {
			t.Errorf("%s: summary %+v; want %d buckets", what, z, c.buckets)
		}
		checkNear(t, what+", cuda vs ddp on cuda", z, ddp)
		checkNear(t, what+", cuda vs ddp on cpu", z, cpu)
		t.Logf("%s: eval loss %v (cuda), ddp %v (cuda), %v (cpu); peak device memory %d bytes (ddp %d)",
			what, z.EvalLoss, ddp.EvalLoss, cpu.EvalLoss, z.PeakDeviceBytes, ddp.PeakDeviceBytes)
	}
}

// TestDeviceZeroResumeAcross: a zero2 run of 2 ranks saved on the GPU
// (the CPU's sharded files) resumes on the CPU, and one saved on the CPU
// resumes on the GPU, each ending where a run on the CPU throughout ends
// (deviceTol); zero3 too, in units of a layer (the device holding each
// rank's shard of the parameters: gathered on the host to save,
// scattered to the shards on resuming).
func TestDeviceZeroResumeAcross(t *testing.T) {
	for _, strategy := range []string{"zero2", "zero3"} {
		t.Run(strategy, func(t *testing.T) { zeroResumeAcross(t, strategy) })
	}
}

func zeroResumeAcross(t *testing.T, strategy string) {
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "256", "-epochs", "2", "-batch", "8", "-nproc", "2",
		"-strategy", strategy, "-seed", "3", "-optimizer", "adam", "-lr", "1e-4", "-json", "-progress=false"}
	if strategy == "zero3" {
		common = append(common, "-bucket-mb", "0.01")
	}
	whole := trainEnv(t, nil, append([]string{"-backend", "shm"}, common...)...)
	on := func(device string) []string {
		if device == "cuda" {
			return ncclSharedEnv(t)
		}
		return nil
	}
	backend := map[string]string{"cuda": "nccl", "cpu": "shm"}
	resumeAcross(t, whole, on, func(device string) []string {
		return append([]string{"-device", device, "-backend", backend[device]}, common...)
	})
}

// codeText writes a text file of about 3 KB of code-like lines (for the
// gpt models) in a temporary directory and returns its path.
func codeText(t *testing.T) string {
	text := filepath.Join(t.TempDir(), "text.txt")
	var b strings.Builder
	for i := 0; b.Len() < 3000; i++ {
		b.WriteString("func add(a, b int) int { return a + b } // the sum\n")
		b.WriteString(strings.Repeat("x", i%7) + " = add(" + strings.Repeat("1", i%5+1) + ", 2)\n")
	}
	if err := os.WriteFile(text, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return text
}

// TestDeviceGPT: a tiny gpt (one block, every layer type of the zoo's gpt)
// trained by `train -device cuda` on a text file with gpt's defaults
// (AdamW, a cosine schedule with warm-up, clipping) ends where -device cpu
// ends, within deviceTol, with one rank and with two (nccl, each at half
// the batch).
func TestDeviceGPT(t *testing.T) {
	text := codeText(t)
	common := []string{"-model", "gpt-L1-D32-H2-T16", "-data", text, "-steps", "8", "-warmup", "2", "-eval-every", "0",
		"-eval-batch", "64", "-seed", "2", "-json", "-progress=false"}
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-nproc", "1", "-batch", "8"}, common...)...)
	one := trainEnv(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-nproc", "1", "-batch", "8"}, common...)...)
	two := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-nproc", "2", "-backend", "nccl", "-batch", "4"}, common...)...)
	checkNear(t, "gpt, cuda vs cpu", one, cpu)
	checkNear(t, "gpt, cuda, 2 ranks vs cpu", two, cpu)
	t.Logf("gpt: eval loss %v (cuda), %v (cuda, 2 ranks), %v (cpu); train loss %v, %v, %v",
		one.EvalLoss, two.EvalLoss, cpu.EvalLoss, one.TrainLoss, two.TrainLoss, cpu.TrainLoss)
}

// TestDeviceBatchNormRanks: cnn-bn on two ranks, evaluated on the device
// (devmodel.Eval) after rank 0's running statistics are broadcast on the
// device, ends where -device cpu on two ranks ends (deviceTol), with
// DDP, zero1 and zero3 (a unit per layer): each rank's statistics differ
// (its own batches), so evaluating or saving any but rank 0's would not.
func TestDeviceBatchNormRanks(t *testing.T) {
	common := []string{"-model", "cnn-bn", "-data", "synthetic", "-limit", "64", "-epochs", "1", "-seed", "4", "-batch", "8", "-nproc", "2",
		"-json", "-progress=false"}
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-backend", "shm"}, common...)...)
	for _, strategy := range []string{"ddp", "zero1", "zero3"} {
		args := []string{"-device", "cuda", "-backend", "nccl", "-strategy", strategy}
		if strategy == "zero3" {
			// a unit per layer: batch norm's parameters gathered and its
			// gradients reduced apart from the convolutions'
			args = append(args, "-bucket-mb", "0.001")
		}
		gpu := trainEnv(t, ncclSharedEnv(t), append(args, common...)...)
		checkNear(t, strategy+", cnn-bn, cuda vs cpu", gpu, cpu)
		t.Logf("%s: eval loss %v (cuda), %v (cpu)", strategy, gpu.EvalLoss, cpu.EvalLoss)
	}
}

// TestDeviceOverlap: DDP over NCCL on the device averages the gradients
// in buckets while backward runs (each bucket's all-reduce starts once
// backward has queued its gradients): with small buckets (several per
// layer) 2 ranks at batch 8 still end where 1 rank at 16 on the CPU ends
// (deviceTol), the summary reporting the overlap and the buckets; with
// -no-overlap the same, after backward, reported as such.
func TestDeviceOverlap(t *testing.T) {
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "128", "-epochs", "1", "-seed", "5",
		"-clip-grad", "1", "-json", "-progress=false"}
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-nproc", "1", "-batch", "16"}, common...)...)
	small := []string{"-device", "cuda", "-nproc", "2", "-backend", "nccl", "-batch", "8", "-first-bucket-mb", "0.05", "-bucket-mb", "0.2"}
	on := trainEnv(t, ncclSharedEnv(t), append(small, common...)...)
	off := trainEnv(t, ncclSharedEnv(t), append(append(small, "-no-overlap"), common...)...)
	// 235146 floats: a first bucket of 0.05 MiB (13107 floats), then five
	// of at most 0.2 MiB (52428).
	if !on.Overlap || on.Buckets != 6 || off.Overlap || off.Buckets != 0 {
		t.Errorf("overlap %v with %d buckets, -no-overlap: %v with %d; want true with 6, false with 0", on.Overlap, on.Buckets, off.Overlap, off.Buckets)
	}
	checkNear(t, "cuda, 2 ranks, overlapped buckets vs cpu, 1 rank", on, cpu)
	checkNear(t, "cuda, 2 ranks, -no-overlap vs cpu, 1 rank", off, cpu)
	t.Logf("eval loss %v (overlap, %d buckets), %v (-no-overlap), %v (cpu)", on.EvalLoss, on.Buckets, off.EvalLoss, cpu.EvalLoss)
}

// TestDeviceZeroMemory: 2 ranks over NCCL, each ZeRO stage holds less
// device memory at its peak than the one before (peak_device_bytes:
// zero3 < zero2 < zero1 < ddp) and ends where ddp on the device ends
// (deviceTol): a gpt of 4 blocks (activations most of the memory) and
// mlp-deep (seven equal hidden layers; parameters and state most of
// it). Units of one layer
// (-bucket-mb 0.001): zero2 keeps its shard of the gradients and one or
// two layers' whole, zero3 its shard of the parameters too and one
// layer's whole at a time. Evaluation (-eval-batch as the training
// batch, so that its activations do not set the peak) gathers zero3's
// parameters whole.
func TestDeviceZeroMemory(t *testing.T) {
	text := codeText(t)
	for _, model := range [][]string{
		{"-model", "gpt-L4-D32-H2-T16", "-data", text, "-steps", "4", "-warmup", "1", "-eval-every", "0"},
		{"-model", "mlp-deep", "-data", "synthetic", "-limit", "32", "-epochs", "1", "-optimizer", "adam"},
	} {
		common := append([]string{"-eval-batch", "4", "-batch", "4", "-nproc", "2", "-bucket-mb", "0.001", "-seed", "2", "-json", "-progress=false",
			"-device", "cuda", "-backend", "nccl"}, model...)
		var peaks []int64
		var ddp train.Summary
		for i, strategy := range []string{"ddp", "zero1", "zero2", "zero3"} {
			z := trainEnv(t, ncclSharedEnv(t), append([]string{"-strategy", strategy}, common...)...)
			if i == 0 {
				ddp = z
			} else {
				checkNear(t, model[1]+": "+strategy+" vs ddp, cuda", z, ddp)
			}
			peaks = append(peaks, z.PeakDeviceBytes)
			t.Logf("%s, %s: peak device memory %d bytes; model state %+v; eval loss %v", model[1], strategy, z.PeakDeviceBytes, z.ModelStateBytes, z.EvalLoss)
		}
		for i := 1; i < len(peaks); i++ {
			if !(peaks[i] < peaks[i-1]) {
				t.Errorf("%s: peak device bytes ddp, zero1, zero2, zero3: %v; want each below the one before", model[1], peaks)
			}
		}
	}
}
