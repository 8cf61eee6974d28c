package nccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/staging"
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
	if cuda.DeviceCount() <= dev {
		t.Skipf("needs %d GPUs, the fake has %d (FAKE_CUDA_DEVICES)", dev+1, cuda.DeviceCount())
	}
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
			d, err := staging.Upload(dev, comm.FromSlice(x))
			if err != nil {
				t.Fatal(err)
			}
			defer staging.FreeBuffer(d)
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

// Issue 17, item 2: Avg on floats is NCCL's: each input times fl(1/n), then
// summed, which differs from fl(sum)/n in the last bits at n = 3. The fake
// sums in rank order, so its result is exactly the reference's.
func TestAvgPreMultiplies(t *testing.T) {
	cudafake.RequireFake(t)
	const n, count = 3, 1000
	for _, dt := range []comm.DType{comm.Float32, comm.Float16, comm.BFloat16, comm.Float64} {
		differ := 0
		for i := 0; i < count; i++ {
			if commtest.ExpectedRule(dt, comm.Avg, n, i, commtest.AvgPreMultiply) != commtest.Expected(dt, comm.Avg, n, i) {
				differ++
			}
		}
		if differ == 0 {
			t.Fatalf("%v: the inputs do not tell the two ways of averaging apart", dt)
		}
		cs := newWorld(t, n, comm.Options{})
		err := commtest.RunRanks(context.Background(), cs, 20*time.Second, func(ctx context.Context, c comm.Comm) error {
			b := commtest.NewBuf(dt, count)
			commtest.Fill(dt, b.Host(), func(i int) float64 { return commtest.Input(dt, comm.Avg, c.Rank(), i) })
			if err := comm.Run(ctx)(c.AllReduce(ctx, b, comm.Avg)); err != nil {
				return err
			}
			return commtest.CheckElems(dt, b.Host(), count, commtest.ExpectedFuncRule(dt, comm.Avg, n, commtest.AvgPreMultiply))
		})
		if err != nil {
			t.Errorf("avg of %v over %d ranks (%d of %d elements differ between fl(sum)/n and the pre-multiplied sum): %v", dt, n, differ, count, err)
		}
	}
}

// Issue 17, item 4: a process that sees one GPU (Slurm's
// --gpus-per-task=1, a one-GPU pod) uses it whatever its local rank, and
// auto's UsableFor accepts it when the launcher named the one device.
func TestOneGPUPerProcess(t *testing.T) {
	cudafake.RequireFake(t)
	swapEnv(t, "FAKE_CUDA_DEVICES", "1", "CUDA_VISIBLE_DEVICES", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := nccl.New(ctx, comm.Config{Rank: 0, Size: 1, LocalRank: 2, LocalSize: 4})
	if err != nil {
		t.Fatalf("local rank 2 of 4 in a process that sees one GPU: %v", err)
	}
	defer c.Close()
	if c.Device() != 0 {
		t.Fatalf("Device() = %d, want 0", c.Device())
	}
	if err := comm.Run(ctx)(c.Barrier(ctx)); err != nil {
		t.Fatal(err)
	}
	if ok, why := nccl.UsableFor(4); !ok {
		t.Errorf("UsableFor(4) with one visible GPU per process: %s", why)
	}
}

// Issue 17, item 10: a buffer written by a copy to the device (queued on
// the legacy default stream, asynchronous to the host, and here completing
// 100 ms late) is what the collective reads: every NCCL launch makes its
// stream wait for the default stream first. Without that wait the
// all-reduce would read the buffer's stale bytes.
func TestCollectiveWaitsForDeviceCopies(t *testing.T) {
	cudafake.RequireFake(t)
	const n, count = 2, 1000
	cs := bareWorld(t, n, comm.Options{})
	bufs := make([]comm.Buffer, n)
	for r, c := range cs {
		bufs[r] = devBuffer(t, c.Device(), comm.Float32, count)
	}
	cudafake.CopyDelay(t, 100*time.Millisecond)
	defer cudafake.CopyDelay(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws := make([]comm.Work, n)
	for r, c := range cs {
		x := make([]float32, count)
		for i := range x {
			x[i] = float32(r + i)
		}
		if err := staging.Copy(bufs[r], comm.FromSlice(x)); err != nil {
			t.Fatal(err)
		}
		var err error
		if ws[r], err = c.AllReduce(ctx, bufs[r], comm.Sum); err != nil {
			t.Fatal(err)
		}
	}
	if err := comm.WaitAll(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	for r := range cs {
		got := make([]float32, count)
		if err := staging.Copy(comm.FromSlice(got), bufs[r]); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if want := float32(2*i + 1); v != want {
				t.Fatalf("rank %d element %d: %v, want %v (the all-reduce read the buffer before the copy to it was done)", r, i, v, want)
			}
		}
	}
}
