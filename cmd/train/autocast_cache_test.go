package main

import (
	"testing"

	"github.com/gdist/gdist/gpu/gemm"
)

// `train -device cuda -precision bf16` with the weight cache of bf16
// autocast (gpu/gemm: each weight cast once per update) ends bit for bit
// where it ends with the cache off ($GDIST_AUTOCAST_CACHE=0, every
// product casting its operands): train and eval losses equal, for each
// way the parameters change between steps: ddp's update on every rank,
// zero1's and zero2's update of a shard followed by the all-gather of
// the others' shards into the cached parameters, zero3's gathered units
// (not cached), a 2-stage pipeline's stage updates, 2 ranks over the
// fake's NCCL (the pipeline over shared memory).
func TestDeviceBF16WeightCacheUnchanged(t *testing.T) {
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "96", "-epochs", "1", "-seed", "5", "-batch", "16",
		"-precision", "bf16", "-clip-grad", "1", "-json", "-progress=false", "-device", "cuda", "-nproc", "2"}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"ddp", []string{"-strategy", "ddp", "-backend", "nccl"}},
		{"zero1", []string{"-strategy", "zero1", "-backend", "nccl"}},
		{"zero2", []string{"-strategy", "zero2", "-backend", "nccl"}},
		{"zero3", []string{"-strategy", "zero3", "-backend", "nccl"}},
		{"pipeline", []string{"-strategy", "pipeline", "-microbatches", "3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(cache string) (train, eval float64) {
				env := append(ncclSharedEnv(t), gemm.EnvAutocastCache+"="+cache)
				if c.name == "pipeline" {
					env = append(fakeCUDAEnv(t), gemm.EnvAutocastCache+"="+cache)
					s := trainPipe(t, env, append(c.args, common...)...)
					return s.TrainLoss, s.EvalLoss
				}
				s := trainEnv(t, env, append(c.args, common...)...)
				if s.Precision != "bf16" {
					t.Fatalf("precision %q", s.Precision)
				}
				return s.TrainLoss, s.EvalLoss
			}
			tc, ec := run("1")
			tu, eu := run("0")
			if tc != tu || ec != eu {
				t.Errorf("train loss %v, eval loss %v with the weight cache; %v and %v without", tc, ec, tu, eu)
			}
			t.Logf("%s bf16: train loss %v, eval loss %v, with the cache and without", c.name, tc, ec)
		})
	}
}

// GDIST_BF16_CAST=cublas (gpu/gemm's CastInCUBLAS: the fp32 operands
// rounded inside cuBLAS, CUBLAS_COMPUTE_32F_FAST_16BF, nothing cast) on
// the fake, whose cuBLAS rounds them as gdist's cast kernel does: the
// same training to the bit as the default, for the mlp and a small gpt.
func TestDeviceBF16CastInCUBLAS(t *testing.T) {
	for _, model := range []string{"mlp", "gpt-L1-D16-H2-T8"} {
		t.Run(model, func(t *testing.T) {
			common := []string{"-model", model, "-data", "synthetic", "-limit", "96", "-epochs", "1", "-seed", "5", "-batch", "16",
				"-precision", "bf16", "-json", "-progress=false", "-device", "cuda", "-nproc", "1"}
			if model != "mlp" { // gpt's defaults: AdamW, clipping
				common = []string{"-model", model, "-data", codeText(t), "-steps", "6", "-warmup", "2", "-eval-every", "0", "-eval-batch", "64",
					"-seed", "2", "-batch", "4", "-precision", "bf16", "-json", "-progress=false", "-device", "cuda", "-nproc", "1"}
			}
			kern := trainEnv(t, append(fakeCUDAEnv(t), gemm.EnvBF16Cast+"=kernel"), common...)
			in := trainEnv(t, append(fakeCUDAEnv(t), gemm.EnvBF16Cast+"=cublas"), common...)
			if kern.TrainLoss != in.TrainLoss || kern.EvalLoss != in.EvalLoss {
				t.Errorf("train loss %v, eval loss %v cast inside cuBLAS; %v and %v by the cast kernel", in.TrainLoss, in.EvalLoss, kern.TrainLoss, kern.EvalLoss)
			}
			t.Logf("%s bf16: train loss %v, eval loss %v either way", model, in.TrainLoss, in.EvalLoss)
		})
	}
}
