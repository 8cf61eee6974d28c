package staging_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestOrderAfter: a host backend given device buffers written on a
// non-blocking stream (which cudaMemcpy on the legacy default stream does
// not wait for) reads them after the cuda.Order's After event, recorded
// on that stream when the all-reduce is issued: with the stream slowed
// (cudafake.StreamDelay) the sums are of the written values. Without the
// Order the copy in would read them before the memset ran.
func TestOrderAfter(t *testing.T) {
	cudafake.RequireFake(t)
	const n, count = 2, 64
	cs := newWorld(t, "inproc", n)
	type rank struct {
		s     *cuda.Stream
		after *cuda.Event
		buf   uintptr
	}
	rs := make([]rank, n)
	for r := range rs {
		rs[r] = rank{s: cudafake.NewStream(t, 0, true), after: cudafake.NewEvent(t, 0), buf: cudafake.Malloc(t, 0, 4*count)}
		if err := cuda.Memset(0, rs[r].buf, 0, 4*count); err != nil {
			t.Fatal(err)
		}
	}
	if err := cuda.DeviceSynchronize(0); err != nil {
		t.Fatal(err)
	}
	for r := range rs {
		cudafake.StreamDelay(t, rs[r].s, 50*time.Millisecond)
	}
	run(t, cs, func(ctx context.Context, c comm.Comm) error {
		x := &rs[c.Rank()]
		if err := x.s.MemsetAsync(x.buf, byte(c.Rank()+1), 4*count); err != nil {
			return err
		}
		if err := x.after.Record(x.s); err != nil {
			return err
		}
		octx := cuda.WithOrder(ctx, cuda.Order{After: x.after})
		return comm.Run(ctx)(c.AllReduce(octx, comm.DeviceBuffer(x.buf, 0, comm.Float32, count), comm.Sum))
	})
	var want float32
	for r := range rs {
		b := [4]byte{byte(r + 1), byte(r + 1), byte(r + 1), byte(r + 1)}
		want += *(*float32)(unsafe.Pointer(&b[0]))
	}
	for r := range rs {
		got := make([]float32, count)
		if err := cuda.DeviceSynchronize(0); err != nil {
			t.Fatal(err)
		}
		if err := cuda.CopyDtoH(0, unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*count), rs[r].buf); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != want {
				t.Fatalf("rank %d element %d: %v, want %v (staged before the stream wrote it)", r, i, v, want)
			}
		}
	}
}

// Issue 28: the host's wait for a cuda.Order's After event (before the
// device buffers are copied in and before the results are copied out)
// costs (nearly) no CPU while the writer's stream works, as comm/nccl's
// watcher's (TestWaitCostsNoCPU there) and a training step's end
// (devmodel's TestStepWaitCostsNoCPU). The fake spins a plain event's
// host wait as CUDA's default scheduling does (cudafake.SpinWaits) and
// starts the writer's stream's work late (StreamDelay): over five such
// all-reduces the process used under 10% of a core (a spinning wait, as
// After.Synchronize was, uses a whole core, or whatever share of one a
// loaded machine gives it). No wall-clock bound.
func TestAfterWaitCostsNoCPU(t *testing.T) {
	cudafake.RequireFake(t)
	const count, ops, hold = 64, 5, 100 * time.Millisecond
	c := newWorld(t, "inproc", 1)[0]
	s, after, buf := cudafake.NewStream(t, 0, true), cudafake.NewEvent(t, 0), cudafake.Malloc(t, 0, 4*count)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	allReduce := func() error {
		if err := s.MemsetAsync(buf, 0, 4*count); err != nil {
			return err
		}
		if err := after.Record(s); err != nil {
			return err
		}
		octx := cuda.WithOrder(ctx, cuda.Order{After: after})
		return comm.Run(ctx)(c.AllReduce(octx, comm.DeviceBuffer(buf, 0, comm.Float32, count), comm.Sum))
	}
	if err := allReduce(); err != nil { // warm: staging memory, the waits' own resources
		t.Fatal(err)
	}
	cudafake.SpinWaits(t, true)
	cudafake.StreamDelay(t, s, hold)
	cpu0, wall0 := cudafake.CPUTime(t), time.Now()
	for i := 0; i < ops; i++ {
		if err := allReduce(); err != nil {
			t.Fatal(err)
		}
	}
	cpu, wall := cudafake.CPUTime(t)-cpu0, time.Since(wall0)
	cudafake.StreamDelay(t, s, 0)
	t.Logf("%d all-reduces waiting for a slowed stream: %v, %v of CPU (%.2f%%)", ops, wall.Round(time.Millisecond), cpu, 100*cpu.Seconds()/wall.Seconds())
	if wall < ops*hold {
		t.Fatalf("%d all-reduces took %v, not the stream's delays: the test measures nothing", ops, wall)
	}
	if cpu > wall/10 {
		t.Errorf("the process used %v of CPU during %v of all-reduces: the wait for the After event spins", cpu, wall)
	}
}
