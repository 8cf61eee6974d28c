package staging

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
)

// The host's wait for a cuda.Order's After event (the caller's, often a
// plain event, whose Synchronize spins a core for the whole wait under
// CUDA's default scheduling) goes through a stream of the staging
// Comm's own on the event's device: the stream waits for After on the
// device, a blocking-sync event of its own is recorded after that, and
// a cuda.Waiter waits for that event (a brief poll, then asleep in the
// driver), as comm/nccl's watcher and a training step's end wait
// (TestAfterWaitCostsNoCPU). The stream is non-blocking: it waits for
// After and nothing else. The host waits on a goroutine of its own, so
// that the operation's ctx and the Comm's operation timeout bound the
// wait (TestAfterWaitBounded).

// waiters are the streams and events of those waits, one stream per
// device, shared by a world Comm and its sub-groups (in pools).
type waiters struct {
	mu     sync.Mutex
	m      map[int]*devWaiter
	closed bool
}

type devWaiter struct {
	s     *cuda.Stream
	free  []*waitSlot
	users int // waits in progress
}

// waitSlot is one wait's blocking event and its Waiter (whose spin
// adapts to the waits that slot has seen).
type waitSlot struct {
	ev *cuda.Event
	w  cuda.Waiter
}

// wait returns once the work recorded before after, an event of device
// dev, is done, or with an error once ctx ends or timeout (if > 0)
// passes first: a stream stuck behind a peer that is gone never
// completes After. The host's wait then goes on in the background (a
// CUDA wait cannot be interrupted), holding its slot until After
// completes, if ever.
func (ws *waiters) wait(ctx context.Context, timeout time.Duration, dev int, after *cuda.Event) error {
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		return bounded(ctx, timeout, after.Synchronize, nil)
	}
	if ws.m == nil {
		ws.m = map[int]*devWaiter{}
	}
	d := ws.m[dev]
	if d == nil {
		s, err := cuda.NewStream(dev, true)
		if err != nil {
			ws.mu.Unlock()
			return err
		}
		d = &devWaiter{s: s}
		ws.m[dev] = d
	}
	var slot *waitSlot
	if n := len(d.free); n > 0 {
		slot, d.free = d.free[n-1], d.free[:n-1]
	} else {
		ev, err := cuda.NewBlockingEvent(dev)
		if err != nil {
			ws.mu.Unlock()
			return err
		}
		slot = &waitSlot{ev: ev}
	}
	// queued under mu: the slot's record follows its own WaitEvent
	err := d.s.WaitEvent(after)
	if err == nil {
		err = slot.ev.Record(d.s)
	}
	d.users++
	ws.mu.Unlock()
	put := func() {
		ws.mu.Lock()
		d.users--
		d.free = append(d.free, slot)
		if ws.closed && d.users == 0 {
			d.destroy()
			delete(ws.m, dev)
		}
		ws.mu.Unlock()
	}
	if err != nil {
		put()
		return err
	}
	return bounded(ctx, timeout, func() error { return slot.w.Wait(slot.ev, nil) }, put)
}

// bounded runs wait, a CUDA wait, on a goroutine of its own and returns
// its error, or an error once ctx ends or timeout (if > 0) passes first;
// done (if not nil) runs when wait returns, whenever that is.
func bounded(ctx context.Context, timeout time.Duration, wait func() error, done func()) error {
	res := make(chan error, 1)
	go func() {
		err := wait()
		if done != nil {
			done()
		}
		res <- err
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case err := <-res:
		return err
	default:
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return fmt.Errorf("the cuda.Order's After event is not done (a stream stuck behind a peer that is gone?): %w", context.Cause(ctx))
	case <-expired:
		return fmt.Errorf("%w: the cuda.Order's After event was not done within %v, the Comm's operation timeout (a stream stuck behind a peer that is gone?)", comm.ErrTimeout, timeout)
	}
}

// close destroys the streams and events that no wait uses, and the
// others when their last wait returns.
func (ws *waiters) close() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	for dev, d := range ws.m {
		if d.users == 0 {
			d.destroy()
			delete(ws.m, dev)
		}
	}
}

func (d *devWaiter) destroy() {
	for _, slot := range d.free {
		slot.ev.Destroy()
	}
	d.free = nil
	d.s.Destroy()
}
