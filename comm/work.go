package comm

import (
	"context"
	"sync"
)

// Request is a Work that a backend completes once. The zero value is not
// usable; create one with NewRequest.
type Request struct {
	once sync.Once
	done chan struct{}
	err  error
}

var _ Work = (*Request)(nil)

// NewRequest returns a pending Request.
func NewRequest() *Request { return &Request{done: make(chan struct{})} }

// Complete finishes the request with err (nil for success). Later calls
// are ignored.
func (r *Request) Complete(err error) {
	r.once.Do(func() {
		r.err = err
		close(r.done)
	})
}

// Wait blocks until the request is complete or ctx ends.
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the request is complete.
func (r *Request) Done() <-chan struct{} { return r.done }

// Err is the request's error once complete; nil before.
func (r *Request) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Completed returns a Work that is already done with err.
func Completed(err error) Work {
	r := NewRequest()
	r.Complete(err)
	return r
}

// WaitAll waits for every Work and returns the first error.
func WaitAll(ctx context.Context, ws ...Work) error {
	var first error
	for _, w := range ws {
		if w == nil {
			continue
		}
		if err := w.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Run issues an operation and waits for it: a shorthand for the blocking
// style, e.g. comm.Run(ctx)(c.AllReduce(ctx, buf, comm.Sum)).
func Run(ctx context.Context) func(Work, error) error {
	return func(w Work, err error) error {
		if err != nil {
			return err
		}
		return w.Wait(ctx)
	}
}
