package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestNCCLOnFake: `train -backend nccl -nproc 2` on the fake CUDA and NCCL
// (gpu/cudafake; each launched worker a process on the GPU of its
// LOCAL_RANK, the fake's NCCL joining the processes) ends with the eval
// loss of `-backend shm` (the gradients are averaged by NCCL's rule, so
// the last bits may differ).
func TestNCCLOnFake(t *testing.T) {
	lib, err := cudafake.Build()
	if err != nil {
		t.Skipf("no fake CUDA: %v", err)
	}
	common := []string{"-nproc", "2", "-data", "synthetic", "-limit", "256", "-epochs", "1", "-batch", "16",
		"-seed", "5", "-json", "-progress=false"}
	run := func(backend string, env ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-backend", backend}, common...)...)
		cmd.Env = append(append(os.Environ(), "TRAIN_MAIN=1", "GORACE=atexit_sleep_ms=0"), env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("-backend %s: %v\n%s", backend, err, e.String())
		}
		return o.String()
	}
	nc := summary(t, run("nccl", cuda.EnvLibrary+"="+lib, cudafake.EnvNCCL+"="+lib, "FAKE_CUDA_DEVICES=2",
		"FAKE_NCCL_PROCESSES=1", "FAKE_NCCL_DIR="+t.TempDir()))
	sh := summary(t, run("shm"))
	if nc.Backend != "nccl" || nc.WorldSize != 2 || nc.Steps != sh.Steps {
		t.Fatalf("summaries: %+v / %+v", nc, sh)
	}
	if d := math.Abs(nc.EvalLoss - sh.EvalLoss); d > 1e-5*math.Abs(sh.EvalLoss) {
		t.Fatalf("eval loss %v (nccl) vs %v (shm): differ by %v", nc.EvalLoss, sh.EvalLoss, d)
	}
	t.Logf("eval loss %v (nccl on the fake), %v (shm)", nc.EvalLoss, sh.EvalLoss)
}
