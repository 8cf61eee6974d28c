package staging_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/internal/hangtest"
)

// heldAfter returns an event recorded on a stream that the fake holds
// (cudafake.HoldFunc, as a kernel waits for a peer that is gone) until
// the returned release runs (at the latest when t ends): a cuda.Order's
// After that does not complete.
func heldAfter(t *testing.T) (after *cuda.Event, release func()) {
	t.Helper()
	if !cuda.HasHostFunc() {
		t.Skip("no cudaLaunchHostFunc")
	}
	s, after := cudafake.NewStream(t, 0, true), cudafake.NewEvent(t, 0)
	cudafake.Gate(t, false)
	if err := s.LaunchHostFunc(cudafake.HoldFunc(t), 0); err != nil {
		cudafake.Gate(t, true)
		t.Fatal(err)
	}
	if err := after.Record(s); err != nil {
		cudafake.Gate(t, true)
		t.Fatal(err)
	}
	release = func() {
		cudafake.Gate(t, true)
		if err := s.Synchronize(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(release)
	return after, release
}

// Issue 28 follow-up: a collective whose cuda.Order's After event never
// completes (its stream stuck behind a peer that is gone) does not block
// forever: the host's wait for it ends with the operation's ctx, or with
// the wrapped Comm's operation timeout (Options.Timeout), whichever comes
// first, with an error naming the operation and the rank; the Comm is
// then failed (later operations return that error). The wait before the
// device buffers are copied in fails the issue (an all-reduce); the one
// before the results are copied out fails the Work (a broadcast's
// receiver, which does not wait at its issue). Before, each blocked
// until After completed.
func TestAfterWaitBounded(t *testing.T) {
	cudafake.RequireFake(t)
	const count = 16
	buf := cudafake.Malloc(t, 0, 4*count)
	dbuf := comm.DeviceBuffer(buf, 0, comm.Float32, count)

	t.Run("ctx/in", func(t *testing.T) {
		c := newWorld(t, "inproc", 1)[0]
		t.Cleanup(func() { c.Close() }) // after heldAfter's release: a wait that hangs holds the Comm
		after, _ := heldAfter(t)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		octx := cuda.WithOrder(ctx, cuda.Order{After: after})
		err := hangtest.Within(t, time.Minute, "an all-reduce after a held stream", func() error {
			return comm.Run(ctx)(c.AllReduce(octx, dbuf, comm.Sum))
		})
		t.Logf("all-reduce: %v", err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "all_reduce on rank 0") ||
			!strings.Contains(err.Error(), "After event is not done") {
			t.Errorf("an all-reduce whose After never completes, under a 200ms ctx: %v, want ctx's error naming the all_reduce, rank 0 and the After event", err)
		}
		if _, err2 := c.AllReduce(context.Background(), comm.FromSlice(make([]float32, 1)), comm.Sum); err2 == nil {
			t.Errorf("the Comm goes on after a failed wait")
		}
	})

	t.Run("timeout/in", func(t *testing.T) {
		cs, err := inproc.New(1, comm.Options{Timeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c := staging.Wrap(cs[0])
		t.Cleanup(func() { c.Close() })
		after, _ := heldAfter(t)
		ctx := context.Background() // no deadline: the Comm's timeout bounds the wait
		octx := cuda.WithOrder(ctx, cuda.Order{After: after})
		err = hangtest.Within(t, time.Minute, "an all-reduce after a held stream", func() error {
			return comm.Run(ctx)(c.AllReduce(octx, dbuf, comm.Sum))
		})
		t.Logf("all-reduce: %v", err)
		if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "all_reduce on rank 0") ||
			!strings.Contains(err.Error(), "within 200ms") {
			t.Errorf("an all-reduce whose After never completes, on a Comm with a 200ms timeout: %v, want comm.ErrTimeout naming the all_reduce, rank 0 and the timeout", err)
		}
	})

	t.Run("ctx/out", func(t *testing.T) {
		cs := newWorld(t, "inproc", 2)
		t.Cleanup(func() { cs[0].Close(); cs[1].Close() })
		after, release := heldAfter(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bctx, bcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer bcancel()
		src := make([]float32, count)
		w0, err := cs[0].Broadcast(ctx, comm.FromSlice(src), 0)
		if err != nil {
			t.Fatal(err)
		}
		w1, err := cs[1].Broadcast(cuda.WithOrder(bctx, cuda.Order{After: after}), dbuf, 0)
		if err != nil {
			t.Fatalf("rank 1's broadcast, a receiver, waited for After at its issue: %v", err)
		}
		if err := w0.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		err = hangtest.Within(t, time.Minute, "a broadcast received after a held stream", func() error {
			<-w1.Done() // the Work itself, not Wait's ctx, ends
			return w1.Err()
		})
		t.Logf("broadcast on rank 1: %v", err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "broadcast on rank 1") ||
			!strings.Contains(err.Error(), "readers") {
			t.Errorf("a broadcast received with an After that never completes, under a 200ms ctx: %v, want ctx's error naming the broadcast, rank 1 and the wait for the buffers' readers", err)
		}
		release()
	})
}
