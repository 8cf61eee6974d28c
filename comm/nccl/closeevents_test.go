//go:build cgo

package nccl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Closing a Comm while collectives are in flight frees their CUDA events
// too (once the device is done with them), not only those of the Works
// already completed: a strategy's Close after a step that left its last
// collectives unwaited (train/dp's device strategies) leaked one event a
// collective (TestDeviceCloseFreesSyncBN there failed now and then).
func TestCloseFreesPendingEvents(t *testing.T) {
	cudafake.RequireFake(t)
	live := cudafake.LiveEvents(t)
	c := bareWorld(t, 1, comm.Options{Timeout: time.Minute})[0]
	b := devBuffer(t, c.Device(), comm.Float32, 64)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cudafake.NCCLDelay(t, 200*time.Millisecond)
	var ws []comm.Work
	for i := 0; i < 3; i++ {
		w, err := c.AllReduce(ctx, b, comm.Sum)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		if err := w.Wait(ctx); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("collective %d: %v, want comm.ErrClosed", i, err)
		}
	}
	// (the count is the process's: other tests' Comms may still be
	// freeing theirs, so fewer than before is fine)
	got := cudafake.LiveEvents(t)
	for end := time.Now().Add(time.Minute); got > live && time.Now().Before(end); got = cudafake.LiveEvents(t) {
		time.Sleep(10 * time.Millisecond)
	}
	if got > live {
		t.Errorf("%d CUDA events alive after the Comm was closed with 3 collectives in flight, %d before", got, live)
	}
}
