package nccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Issue 17, items 1 and 8: a rank on GPU 6 makes no CUDA call on a thread
// with no device set, and its NCCL communicator is on GPU 6, with a CUDA 11
// runtime too
// (whose cudaSetDevice makes no context current: NCCL, which looks at the
// current context, would take device 0 unless cudaFree(NULL) made one).
func TestRankUsesOnlyItsGPU(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 6
	for _, rt := range []string{"11080", "12010"} {
		t.Run("cudart"+rt, func(t *testing.T) {
			swapEnv(t, "FAKE_CUDA_RUNTIME_VERSION", rt)
			cudafake.ResetContexts(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := nccl.New(ctx, comm.Config{Rank: 0, Size: 1, LocalRank: dev, LocalSize: dev + 1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Device() != dev {
				t.Fatalf("Device() = %d", c.Device())
			}
			x := []float32{1, 2, 3}
			d, err := cuda.Upload(dev, comm.FromSlice(x))
			if err != nil {
				t.Fatal(err)
			}
			defer cuda.FreeBuffer(d)
			for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg} {
				if err := comm.Run(ctx)(c.AllReduce(ctx, d, op)); err != nil {
					t.Fatalf("all_reduce on cuda:%d: %v", dev, err)
				}
			}
			if err := comm.Run(ctx)(c.Barrier(ctx)); err != nil {
				t.Fatal(err)
			}
			cudafake.NoImplicitContexts(t)
		})
	}
}
