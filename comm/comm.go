package comm

import (
	"context"
	"io"
	"time"
)

// Comm is a fixed group of Size() ranks that run collectives together.
//
// Every rank issues the same collectives, with the same counts, dtypes,
// reductions and roots, in the same order. Each method checks its arguments
// and returns an error wrapping ErrInvalidArgument at once if they are bad;
// otherwise it starts the operation and returns a Work without waiting for
// it. Collectives on one Comm run and complete in the order they were issued;
// many may be in flight. Point-to-point Send and Recv are ordered per (peer,
// tag) and run beside the collectives, so a Send never waits for an earlier
// collective (pipelines rely on this).
//
// A buffer handed to an operation belongs to the operation until its Work is
// done: do not read or write it meanwhile.
//
// The ctx passed when an operation is issued bounds the operation itself
// (together with the Comm's default timeout); if it ends first, the operation
// fails. Work.Wait's ctx bounds only the waiting.
//
// After any operation fails (peer lost, timeout, mismatch, cancelled), the
// Comm is poisoned: pending and later operations return that error. Close
// it and build a new one. The methods are safe for concurrent use, but the
// order in which concurrent callers issue collectives is then up to the
// scheduler, so ranks usually issue collectives from one goroutine.
type Comm interface {
	// Rank is this rank's index in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int

	// AllReduce reduces buf element-wise over all ranks and leaves the
	// result in buf on every rank (in place). All ranks get bit-identical
	// results.
	AllReduce(ctx context.Context, buf Buffer, op ReduceOp) (Work, error)
	// Broadcast copies root's buf into buf on every other rank.
	Broadcast(ctx context.Context, buf Buffer, root int) (Work, error)
	// Reduce reduces buf over all ranks into buf on root (in place). Buffers
	// on other ranks are left unchanged.
	Reduce(ctx context.Context, buf Buffer, op ReduceOp, root int) (Work, error)
	// AllGather concatenates every rank's src, in rank order, into dst on
	// every rank. dst.Len() must be Size()*src.Len(). In place if src is
	// dst's slice for this rank: dst.Slice(Rank()*n, (Rank()+1)*n).
	AllGather(ctx context.Context, dst, src Buffer) (Work, error)
	// Gather concatenates every rank's src, in rank order, into dst on root.
	// On root dst.Len() must be Size()*src.Len(); dst is ignored elsewhere
	// (pass an empty Buffer). In place on root as for AllGather.
	Gather(ctx context.Context, dst, src Buffer, root int) (Work, error)
	// Scatter splits root's src into Size() equal parts and delivers part i
	// to dst on rank i. On root src.Len() must be Size()*dst.Len(); src is
	// ignored elsewhere. In place on root if dst is src's slice for root.
	Scatter(ctx context.Context, dst, src Buffer, root int) (Work, error)
	// ReduceScatter reduces src (Size()*dst.Len() elements) over all ranks
	// and leaves part i of the result in dst on rank i. src is not modified.
	// In place if dst is src's slice for this rank.
	ReduceScatter(ctx context.Context, dst, src Buffer, op ReduceOp) (Work, error)
	// AllToAll sends part j of src (Size() equal parts) to rank j, which
	// stores it as part i of its dst, i being the sender. dst and src have
	// the same length and must not overlap.
	AllToAll(ctx context.Context, dst, src Buffer) (Work, error)
	// Send sends buf to peer with tag. The matching Recv must use the same
	// tag and length. Sends to one (peer, tag) are received in order.
	Send(ctx context.Context, buf Buffer, peer int, tag int) (Work, error)
	// Recv receives the next message with tag from peer into buf.
	Recv(ctx context.Context, buf Buffer, peer int, tag int) (Work, error)
	// Barrier completes once every rank has entered it.
	Barrier(ctx context.Context) (Work, error)

	// Split is a blocking collective over this Comm: ranks that pass the
	// same color form a new Comm, ranked by (key, old rank). Ranks passing
	// ColorNone get a nil Comm. The new Comm runs independently of this one
	// (its operations are not ordered with this Comm's) and shares its
	// connections; close it before closing the parent.
	Split(ctx context.Context, color, key int) (Comm, error)

	// Close releases the Comm. Operations still pending fail with
	// ErrClosed. Close never hangs; it is safe to call more than once.
	io.Closer
}

// TrafficCounter is implemented by Comms that count the payload bytes they
// exchange with other ranks (every backend built on comm/algo does). sent
// counts messages only: a zero-copy collective (buffers from Alloc on
// the shm backend) sends none of its data, so use MovedCounter to compare
// algorithms' volumes.
type TrafficCounter interface {
	Traffic() (sent, received int64)
}

// MovedCounter is implemented by Comms that count the payload bytes this
// rank moved to and from other ranks, per transport (every backend built
// on comm/algo does). The counts are since the Comm was made; a Comm from
// Split counts its own.
type MovedCounter interface {
	Moved() []Moved
}

