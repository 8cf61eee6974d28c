package staging

import (
	"sync"

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
// After and nothing else.

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
// dev, is done.
func (ws *waiters) wait(dev int, after *cuda.Event) error {
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		return after.Synchronize()
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
	if err == nil {
		err = slot.w.Wait(slot.ev, nil)
	}
	ws.mu.Lock()
	d.users--
	d.free = append(d.free, slot)
	if ws.closed && d.users == 0 {
		d.destroy()
		delete(ws.m, dev)
	}
	ws.mu.Unlock()
	return err
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
