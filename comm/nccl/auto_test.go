package nccl_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/auto"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestAutoPicksNCCL: the auto backend takes NCCL when every rank has a GPU
// of its own, and not when a host runs more ranks than it has GPUs (a
// machine with one GPU and two ranks, issue 26 item 1) or GDIST_AUTO_NCCL=0;
// an auto world of two ranks all-reduces host buffers (over NCCL with two
// GPUs, else over the host backends).
func TestAutoPicksNCCL(t *testing.T) {
	cudafake.RequireCUDA(t)
	if ok, why := nccl.Usable(); !ok {
		t.Skipf("no NCCL: %s", why)
	}
	noGPUAssignment(t)
	gpus := cuda.DeviceCount()
	pick := func(localSize int) ([]bool, []string) { return pickNCCL(t, localSize) }
	use, why := pick(2)
	switch {
	case gpus >= 2 && (!use[0] || !use[1]):
		t.Errorf("2 ranks with a GPU each: use nccl %v (%v)", use, why)
	case gpus < 2 && (use[0] || use[1] || !strings.Contains(why[0], "GPU")):
		t.Errorf("2 ranks on %d GPU: use nccl %v, why %q", gpus, use, why)
	}
	if use, why := pick(1000); use[0] || use[1] || !strings.Contains(why[0], "GPU") {
		t.Errorf("more ranks than GPUs: use nccl %v, why %q", use, why)
	}
	t.Setenv(auto.EnvNCCL, "0")
	if use, why := pick(2); use[0] || use[1] || !strings.Contains(why[1], auto.EnvNCCL) {
		t.Errorf("%s=0: use nccl %v, why %q", auto.EnvNCCL, use, why)
	}
	t.Setenv(auto.EnvNCCL, "")

	ss := stores(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	bufs := [][]float32{{1, 2, 3}, {10, 20, 30}}
	for r := range 2 {
		wg.Go(func() {
			c, err := comm.New(ctx, "auto", comm.Config{Rank: r, Size: 2, LocalRank: r, LocalSize: 2, Store: ss[r], Job: t.Name() + "/world"})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(bufs[r]), comm.Sum)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for r, b := range bufs {
		if b[0] != 11 || b[1] != 22 || b[2] != 33 {
			t.Errorf("rank %d: %v, want [11 22 33]", r, b)
		}
	}
}

// pickNCCL runs auto.PickNCCL for two ranks of one host (local ranks 0
// and 1 of localSize) and returns each rank's verdict and reason.
func pickNCCL(t *testing.T, localSize int) ([]bool, []string) {
	t.Helper()
	ss := stores(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	use, why := make([]bool, 2), make([]string, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			var err error
			use[r], why[r], err = auto.PickNCCL(ctx, comm.Config{Rank: r, Size: 2, LocalRank: r, LocalSize: localSize, Store: ss[r], Job: t.Name()})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return use, why
}

// A container that shows its one GPU to every process
// (NVIDIA_VISIBLE_DEVICES=0, as on the lent H200 of 2026-11-27) runs two
// local ranks on one GPU: each process "sees one GPU", but the ranks
// name the same one (nccl.GPUOf), so auto stays off NCCL (which would
// fail with "Duplicate GPU detected") and says why.
func TestAutoRefusesSharedVisibleGPU(t *testing.T) {
	cudafake.RequireFake(t)
	noGPUAssignment(t)
	swapEnv(t, "FAKE_CUDA_DEVICES", "1", "NVIDIA_VISIBLE_DEVICES", "0")
	if ok, why := nccl.UsableFor(2); !ok {
		t.Fatalf("UsableFor(2) with one visible GPU: %s (the check below would not be reached)", why)
	}
	use, why := pickNCCL(t, 2)
	for r := range 2 {
		if use[r] || !strings.Contains(why[r], "ranks 0 and 1 would both use GPU") || !strings.Contains(why[r], "NCCL needs one GPU per rank") {
			t.Errorf("rank %d: use nccl %v, why %q", r, use[r], why[r])
		}
	}
	gpu, err := nccl.GPUOf(comm.Config{Rank: 0, Size: 2, LocalRank: 1, LocalSize: 2})
	if err != nil || !strings.Contains(gpu, "/") {
		t.Errorf("GPUOf: %q, %v", gpu, err)
	}
}
