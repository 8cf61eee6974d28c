//go:build cgo

package nccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/internal/hangtest"
)

// Issue 26: faults of the CUDA runtime that the fake now stages.

// A kernel fault leaves the CUDA context with a sticky error: every later
// call returns it. An operation waiting for a peer then fails with it (it
// does not hang), later operations fail, and Close returns.
func TestStickyError(t *testing.T) {
	cs := bareWorld(t, 2, comm.Options{Timeout: time.Minute, PeerTimeout: time.Minute})
	b, err := staging.NewBuffer(cs[1].Device(), comm.Float32, 8)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := cs[1].AllReduce(ctx, b, comm.Sum) // rank 0 never joins: its kernel waits
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	cudafake.StickyError(t, 0)
	start := time.Now()
	err = w.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "illegal memory access") || ctx.Err() != nil {
		t.Fatalf("pending all_reduce after a sticky CUDA error: %v, want the error", err)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err := comm.Run(ctx)(cs[0].AllReduce(ctx, b, comm.Sum)); err == nil || ctx.Err() != nil {
		t.Fatalf("all_reduce after a sticky CUDA error: %v, want an error", err)
	}
	for r, c := range cs {
		if err := hangtest.Within(t, 10*time.Second, "Close after a sticky CUDA error", c.Close); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
	}
}

// Out of device memory: staging a host buffer through a GPU whose memory is
// used up fails with an error that says so (cudaErrorMemoryAllocation, the
// size and the device), and poisons the Comm (its peers would wait for the
// collective it could not issue); a new Comm works once memory is free.
func TestOutOfMemory(t *testing.T) {
	cudafake.RequireFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := comm.New(ctx, "nccl", comm.Config{Rank: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	x := make([]float32, 1<<20) // 4 MiB
	cudafake.MemLimit(t, 1<<20)
	err = comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(x), comm.Sum))
	var ce *cuda.Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "out of memory") || !strings.Contains(err.Error(), "cuda:0") {
		t.Fatalf("all_reduce of 4 MiB with 1 MiB of device memory: %v, want cudaErrorMemoryAllocation naming the device", err)
	}
	t.Logf("%v", err)
	if err := comm.Run(ctx)(c.Barrier(ctx)); err == nil {
		t.Fatal("the Comm still works after it could not issue an all_reduce")
	}
	cudafake.MemLimit(t, 0)
	c2, err := comm.New(ctx, "nccl", comm.Config{Rank: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := comm.Run(ctx)(c2.AllReduce(ctx, comm.FromSlice(x), comm.Sum)); err != nil {
		t.Fatalf("all_reduce once memory is free: %v", err)
	}
}

// A CUDA runtime newer than the driver finds no device
// (cudaErrorInsufficientDriver): NCCL is unusable, and says why.
func TestInsufficientDriver(t *testing.T) {
	cudafake.RequireFake(t)
	swapEnv(t, "FAKE_CUDA_DRIVER_VERSION", "11080")
	if ok, why := nccl.Usable(); ok || !strings.Contains(why, "insufficient") {
		t.Fatalf("Usable() with a driver older than the runtime = %v, %q", ok, why)
	}
	_, err := comm.New(context.Background(), "nccl", comm.Config{Rank: 0, Size: 1})
	if !errors.Is(err, nccl.ErrUnavailable) || !strings.Contains(err.Error(), "insufficient") {
		t.Fatalf("comm.New with a driver older than the runtime: %v", err)
	}
}
