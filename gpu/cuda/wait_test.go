package cuda_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestWaiterSleeps: a Waiter's waits for a blocking-sync event behind
// slow work (the fake's StreamDelay) return once the work is done, each
// after blocking in the driver once, and cost (nearly) no CPU even where
// host waits spin (cudafake.SpinWaits, as CUDA's default scheduling),
// while the same wait with Synchronize on a plain event spins: the
// measure is the process's CPU time, not wall time. A wait that the work
// beats is polled, not blocked on.
func TestWaiterSleeps(t *testing.T) {
	cudafake.RequireFake(t)
	const dev, hold, waits = 0, 50 * time.Millisecond, 4
	s, plain, buf := cudafake.NewStream(t, dev, true), cudafake.NewEvent(t, dev), cudafake.Malloc(t, dev, 64)
	blocking, err := cuda.NewBlockingEvent(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer blocking.Destroy()
	var w cuda.Waiter
	if err := s.MemsetAsync(buf, 1, 64); err != nil { // not delayed: polled
		t.Fatal(err)
	}
	if err := blocking.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(blocking, nil); err != nil {
		t.Fatal(err)
	}
	cudafake.SpinWaits(t, true)
	cudafake.StreamDelay(t, s, hold)
	measure := func(e *cuda.Event, wait func() error) (cpu, wall time.Duration) {
		t.Helper()
		for i := 0; i < waits; i++ {
			if err := s.MemsetAsync(buf, byte(i), 64); err != nil {
				t.Fatal(err)
			}
			if err := e.Record(s); err != nil {
				t.Fatal(err)
			}
			cpu0, wall0 := cudafake.CPUTime(t), time.Now()
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			cpu += cudafake.CPUTime(t) - cpu0
			wall += time.Since(wall0)
			if done, err := e.Query(); err != nil || !done {
				t.Fatalf("wait %d returned before the work was done (%v)", i, err)
			}
		}
		if wall < waits*hold {
			t.Fatalf("%d waits took %v, less than the fake's delays: the test measures nothing", waits, wall)
		}
		return cpu, wall
	}
	_, b0 := w.Stats()
	cpu, wall := measure(blocking, func() error { return w.Wait(blocking, nil) })
	polls, blocks := w.Stats()
	t.Logf("Waiter: %d waits of %v: %v of CPU (%.2f%%), %d polls, %d blocking", waits, wall.Round(time.Millisecond), cpu, 100*cpu.Seconds()/wall.Seconds(), polls, blocks-b0)
	if cpu > wall/10 {
		t.Errorf("the Waiter's waits used %v of CPU in %v: they spin", cpu, wall)
	}
	if blocks-b0 != waits {
		t.Errorf("the Waiter blocked %d times in %d waits, want once each", blocks-b0, waits)
	}
	scpu, swall := measure(plain, plain.Synchronize)
	t.Logf("Synchronize on a plain event: %v of CPU in %v", scpu, swall.Round(time.Millisecond))
	// the bound the Waiter must stay under: a spin above it shows the
	// fake spins (on a loaded machine a spinning thread gets only its
	// share of a core, so nothing stricter)
	if scpu < swall/10 {
		t.Errorf("with the fake's SpinWaits a plain event's Synchronize used only %v of CPU in %v: the fake does not spin, the test shows nothing", scpu, swall)
	}
}

// A Waiter waits on the host for work queued on a stream: a brief
// poll, then asleep in the driver until the device is done, no host core
// busy meanwhile (a blocking-sync event: cuda.NewBlockingEvent).
func ExampleWaiter() {
	if cudafake.Mode() == "none" {
		fmt.Println("done") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	s, err := cuda.NewStream(dev, true)
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	e, err := cuda.NewBlockingEvent(dev)
	if err != nil {
		panic(err)
	}
	defer e.Destroy()
	buf, err := cuda.Malloc(dev, 1<<20)
	if err != nil {
		panic(err)
	}
	defer cuda.Free(dev, buf)
	if err := s.MemsetAsync(buf, 0, 1<<20); err != nil { // ... a step's work
		panic(err)
	}
	if err := e.Record(s); err != nil {
		panic(err)
	}
	var w cuda.Waiter // one per waiting goroutine: its spin adapts to the work
	if err := w.Wait(e, nil); err != nil {
		panic(err)
	}
	fmt.Println("done")
	// Output: done
}