// Moved is what one rank moved over one transport, in payload bytes: in
// messages (sent and received) and, in the zero-copy collectives, by
// reading peers' shared buffers and writing into them. Every byte that
// goes from one rank to another is moved once, by one of the two: a
// message by its sender, a zero-copy byte by the rank that reads it from
// or writes it into the peer's buffer. So Bytes, per rank, is comparable
// with an algorithm's textbook volume whichever path ran (an all-reduce of
// n bytes over p ranks: 2n(p-1)/p, by the ring's messages or by the
// zero-copy reads and writes), and summed over the ranks it is the job's
// traffic.
type Moved struct {
	Transport      string // "shm", "tcp", "inproc", ...
	Sent, Received int64  // in messages
	Written, Read  int64  // into and out of peers' shared buffers
}

// Bytes is what the rank moved: Sent + Written + Read.
func (m Moved) Bytes() int64 { return m.Sent + m.Written + m.Read }

// MovedBytes sums Bytes over ms.
func MovedBytes(ms []Moved) int64 {
	var n int64
	for _, m := range ms {
		n += m.Bytes()
	}
	return n
}

// PeerConnector is implemented by Comms that set up per-peer resources for
// Send and Recv at the first message between two ranks (the nccl backend
// makes NCCL communicators, which should not be made while operations are
// in flight). ConnectPeers sets them up now for the listed peers (ranks of
// the Comm; this rank itself is ignored) and blocks until they are ready,
// which needs each listed peer to call ConnectPeers listing this rank too,
// or to exchange a message with it. Callers that know their peers (a
// pipeline stage: its neighbours) call it once at setup on every rank; the
// pairs are then set up in one order that every rank shares (ascending by
// lower rank, then higher rank), so setups never wait for each other in a
// cycle.
type PeerConnector interface {
	ConnectPeers(ctx context.Context, peers []int) error
}

// ColorNone passed to Split leaves the calling rank out of every new group.
const ColorNone = -1

// NewGroup is a blocking collective over c that builds a Comm of the ranks
// listed (by their rank in c), ranked in list order. Every rank of c must call
// it with the same list; ranks not in the list get a nil Comm.
func NewGroup(ctx context.Context, c Comm, ranks []int) (Comm, error) {
	seen := map[int]bool{}
	pos := -1
	for i, r := range ranks {
		if r < 0 || r >= c.Size() {
			return nil, InvalidArgf("NewGroup: rank %d out of range [0, %d)", r, c.Size())
		}
		if seen[r] {
			return nil, InvalidArgf("NewGroup: rank %d listed twice", r)
		}
		seen[r] = true
		if r == c.Rank() {
			pos = i
		}
	}
	if len(ranks) == 0 {
		return nil, InvalidArgf("NewGroup: empty rank list")
	}
	if pos < 0 {
		return c.Split(ctx, ColorNone, 0)
	}
	return c.Split(ctx, 0, pos)
}

// Work is an operation in flight. Wait blocks until the operation is done or
// ctx ends (the operation itself goes on); Done and Err never block. Err is
// nil until the operation has finished, and after it succeeded.
//
// Once Wait has returned the operation's outcome (nil or the operation's
// error, not the end of Wait's own ctx), the Work is finished with: the
// Comm may reuse it for a later operation, which is how the backends built
// on comm/algo (inproc, tcp, shm, auto) issue operations without
// allocating. Do not call its methods again (keep the error Wait returned);
// until it is reused such a call fails with ErrWorkReleased (Done returns a
// closed channel), and it is reused only after several later Waits, so
// misuse shows up as that error rather than as another operation's
// outcome. Wait for a Work from one goroutine; Done and Err may be called
// from any until then. A Work that is only watched through Done and Err is
// never reused.
type Work interface {
	Wait(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
}

// Options tunes a Comm. The zero value gives the defaults.
type Options struct {
	// Timeout bounds every operation (in addition to its ctx). 0 means
	// DefaultTimeout; a negative value means no bound.
	Timeout time.Duration
	// PeerTimeout is how long a process backend waits without hearing from
	// a peer (heartbeats flow while it is idle) before declaring it lost.
	// 0 means DefaultPeerTimeout.
	PeerTimeout time.Duration
}

// Default timeouts.
const (
	DefaultTimeout     = 30 * time.Minute
	DefaultPeerTimeout = 30 * time.Second
)

// OpTimeout returns the effective per-operation timeout (0 for none).
func (o Options) OpTimeout() time.Duration {
	switch {
	case o.Timeout < 0:
		return 0
	case o.Timeout == 0:
		return DefaultTimeout
	}
	return o.Timeout
}

// PeerDeadline returns the effective peer-loss timeout.
func (o Options) PeerDeadline() time.Duration {
	if o.PeerTimeout <= 0 {
		return DefaultPeerTimeout
	}
	return o.PeerTimeout
}
