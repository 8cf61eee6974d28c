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

// SharedMemory is an optional extension of Transport for transports whose
// ranks map one another's memory (comm/shm; comm/auto between the ranks of
// one host). Buffers from Alloc lie in that memory; an all-reduce,
// reduce-scatter or all-gather whose buffers all do runs zero-copy
// (allreduce_zerocopy.go): each rank reads and writes its block of every
// rank's buffer where it lies.
//
// Memory is named by handles (byte offsets into the shared memory plus
// one, so that 0 names nothing), which mean the same on every rank that
// shares it. Counters are 64-bit words of this rank's flag blocks that
// only grow: their owner publishes, the peers await a value.
type SharedMemory interface {
	// Alloc returns n zeroed bytes of this rank's shared memory, aligned
	// to 64 bytes, and the function that frees them (a no-op when called
	// again or after Close). The memory stays mapped until it is freed,
	// even after Close.
	Alloc(n int) ([]byte, func(), error)
	// Shares reports whether world rank r maps this rank's shared memory.
	Shares(r int) bool
	// Locate returns the handle of b if all of b lies in the shared
	// memory, else 0.
	Locate(b []byte) uint64
	// Map returns the n bytes at handle h as this rank maps them (nil if
	// they are not all in the shared memory).
	Map(h uint64, n int) []byte
	// Flags takes a flag block of this rank for one op: its handle, its
	// two counters (armed: peers may write into this rank's buffer; fin:
	// this rank is done with theirs), and the function that returns it
	// (h == 0: none is free).
	Flags() (h uint64, armed, fin *uint64, release func())
	// Counter returns counter i (0: armed, 1: fin) of the flag block at
	// handle h, as this rank maps it (nil if h is not one).
	Counter(h uint64, i int) *uint64
	// Publish sets this rank's counter c to v and wakes the peers
	// waiting on it.
	Publish(c *uint64, v uint64)
	// Await waits until world rank peer's counter c reaches v. It fails
	// when ctx ends, the transport fails, group is aborted or peer
	// leaves, naming the cause as Recv would.
	Await(ctx context.Context, group uint64, peer int, c *uint64, v uint64) error
	// Quiesce is Await for a failure path: it waits, past ctx, aborts
	// and the transport's failure, until peer's counter c reaches v or
	// the peer is gone (its process ended, it closed), for at most the
	// transport's peer deadline. It reports whether c reached v. A rank
	// whose op failed calls it before it hands its buffer back, so that
	// no peer still writes into it.
	Quiesce(peer int, c *uint64, v uint64) bool
}

// Pulser is an optional extension of SharedMemory: Pulse tells the peers
// that wait on this rank's counters (Await) that it is working towards
// them, so that a waiter goes on polling, keeping its processor, instead
// of yielding it and sleeping (shm's waiters poll while the peer's pulse
// moves, for up to 1 ms). The staged all-reduce pulses between chunks of
// its copies and reductions (a few microseconds apart).
type Pulser interface {
	Pulse()
}
