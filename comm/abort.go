package comm

import (
	"context"
	"errors"
)

// Aborter is implemented by Comms that can be failed on purpose: Abort
// poisons the Comm with cause (every pending and later operation fails) and
// tells the other members, whose operations on it then fail with an error
// wrapping ErrAborted that quotes cause. Every Comm built on comm/algo
// implements it.
type Aborter interface {
	Abort(cause error)
}

// Abort fails c on purpose after an error outside communication (a
// failed computation between collectives), so that the other members stop
// waiting for this rank instead of running into their timeouts. It calls
// c's Abort when c has one; otherwise it issues a barrier under an already
// cancelled context, which fails every Comm that treats a cancelled
// operation as fatal (cause then does not reach the peers).
func Abort(c Comm, cause error) {
	if c == nil {
		return
	}
	if cause == nil {
		cause = errors.New("aborted")
	}
	if a, ok := c.(Aborter); ok {
		a.Abort(cause)
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if w, err := c.Barrier(ctx); err == nil {
		w.Wait(context.Background())
	}
}
