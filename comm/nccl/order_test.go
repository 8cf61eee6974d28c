package nccl_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestOrderTiesStreams: a collective issued with a cuda.Order waits on the
// device for After (recorded on the caller's non-blocking stream, which
// the legacy default stream does not order) and records Done after
// itself, so that the caller's stream reads the result with no host
// waiting. The caller's stream is slowed (cudafake.StreamDelay) while it
// writes the input, and NCCL (cudafake.NCCLDelay) while it reduces: the
// all-reduce reads the written input and the stream reads the sums.
// Without the Order both reads would run ahead.
func TestOrderTiesStreams(t *testing.T) {
	cudafake.RequireFake(t)
	const n, count = 2, 64
	cs := bareWorld(t, n, comm.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type rank struct {
		s           *cuda.Stream
		after, done *cuda.Event
		buf         uintptr
		pin         []byte
	}
	rs := make([]rank, n)
	for r, c := range cs {
		dev := c.Device()
		rs[r] = rank{s: cudafake.NewStream(t, dev, true), after: cudafake.NewEvent(t, dev), done: cudafake.NewEvent(t, dev),
			buf: cudafake.Malloc(t, dev, 4*count), pin: cudafake.HostAlloc(t, dev, 4*count)}
		cudafake.StreamDelay(t, rs[r].s, 20*time.Millisecond)
	}
	cudafake.NCCLDelay(t, 50*time.Millisecond)
	ws := make([]comm.Work, n)
	for r, c := range cs {
		x := &rs[r]
		// every byte r+1: the float32 of bytes r+1
		if err := x.s.MemsetAsync(x.buf, byte(r+1), 4*count); err != nil {
			t.Fatal(err)
		}
		if err := x.after.Record(x.s); err != nil {
			t.Fatal(err)
		}
		var err error
		octx := cuda.WithOrder(ctx, cuda.Order{After: x.after, Done: x.done})
		if ws[r], err = c.AllReduce(octx, comm.DeviceBuffer(x.buf, c.Device(), comm.Float32, count), comm.Sum); err != nil {
			t.Fatal(err)
		}
		if err := x.s.WaitEvent(x.done); err != nil {
			t.Fatal(err)
		}
		if err := x.s.CopyAsync(uintptr(unsafe.Pointer(&x.pin[0])), x.buf, 4*count, cuda.DeviceToHost); err != nil {
			t.Fatal(err)
		}
	}
	var want float32
	for r := range cs {
		b := [4]byte{byte(r + 1), byte(r + 1), byte(r + 1), byte(r + 1)}
		want += *(*float32)(unsafe.Pointer(&b[0]))
	}
	for r := range cs {
		x := &rs[r]
		if err := x.s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := unsafe.Slice((*float32)(unsafe.Pointer(&x.pin[0])), count)
		for i, v := range got {
			if v != want {
				t.Fatalf("rank %d element %d: %v, want %v (a stream ran ahead of the other)", r, i, v, want)
			}
		}
	}
	if err := comm.WaitAll(ctx, ws...); err != nil {
		t.Fatal(err)
	}
}
