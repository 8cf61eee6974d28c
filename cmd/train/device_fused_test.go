package main

import (
	"testing"

	"github.com/gdist/gdist/gpu/kernels"
)

// TestDeviceGPTFused: with GDIST_ATTENTION=fused (gpu/kernels' fused
// causal attention) `train -device cuda` trains a tiny gpt (one block,
// context 70: the fused kernels' 64-row tiles and their edge) with gpt's
// defaults and ends where -device cpu ends and where the default
// attention on the device ends, within deviceTol, with a lower peak of
// device memory (the fused plan ran).
func TestDeviceGPTFused(t *testing.T) {
	text := codeText(t)
	common := []string{"-model", "gpt-L1-D32-H2-T70", "-data", text, "-steps", "6", "-warmup", "2", "-eval-every", "0",
		"-eval-batch", "16", "-seed", "2", "-json", "-progress=false", "-nproc", "1", "-batch", "4"}
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu"}, common...)...)
	blocks := trainEnv(t, fakeCUDAEnv(t), append([]string{"-device", "cuda"}, common...)...)
	fused := trainEnv(t, append(fakeCUDAEnv(t), kernels.EnvAttention+"=fused"), append([]string{"-device", "cuda"}, common...)...)
	checkNear(t, "gpt, cuda fused vs cpu", fused, cpu)
	checkNear(t, "gpt, cuda fused vs cuda", fused, blocks)
	t.Logf("gpt T70: eval loss %v (cuda, fused), %v (cuda), %v (cpu); train loss %v, %v, %v; peak device memory %d and %d bytes",
		fused.EvalLoss, blocks.EvalLoss, cpu.EvalLoss, fused.TrainLoss, blocks.TrainLoss, cpu.TrainLoss, fused.PeakDeviceBytes, blocks.PeakDeviceBytes)
	if !(fused.PeakDeviceBytes > 0 && fused.PeakDeviceBytes < blocks.PeakDeviceBytes) {
		t.Errorf("peak device memory %d bytes fused, %d by default: the fused plan keeps no T x T probabilities (is it planned?)", fused.PeakDeviceBytes, blocks.PeakDeviceBytes)
	}
}
