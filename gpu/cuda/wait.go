package cuda

import (
	"runtime"
	"sync/atomic"
	"time"
)

// The bounds of a Waiter's spin: before it blocks on an event it polls
// it for between SpinMin and SpinMax.
const (
	SpinMin = 2 * time.Microsecond
	SpinMax = 100 * time.Microsecond
)

// A Waiter waits for events without spinning a host core for long: it
// polls the event (cudaEventQuery, yielding the thread between polls)
// for a while, which completes short waits without a thread wake-up,
// then blocks in the driver. The event should come from NewBlockingEvent
// (cudaEventBlockingSync): the thread then sleeps until the device
// signals it. (Under CUDA's default scheduling, cudaStreamSynchronize and
// the Synchronize of any other event spin a core for the whole wait.)
//
// How long it polls adapts, between SpinMin and SpinMax: after a wait
// that took at most SpinMax, the spin doubles; after a longer one it
// halves. On a stream whose work takes long (a training step, a
// collective waiting for slow peers), it shrinks to a few polls, and
// waiting costs (nearly) no CPU.
//
// The zero Waiter is ready to use (it starts at SpinMax). Wait is for
// one goroutine at a time; Stats may be called from any.
type Waiter struct {
	spin          time.Duration
	polls, blocks atomic.Int64
}

// Wait returns once the work recorded before e is done, or once done
// (which may be nil) reports true (checked between polls: something else
// finished the wait). It blocks.
func (w *Waiter) Wait(e *Event, done func() bool) error {
	if w.spin == 0 {
		w.spin = SpinMax
	}
	start := time.Now()
	err := w.poll(e, done, start)
	if time.Since(start) <= SpinMax {
		w.spin = min(2*w.spin, SpinMax)
	} else {
		w.spin = max(w.spin/2, SpinMin)
	}
	return err
}

func (w *Waiter) poll(e *Event, done func() bool, start time.Time) error {
	for done == nil || !done() {
		ok, err := e.Query()
		w.polls.Add(1)
		if err != nil || ok {
			return err
		}
		if time.Since(start) >= w.spin {
			w.blocks.Add(1)
			return e.Synchronize()
		}
		runtime.Gosched()
	}
	return nil
}

// Stats are the event polls and the blocking waits so far.
func (w *Waiter) Stats() (polls, blocks int64) { return w.polls.Load(), w.blocks.Load() }
