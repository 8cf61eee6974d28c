package main

import "testing"

// TestDeviceEvalPeak: evaluating on the device at a large batch holds
// about what evaluating at the training batch holds (gpu/devmodel's
// forward-only plans, in passes that fit the training plan's memory;
// the pipeline's stages in passes of a micro-batch): `train -device cuda
// -model cnn` at batch 16 with -eval-batch 500 peaks at most the batch's
// own buffers (its input, labels and logits: 4 bytes x 500 x (784 + 2 +
// 10)) above -eval-batch 16, with 1 rank (ddp) and as a 2-stage pipeline
// (3 micro-batches; there the passes are the same size: no more than a
// pass of the input and conv1's output, 4 bytes x 6 x (784 + 32 x 28 x
// 28), above). Evaluating with training plans at the evaluation batch,
// as before, peaked at 736 MB (ddp) and 685 MB (pipeline) against about
// 15-26 MB. The eval loss does not depend on the evaluation batch.
func TestDeviceEvalPeak(t *testing.T) {
	env := fakeCUDAEnv(t)
	common := []string{"-device", "cuda", "-model", "cnn", "-data", "synthetic", "-limit", "96", "-epochs", "1", "-seed", "5", "-batch", "16",
		"-json", "-progress=false"}
	const in, conv1, classes = 784, 32 * 28 * 28, 10
	for _, c := range []struct {
		name  string
		args  []string
		bound int64 // bytes above -eval-batch 16's peak
	}{
		{"ddp", []string{"-nproc", "1"}, 4 * 500 * (in + 2 + classes)},
		{"pipeline", []string{"-strategy", "pipeline", "-nproc", "2", "-microbatches", "3"}, 4 * 6 * (in + conv1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(eb string) (int64, float64) {
				if c.name == "pipeline" {
					s := trainPipe(t, env, append(append(append([]string(nil), c.args...), common...), "-eval-batch", eb)...)
					return s.PeakDeviceBytes, s.EvalLoss
				}
				s := trainEnv(t, env, append(append(append([]string(nil), c.args...), common...), "-eval-batch", eb)...)
				return s.PeakDeviceBytes, s.EvalLoss
			}
			small, ls := run("16")
			large, ll := run("500")
			t.Logf("%s cnn: peak device memory %d bytes at -eval-batch 16, %d at 500 (bound %d above); eval loss %v, %v", c.name, small, large, c.bound, ls, ll)
			if small <= 0 || large > small+c.bound {
				t.Errorf("%s: peak %d bytes at -eval-batch 500, %d at 16: want at most %d more", c.name, large, small, c.bound)
			}
			if !near(ll, ls, 1e-6) {
				t.Errorf("%s: eval loss %v at -eval-batch 500, %v at 16", c.name, ll, ls)
			}
		})
	}
}
