package comm

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this module wrap one of these, so
// callers can test them with errors.Is.
var (
	// ErrInvalidArgument: a bad argument, returned at once by the call.
	ErrInvalidArgument = errors.New("comm: invalid argument")
	// ErrClosed: the Comm (or its transport) was closed.
	ErrClosed = errors.New("comm: closed")
	// ErrPeerLost: a peer died, its connection was cut, or it stopped
	// answering heartbeats.
	ErrPeerLost = errors.New("comm: peer lost")
	// ErrMismatch: ranks issued collectives that do not match (another op,
	// count, dtype, reduction or root), or a send and a recv of one tag
	// that do not (another dtype or count).
	ErrMismatch = errors.New("comm: mismatch")
	// ErrTimeout: an operation did not finish in time.
	ErrTimeout = errors.New("comm: timeout")
	// ErrAuth: a connection failed to prove the job token.
	ErrAuth = errors.New("comm: authentication failed")
	// ErrProtocol: a peer sent a malformed or unexpected frame.
	ErrProtocol = errors.New("comm: protocol error")
	// ErrAborted: another rank aborted the group after a failure.
	ErrAborted = errors.New("comm: aborted")
	// ErrUnsupported: the backend cannot do what was asked.
	ErrUnsupported = errors.New("comm: unsupported")
	// ErrWorkReleased: a Work's method was called after its Wait had
	// returned the operation's outcome (see Work).
	ErrWorkReleased = errors.New("comm: Work used after its Wait returned " +
		"(the Comm may reuse it for a later operation; keep the error that Wait returned)")
)

// InvalidArgf returns an error wrapping ErrInvalidArgument.
func InvalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// PeerError says which rank (in the world of the transport) failed and why.
// It wraps ErrPeerLost, ErrClosed, ErrProtocol or ErrAuth.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// OpError is the error a Work reports when an operation fails: which op, its
// sequence number on the Comm, the local rank, and the cause.
type OpError struct {
	Op   string // "all_reduce", "send", ...
	Seq  uint64 // per-Comm sequence number of the collective (0 for p2p)
	Rank int    // the rank (in its Comm) that reports the error
	Err  error
}

func (e *OpError) Error() string {
	if e.Seq > 0 {
		return fmt.Sprintf("comm: %s #%d on rank %d: %v", e.Op, e.Seq, e.Rank, e.Err)
	}
	return fmt.Sprintf("comm: %s on rank %d: %v", e.Op, e.Rank, e.Err)
}
func (e *OpError) Unwrap() error { return e.Err }
