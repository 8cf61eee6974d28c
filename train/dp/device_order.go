package dp

import (
	"context"
	"errors"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
)

// Streams and events of the device strategies (-backend nccl).
//
// The model computes on its own non-blocking stream (devmodel's
// Stream). Every collective on its buffers is issued with a cuda.Order
// (comm/nccl honours it): NCCL's stream waits, on the device, for an
// event recorded on the model's stream just before the collective is
// issued (the gradients of a bucket or unit written, a block's last
// readers done, the shard updated), and records a done event after the
// collective, which the model's stream waits for before the work that
// reads the result (the update after the gradients' reduction, a unit's
// ops after its parameters' gather, the next forward after the
// parameters' all-gather). The host waits for neither: within a step it
// waits only for the loss to come down. The collectives' Works are kept
// (pending) and their errors checked after the next step's loss came
// down (by then the device has done them), or before anything reads the
// model on the host (a save, an evaluation, Close): a failure surfaces
// one step late at most, and NCCL's abort on a failure ends the kernels
// that the model's stream waits for, so nothing waits forever.
//
// Through a host backend (devComm not direct) the collectives run on
// host copies: the host waits for the model's stream before copying the
// buffers down, and the stream waits for an event recorded on the legacy
// default stream after the results are copied up (devComm.unstage).

// streams is the state of that ordering: the events and the pending
// Works.
type streams struct {
	s       *cuda.Stream // the model's
	after   *cuda.Event  // recorded on s just before a collective is issued
	free    []*cuda.Event
	all     []*cuda.Event
	pending []comm.Work // collectives issued, not yet checked
}

// open makes the events of s's device.
func (o *streams) open(s *cuda.Stream) (err error) {
	o.s = s
	o.after, err = o.event()
	return err
}

// event takes a done event (a new one, or one given back).
func (o *streams) event() (*cuda.Event, error) {
	if n := len(o.free); n > 0 {
		e := o.free[n-1]
		o.free = o.free[:n-1]
		return e, nil
	}
	e, err := cuda.NewEvent(o.s.Device())
	if err != nil {
		return nil, err
	}
	o.all = append(o.all, e)
	return e, nil
}

// ordered records the after event on the model's stream and returns ctx
// carrying the Order of a collective that waits for it and records done
// (nil: none) after itself.
func (o *streams) ordered(ctx context.Context, done *cuda.Event) (context.Context, error) {
	if err := o.after.Record(o.s); err != nil {
		return nil, err
	}
	return cuda.WithOrder(ctx, cuda.Order{After: o.after, Done: done}), nil
}

// join makes the model's stream wait for done (recorded after the
// collectives it follows) and gives the event back: a later record does
// not change the wait already queued.
func (o *streams) join(done *cuda.Event) error {
	err := o.s.WaitEvent(done)
	o.free = append(o.free, done)
	return err
}

// track keeps w to be checked by settle.
func (o *streams) track(w comm.Work) { o.pending = append(o.pending, w) }

// settle waits for the pending collectives (done on the device by the
// time it is called, or about to be) and returns their first error.
func (o *streams) settle(ctx context.Context, rank int) error {
	ws := o.pending
	o.pending = nil
	var err error
	for _, w := range ws {
		if werr := w.Wait(ctx); werr != nil && err == nil {
			err = fmt.Errorf("train: rank %d: a collective on the device: %w", rank, werr)
		}
	}
	return err
}

// close destroys the events (after the stream is synchronized).
func (o *streams) close() error {
	var errs []error
	for _, e := range o.all {
		errs = append(errs, e.Destroy())
	}
	o.all, o.free, o.after = nil, nil, nil
	return errors.Join(errs...)
}
