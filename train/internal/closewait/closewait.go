// Package closewait holds the bounded waits a device strategy's Close
// makes before it frees device memory (train/dp's DDP and ZeRO,
// train/pp's pipeline), one rule for them all: collectives or sends a
// step left pending and the work queued on a stream must be done before
// the memory they read and write is freed, but a wait for them must end
// (a peer may never come), so each wait is bounded, and the caller
// aborts its communicator and waits once more when one runs out.
package closewait

import (
	"errors"
	"fmt"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
)

// Works waits for the works of ops (work(op) for each), for d at most in
// all, and returns the ops whose works are not done, in order.
func Works[T any](ops []T, work func(T) comm.Work, d time.Duration) []T {
	t := time.NewTimer(d)
	defer t.Stop()
	for i, op := range ops {
		select {
		case <-work(op).Done():
		case <-t.C:
			var left []T
			for _, o := range ops[i:] {
				select {
				case <-work(o).Done():
				default:
					left = append(left, o)
				}
			}
			return left
		}
	}
	return nil
}

// StreamIdle waits, for d at most, for the work queued on s so far,
// polling an event every millisecond (no host core spins, and unlike
// cudaStreamSynchronize the wait ends). It returns whether s is idle, or
// the device's error (a sticky one: the device is unusable).
func StreamIdle(s *cuda.Stream, d time.Duration) (bool, error) {
	e, err := cuda.NewEvent(s.Device())
	if err != nil {
		return false, err
	}
	defer e.Destroy()
	if err := e.Record(s); err != nil {
		return false, err
	}
	for end := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		done, err := e.Query()
		if err != nil || done {
			return done, err
		}
		if time.Now().After(end) {
			return false, nil
		}
	}
}

// Stream waits for the work queued on s (StreamIdle), for d at most; if
// s is still busy then and the communicator is not aborted yet (aborted
// false) it calls abort with an error saying so (the stream waits for
// something else: a collective whose peer never comes) and waits for d
// once more. who starts the errors (the rank or stage, e.g. "train: rank
// 1"), whose names the stream's owner ("the model's"). It returns free:
// whether the stream's memory may be freed (s idle, or the device
// failed: it is done), and the errors (abort's, the device's, or that s
// is still busy after the abort: the memory must be leaked, not freed).
func Stream(s *cuda.Stream, d time.Duration, aborted bool, abort func(error), who, whose string) (free bool, err error) {
	idle, serr := StreamIdle(s, d)
	if serr == nil && !idle && !aborted {
		err = fmt.Errorf("%s: closing: %s stream still busy after %v: aborted the communicator", who, whose, d)
		abort(err)
		idle, serr = StreamIdle(s, d)
	}
	switch {
	case serr != nil:
		return true, errors.Join(err, fmt.Errorf("%s: closing: the device: %w", who, serr))
	case !idle:
		return false, errors.Join(err, fmt.Errorf("%s: closing: %s stream still busy %v after the abort: %s device memory is not freed", who, whose, d, whose))
	}
	return true, err
}
