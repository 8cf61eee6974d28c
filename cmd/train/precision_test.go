package main

import (
	"strings"
	"testing"
)

// `train -device cuda -precision tf32|bf16` (the fake's GPU, whose cuBLAS
// rounds the products' inputs as the hardware does) trains the mlp to
// -device cpu's eval loss within 2% (bf16 autocast keeps 8 bits of each
// product's input; the summary says the precision), with ddp and with
// zero1, and not to -device cuda's fp32 eval loss (the precision reaches
// the device); -precision without -device cuda, or an unknown one, is
// refused by name.
func TestDevicePrecision(t *testing.T) {
	env := fakeCUDAEnv(t)
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "128", "-epochs", "1", "-batch", "16",
		"-seed", "5", "-json", "-progress=false", "-nproc", "1"}
	cpu := trainEnv(t, nil, common...)
	for _, strategy := range []string{"ddp", "zero1"} {
		fp32 := trainEnv(t, env, append([]string{"-device", "cuda", "-strategy", strategy}, common...)...)
		for _, p := range []string{"tf32", "bf16"} {
			gpu := trainEnv(t, env, append([]string{"-device", "cuda", "-strategy", strategy, "-precision", p}, common...)...)
			t.Logf("%s %s: eval loss %v (cuda), %v (cuda, fp32), %v (cpu)", strategy, p, gpu.EvalLoss, fp32.EvalLoss, cpu.EvalLoss)
			if gpu.Precision != p || fp32.Precision != "fp32" || cpu.Precision != "" {
				t.Errorf("summaries' precision: %q (cuda %s), %q (cuda fp32), %q (cpu)", gpu.Precision, p, fp32.Precision, cpu.Precision)
			}
			if !near(gpu.EvalLoss, cpu.EvalLoss, 0.02) {
				t.Errorf("%s %s: eval loss %v, cpu %v", strategy, p, gpu.EvalLoss, cpu.EvalLoss)
			}
			if gpu.EvalLoss == fp32.EvalLoss {
				t.Errorf("%s %s: eval loss %v, fp32's on the device: the precision did not reach the device", strategy, p, gpu.EvalLoss)
			}
		}
	}
	for _, c := range []struct{ args, want []string }{
		{[]string{"-precision", "bf16"}, []string{"-precision bf16", "-device cuda"}},
		{[]string{"-device", "cuda", "-precision", "fp16"}, []string{`-precision "fp16"`, "bf16"}},
	} {
		_, errOut, err := trainCmd(t, append(c.args, common...)...)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: %q does not say %q", c.args, errOut, w)
			}
		}
	}
}
