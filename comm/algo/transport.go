package algo

import (
	"context"

	"github.com/gdist/gdist/comm/internal/wire"
)

// Transport moves messages between the world ranks of one job. It is the
// only thing a backend must provide: the collectives, their ordering,
// sub-groups and failure handling are written once on top of it (NewComm).
//
// Messages travel on streams. A stream is identified by (sender, h.Group,
// h.Kind) for collectives, and additionally by the tag h.Seq for KindP2P.
// Messages on one stream are received in the order they were sent; streams
// are independent of each other.
//
// All methods are safe for concurrent use.
type Transport interface {
	// Rank is this process's world rank; Size the world size.
	Rank() int
	Size() int

	// Send delivers payload as one message to world rank to. h describes
	// the message (Kind, Op, Group, Seq, Count, Step...); the transport
	// fills Total, Offset and Len itself. It returns once payload may be
	// reused. A backend may deliver lazily (a rendezvous with the
	// receiver), so callers must post the matching receives concurrently:
	// every algorithm here sends and receives at the same time.
	Send(ctx context.Context, to int, h wire.Header, payload []byte) error

	// Recv receives the next message of stream (from, h.Group, h.Kind[,
	// h.Seq]) into dst. Before it writes dst it checks the message with
	// wire.Match against h, with h.Total = len(dst); a message that does
	// not match fails with a *wire.MismatchError.
	Recv(ctx context.Context, from int, h wire.Header, dst []byte) error

	// Abort fails, with cause, every pending and later Send and Recv of
	// group on this rank, and tells the listed world ranks to do the same
	// (they fail with an error wrapping comm.ErrAborted that quotes cause).
	// It does not wait for them.
	Abort(group uint64, peers []int, cause error)

	// Close says goodbye to the peers and releases everything. Pending
	// calls fail with comm.ErrClosed. It never hangs and may be called
	// more than once.
	Close() error
}

// PayloadReceiver is an optional extension of Transport for transports
// whose received payload sits in memory this process can read: the
// sender's buffer (in-process ranks) or a shared segment. The reductions
// use it to reduce straight from that memory (dst = own op payload, one
// pass) instead of copying the payload into scratch and reducing from
// there.
//
// RecvPayload is Recv without the copy: it checks the message the same way
// (with h.Total = n) and then calls fn with the payload in one or more
// consecutive pieces, in order (off is the piece's byte offset in the
// message; pieces may split elements). fn must not keep the slice or call
// the transport. RecvPayload returns after the last call; if it fails, fn
// may have seen part of the message.
type PayloadReceiver interface {
	RecvPayload(ctx context.Context, from int, h wire.Header, n int, fn func(off int, payload []byte)) error
}

// EagerSender is an optional extension of Transport for transports whose
// Send of a short message never waits for the matching Recv to be posted:
// it copies the payload out (into a ring, a queue) and returns, making room
// on its own if it has to. Algorithms use it to send a short message and
// then receive on one goroutine, rather than sending on another goroutine
// while they receive.
type EagerSender interface {
	// EagerBytes is the longest payload to world rank to that Send
	// delivers eagerly (0: none).
	EagerBytes(to int) int
}
