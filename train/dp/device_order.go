package dp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/train/internal/closewait"
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
// that the model's stream waits for, so nothing waits forever. Close
// waits for them too, bounded, aborting the Comm where they do not end
// (quiesce, below).
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
	pending []pendingOp // collectives issued, not yet checked
}

// pendingOp is a collective issued and what it does (for Close's
// errors): verb the floats [lo, hi) of the flat buffers.
type pendingOp struct {
	w      comm.Work
	verb   string
	lo, hi int
}

func (op pendingOp) work() comm.Work { return op.w }

func (op pendingOp) what() string { return fmt.Sprintf("%s [%d, %d)", op.verb, op.lo, op.hi) }

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

// orderedNew is ordered with a new done event (event), which it returns
// for the collectives' join.
func (o *streams) orderedNew(ctx context.Context) (context.Context, *cuda.Event, error) {
	done, err := o.event()
	if err != nil {
		return nil, nil, err
	}
	octx, err := o.ordered(ctx, done)
	return octx, done, err
}

// join makes the model's stream wait for done (recorded after the
// collectives it follows) and gives the event back: a later record does
// not change the wait already queued.
func (o *streams) join(done *cuda.Event) error {
	err := o.s.WaitEvent(done)
	o.free = append(o.free, done)
	return err
}

// track keeps w, which does verb to the floats [lo, hi), to be checked
// by settle.
func (o *streams) track(w comm.Work, verb string, lo, hi int) {
	o.pending = append(o.pending, pendingOp{w, verb, lo, hi})
}

// settle waits for the pending collectives (done on the device by the
// time it is called, or about to be) and returns their first error.
func (o *streams) settle(ctx context.Context, rank int) error {
	ws := o.pending
	o.pending = nil
	var err error
	for _, op := range ws {
		if werr := op.w.Wait(ctx); werr != nil && err == nil {
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

// deviceCloseWait bounds each of Close's waits for the device: for the
// collectives still pending, then, after an abort, for them to end.
var deviceCloseWait = time.Minute

// quiesce readies the device memory of the model and its collectives to
// be freed (Close): the collectives still pending (the last step's,
// which the host never waited for, or a failed step's) and the work
// queued on the model's stream must be done first, or an NCCL kernel
// would read and write freed memory (the fake's cudaFree, like CUDA's,
// waits for the device instead: until the Comm's timeout, 30 minutes by
// default, where a peer never comes). So it waits for them, for
// deviceCloseWait at most; if they are not done by then, or at once
// after a failed step or update (failed; a peer may wait for this rank's
// next collective, or this rank for the peer's), it aborts the Comms
// (comm.Abort: NCCL's kernels end, and the other ranks learn of it at
// once instead of waiting for their timeouts) and waits for them again.
// It returns an error naming the rank and what was pending, and free:
// whether the device is idle (false: still busy after the abort; its
// memory must be leaked, not freed).
func (b *deviceBase) quiesce(failed error, comms ...comm.Comm) (free bool, err error) {
	rank := b.c.Rank()
	ops := b.st.pending
	b.st.pending = nil
	aborted := false
	abort := func(cause error) {
		aborted = true
		for _, c := range comms {
			comm.Abort(c, cause)
		}
	}
	if failed != nil {
		abort(fmt.Errorf("train: rank %d: closed after a failed step: %w", rank, failed))
	}
	left := closewait.Works(ops, pendingOp.work, deviceCloseWait)
	if len(left) > 0 {
		err = fmt.Errorf("train: rank %d: closing: %d collective(s) on the device still pending after %v (the first: %s): aborted the communicator", rank, len(left), deviceCloseWait, left[0].what())
		if !aborted {
			abort(err)
		}
		if left = closewait.Works(left, pendingOp.work, deviceCloseWait); len(left) > 0 {
			return false, fmt.Errorf("%w; %d still pending %v after the abort (the first: %s): the model's device memory is not freed", err, len(left), deviceCloseWait, left[0].what())
		}
	}
	if err == nil && !aborted {
		for _, op := range ops { // done: their errors, a step late
			if werr := op.w.Err(); werr != nil {
				err = fmt.Errorf("train: rank %d: %s on the device: %w", rank, op.what(), werr)
				break
			}
		}
	}
	if b.d == nil || b.d.Stream() == nil {
		return true, err
	}
	// the stream waits for something else (syncbn's collectives)
	free, serr := closewait.Stream(b.d.Stream(), deviceCloseWait, aborted, abort, fmt.Sprintf("train: rank %d", rank), "the model's")
	return free, errors.Join(err, serr)
}
