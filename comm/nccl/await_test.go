//go:build cgo

package nccl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/internal/hangtest"
)

// Issue 28: waiting for collectives that take long on the device (the
// fake's NCCL held 200 ms each, as a kernel waits for a slow peer) costs
// the host (nearly) no CPU: the watcher polls the event briefly and then
// blocks in the driver. Over five such waits the whole process used under
// 10% of a core (about 2-3% here: its timers and the monitor's polls; a
// polling loop uses a core, or whatever share of one a loaded machine
// gives it), the watcher blocked once a wait, and its spin shrank to a few
// polls (a fixed 100 us spin: a few hundred per wait; a polling loop:
// hundreds of thousands). No wall-clock bound: a loaded machine only makes
// the waits' CPU share smaller.
func TestWaitCostsNoCPU(t *testing.T) {
	cudafake.RequireFake(t)
	const hold, waits = 100 * time.Millisecond, 5
	c := bareWorld(t, 1, comm.Options{Timeout: time.Minute})[0]
	defer c.Close()
	b := devBuffer(t, c.Device(), comm.Float32, 64)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := comm.Run(ctx)(c.AllReduce(ctx, b, comm.Sum)); err != nil { // warm
		t.Fatal(err)
	}
	cudafake.NCCLDelay(t, hold)
	// A first held wait, not measured: the first blocking wait of a
	// process costs some milliseconds once (threads started).
	if err := comm.Run(ctx)(c.AllReduce(ctx, b, comm.Sum)); err != nil {
		t.Fatal(err)
	}
	var cpu, wall time.Duration
	var polls []int64
	for i := 0; i < waits; i++ {
		q0, b0 := nccl.WaitStats(c)
		cpu0, wall0 := cudafake.CPUTime(t), time.Now()
		if err := comm.Run(ctx)(c.AllReduce(ctx, b, comm.Sum)); err != nil {
			t.Fatal(err)
		}
		cpu += cudafake.CPUTime(t) - cpu0
		w := time.Since(wall0)
		wall += w
		q, bl := nccl.WaitStats(c)
		polls = append(polls, q-q0)
		if w < hold {
			t.Fatalf("the all_reduce took %v, less than the fake's hold %v: the test measures nothing", w, hold)
		}
		if bl-b0 != 1 {
			t.Errorf("wait %d: the watcher blocked %d times, want once", i, bl-b0)
		}
	}
	t.Logf("%d waits of %v: %v of CPU (%.2f%%), event polls %v", waits, wall.Round(time.Millisecond), cpu, 100*cpu.Seconds()/wall.Seconds(), polls)
	if cpu > wall/10 {
		t.Errorf("the process used %v of CPU during %v of waiting: the wait spins", cpu, wall)
	}
	if last := polls[len(polls)-1]; last > 50 {
		t.Errorf("the watcher polled the event %d times in the last wait (polls per wait %v): its spin did not shrink", last, polls)
	}
}

// While the watcher is blocked in the driver on an operation that waits
// for a peer (rank 1 never joins rank 0's all_reduce: its kernel waits
// until aborted), the operation's ctx still ends it: the Work fails with
// the ctx's error, and the Comm is poisoned (the communicator aborted,
// which ends the kernel and the blocked wait).
func TestCtxEndsBlockedWait(t *testing.T) {
	cudafake.RequireFake(t)
	cs := bareWorld(t, 2, comm.Options{Timeout: time.Minute, PeerTimeout: time.Minute})
	c := cs[0]
	b, err := staging.NewBuffer(c.Device(), comm.Float32, 64)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	octx, ocancel := context.WithCancel(ctx)
	w, err := c.AllReduce(octx, b, comm.Sum)
	if err != nil {
		t.Fatal(err)
	}
	for _, bl0 := nccl.WaitStats(c); ; time.Sleep(time.Millisecond) { // the watcher blocks
		if _, bl := nccl.WaitStats(c); bl > bl0 {
			break
		}
	}
	ocancel()
	if err := hangtest.Within(t, 20*time.Second, "the Work of a cancelled all_reduce", func() error { return w.Wait(ctx) }); !errors.Is(err, context.Canceled) {
		t.Fatalf("the all_reduce after its ctx was cancelled: %v, want context.Canceled", err)
	}
	if err := comm.Run(ctx)(c.AllReduce(ctx, b, comm.Sum)); err == nil {
		t.Fatal("an all_reduce after the cancelled one succeeded: the Comm should be poisoned")
	}
	for r, c := range cs {
		if err := hangtest.Within(t, 20*time.Second, "Close", c.Close); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
	}
}
