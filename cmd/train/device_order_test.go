package main

import (
	"testing"

	"github.com/gdist/gdist/train"
)

// TestDeviceStreamOrdering: the device strategies compute on a
// non-blocking stream and order it with NCCL's streams (and the legacy
// default stream) by events alone (train/dp's device_order.go, train/pp's
// device.go, gpu/devmodel's streams.go), so a run where every kernel
// and GEMM of the fake starts 2 ms late (FAKE_CUDA_KERNEL_DELAY_MS: the
// compute stream runs far behind the host and NCCL), or where every
// NCCL operation starts 20 ms late (FAKE_NCCL_DELAY_MS: the reductions
// and gathers end long after the compute stream could have read their
// buffers), trains bit for bit as the run at full speed: train loss,
// eval loss, accuracy and median gradient norm. A missing wait (NCCL
// reading gradients backward has not written, an update reading
// gradients NCCL has not averaged, a unit's ops reading parameters its
// gather has not brought, a block reused while its readers run) changes
// them. 2 ranks over NCCL on the fake's one GPU: DDP with small buckets
// (overlapped with backward) and without overlap, ZeRO-1 with buckets,
// ZeRO-2 and ZeRO-3 with a unit per layer (ZeRO-3 prefetching the next
// unit's parameters), and a 2-stage pipeline (1F1B, 3 micro-batches)
// over NCCL.
func TestDeviceStreamOrdering(t *testing.T) {
	common := []string{"-model", "mlp", "-data", "synthetic", "-limit", "64", "-epochs", "1", "-seed", "5",
		"-clip-grad", "1", "-json", "-progress=false", "-device", "cuda", "-nproc", "2", "-backend", "nccl"}
	small := []string{"-first-bucket-mb", "0.05", "-bucket-mb", "0.2"}
	units := []string{"-bucket-mb", "0.01"}
	cases := []struct {
		name string
		args []string
		pipe bool
	}{
		{"ddp", append([]string{"-strategy", "ddp", "-batch", "8"}, small...), false},
		{"ddp-no-overlap", []string{"-strategy", "ddp", "-batch", "8", "-no-overlap"}, false},
		{"zero1", append([]string{"-strategy", "zero1", "-batch", "8"}, small...), false},
		{"zero2", append([]string{"-strategy", "zero2", "-batch", "8"}, units...), false},
		{"zero3", append([]string{"-strategy", "zero3", "-batch", "8"}, units...), false},
		{"pipeline", []string{"-strategy", "pipeline", "-batch", "16", "-microbatches", "3"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string(nil), c.args...), common...)
			run := func(delay ...string) train.Summary {
				env := append(ncclSharedEnv(t), delay...)
				if c.pipe {
					return trainPipe(t, env, args...).Summary
				}
				return trainEnv(t, env, args...)
			}
			base := run()
			for _, d := range []string{"FAKE_CUDA_KERNEL_DELAY_MS=2", "FAKE_NCCL_DELAY_MS=20"} {
				got := run(d)
				if got.Steps != base.Steps || got.Steps == 0 {
					t.Fatalf("%s: %d steps, %d at full speed", d, got.Steps, base.Steps)
				}
				for _, v := range [][3]any{{"train loss", got.TrainLoss, base.TrainLoss}, {"eval loss", got.EvalLoss, base.EvalLoss},
					{"test accuracy", got.TestAccuracy, base.TestAccuracy}, {"grad norm p50", got.GradNormP50, base.GradNormP50}} {
					if v[1].(float64) != v[2].(float64) {
						t.Errorf("%s: %s %v, %v at full speed", d, v[0], v[1], v[2])
					}
				}
			}
			t.Logf("%d steps: train loss %v, eval loss %v, bit for bit with the compute or NCCL slowed", base.Steps, base.TrainLoss, base.EvalLoss)
		})
	}
}
