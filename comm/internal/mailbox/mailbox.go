// Package mailbox is what the process transports (tcp, shm) share: on the
// receive side the streams one peer sends on, the frames that arrived
// before their receive was posted and the receive in progress on each
// stream; on the send side the per-stream send lock that keeps the frames
// of two messages of one stream from interleaving, and the send loop that
// cuts a message into frames (SendFrames).
//
// A transport has one Box per peer (and one for messages to itself). The
// transport moves the bytes (a socket reader, a shared-memory ring
// drainer); the Box decides where they go. Every Box method that does not
// say otherwise must be called with the Box's mutex held (the one given to
// New, which the transport also uses for its own per-peer state).
//
// A stream is (group, kind) for collectives and (group, kind, tag) for
// point-to-point messages. Messages of a stream are received in the order
// they were sent, one receive at a time (Stream.RSem). While a receive is
// posted the stream's queue is empty: the receive drains the queue before
// it posts itself, and frames that arrive later go straight to it.
package mailbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gdist/gdist/comm/internal/wire"
)

// Key names a stream of one sender.
type Key struct {
	group uint64
	kind  wire.Kind
	tag   uint64
}

// KeyOf is the stream a frame belongs to.
func KeyOf(h wire.Header) Key {
	k := Key{group: h.Group, kind: h.Kind}
	if h.Kind == wire.KindP2P {
		k.tag = h.Seq
	}
	return k
}

// Frame is a received frame nobody was waiting for: its header and a copy
// of its payload.
type Frame struct {
	H    wire.Header
	Data []byte
}

// Stream is the receive side of one stream.
type Stream struct {
	q       []Frame
	posted  *Recv
	RSem    chan struct{} // one receive at a time, in arrival order
	waiters int           // receives holding or waiting for RSem
}

func (s *Stream) push(f Frame) { s.q = append(s.q, f) }

func (s *Stream) pop() Frame {
	f := s.q[0]
	s.q[0] = Frame{}
	s.q = s.q[1:]
	if len(s.q) == 0 {
		s.q = nil
	}
	return f
}

// Recv is one receive in progress: into Dst, or handed piece by piece to
// Fn (RecvPayload). Its fields are guarded by the Box's mutex, except what
// Done reads.
type Recv struct {
	Want      wire.Header                   // Total = N
	Dst       []byte                        // where the message goes, or
	Fn        func(off int, payload []byte) // what it is handed to
	N         int                           // bytes in the message
	Got       int                           // bytes received so far
	Writing   bool                          // the transport is writing a frame into Dst (or calling Fn) outside the lock
	CancelErr error                         // set when the receive gave up while Writing
	Finished  bool
	Err       error
	// Notify, if not nil, is closed when the receive finishes (for owners
	// that block on a channel rather than poll Done).
	Notify chan struct{}
	done   atomic.Bool
}

// NewRecv returns a receive of n bytes into dst, or handed to fn.
func NewRecv(dst []byte, fn func(off int, payload []byte), n int) *Recv {
	return &Recv{Dst: dst, Fn: fn, N: n}
}

// GetRecv is NewRecv from the Box's free list (no allocation in steady
// state). Give it back with PutRecv once nothing can touch it any more.
func (b *Box) GetRecv(dst []byte, fn func(off int, payload []byte), n int) *Recv {
	k := len(b.freeRecvs)
	if k == 0 {
		return NewRecv(dst, fn, n)
	}
	r := b.freeRecvs[k-1]
	b.freeRecvs[k-1] = nil
	b.freeRecvs = b.freeRecvs[:k-1]
	r.Dst, r.Fn, r.N = dst, fn, n
	return r
}

// PutRecv returns r (from GetRecv) to the free list: r must be finished
// and no longer posted, nobody may be writing into it (Writing is false)
// and its owner must not use it again. Receives with a Notify channel
// are not reused.
func (b *Box) PutRecv(r *Recv) {
	if !r.Finished || r.Writing || r.Notify != nil || len(b.freeRecvs) >= maxFree {
		return
	}
	r.Want, r.Dst, r.Fn, r.N, r.Got = wire.Header{}, nil, nil, 0, 0
	r.CancelErr, r.Finished, r.Err = nil, false, nil
	r.done.Store(false)
	b.freeRecvs = append(b.freeRecvs, r)
}

// maxFree bounds each of a Box's free lists (idle streams, send locks,
// receives): enough for the streams of a few groups in steady use.
const maxFree = 16

// Done reports, without the lock, whether r finished (Err is then set).
func (r *Recv) Done() bool { return r.done.Load() }

// Finish ends r with err (nil: the message is complete), once.
func (r *Recv) Finish(err error) {
	if r.Finished {
		return
	}
	r.Finished = true
	r.Err = err
	r.done.Store(true)
	if r.Notify != nil {
		close(r.Notify)
	}
}

// Check tells whether frame h is the next frame of the message r waits
// for; if not, the error is a *wire.MismatchError.
func (r *Recv) Check(h wire.Header) error {
	if err := wire.Match(h, r.Want); err != nil {
		return err
	}
	if h.Offset != uint64(r.Got) || uint64(h.Len) > h.Total-h.Offset {
		want := r.Want
		want.Offset = uint64(r.Got)
		return fmt.Errorf("%w (frame at byte %d of the message, expected byte %d)",
			&wire.MismatchError{Got: h, Want: want}, h.Offset, r.Got)
	}
	return nil
}

// Put hands data, the bytes of the message at offset off, to r: it copies
// them into Dst, or passes them to Fn.
func (r *Recv) Put(off int, data []byte) {
	if r.Fn == nil {
		copy(r.Dst[off:], data)
	} else if len(data) > 0 {
		r.Fn(off, data)
	}
}

// Apply hands a whole frame to r: checks it, puts it, and finishes r when
// the message is complete or the frame does not match (the frame is then
// dropped).
func (r *Recv) Apply(h wire.Header, data []byte) {
	if err := r.Check(h); err != nil {
		r.Finish(err)
		return
	}
	r.Put(r.Got, data)
	r.Got += len(data)
	if r.Got == r.N {
		r.Finish(nil)
	}
}

// Written ends a write of n bytes into r that ran outside the lock (Writing
// was set): it advances r and finishes it when the message is complete, the
// receive gave up meanwhile, or the write failed (failed: the error r ends
// with, unless it gave up). It reports whether r finished.
func (r *Recv) Written(n int, writeErr, failed error) bool {
	r.Writing = false
	switch {
	case writeErr == nil:
		r.Got += n
		if r.Got == r.N {
			r.Finish(nil)
		} else if r.CancelErr != nil {
			r.Finish(r.CancelErr)
		}
	case r.CancelErr != nil:
		r.Finish(r.CancelErr)
	default:
		r.Finish(failed)
	}
	return r.Finished
}

// SendLock serialises the messages of one stream on a link, so that their
// frames never interleave (see LockSend).
type SendLock struct {
	sem  chan struct{}
	refs int
}

// Box is the mailbox of the streams one peer sends on.
type Box struct {
	mu      *sync.Mutex
	streams map[Key]*Stream
	sends   map[Key]*SendLock
	// Idle streams, send locks and finished receives kept for reuse, so
	// that a message costs no allocation in steady state.
	freeStreams []*Stream
	freeSends   []*SendLock
	freeRecvs   []*Recv
	// Queued is the payload bytes of the frames queued in its streams (the
	// transport bounds it, and reserves bytes while it copies a frame).
	Queued int64
	// OnFinish, if not nil, runs (with the lock held) when a frame the Box
	// hands to a posted receive finishes it: the transport wakes its
	// waiters.
	OnFinish func()
}

// New returns an empty Box guarded by mu.
func New(mu *sync.Mutex) *Box {
	return &Box{mu: mu, streams: map[Key]*Stream{}, sends: map[Key]*SendLock{}}
}

// Stream returns the stream of key, creating it.
func (b *Box) Stream(key Key) *Stream {
	s := b.streams[key]
	if s == nil {
		if k := len(b.freeStreams); k > 0 {
			s = b.freeStreams[k-1]
			b.freeStreams[k-1] = nil
			b.freeStreams = b.freeStreams[:k-1]
		} else {
			s = &Stream{RSem: make(chan struct{}, 1)}
		}
		b.streams[key] = s
	}
	return s
}

// GC forgets an idle stream, keeping it for reuse: idle, nobody holds or
// waits for its RSem (waiters counts them), so nobody refers to it.
func (b *Box) GC(key Key, s *Stream) {
	if len(s.q) == 0 && s.posted == nil && s.waiters == 0 && b.streams[key] == s {
		delete(b.streams, key)
		if len(b.freeStreams) < maxFree && len(s.RSem) == 0 {
			s.q = nil
			b.freeStreams = append(b.freeStreams, s)
		}
	}
}

// Join counts a receive that will use s until Leave (so that GC keeps s).
func (s *Stream) Join() { s.waiters++ }

// Leave undoes Join and forgets s if it is idle.
func (b *Box) Leave(key Key, s *Stream) {
	s.waiters--
	b.GC(key, s)
}

// Take is what the receive r does once it holds s.RSem: it takes the
// frames queued on s, in order, until r finishes, then posts r unless it
// finished or closed (if not nil) returns an error, which r then ends with
// (the peer said goodbye). release, if not nil, gets each frame's payload
// back after r took it; with unlocked, r takes each frame outside the lock
// (the transport's reader only queues behind the frames, so nothing else
// touches them).
func (b *Box) Take(s *Stream, r *Recv, closed func() error, unlocked bool, release func([]byte)) {
	for len(s.q) > 0 && !r.Finished {
		f := s.pop()
		b.Queued -= int64(len(f.Data))
		if unlocked {
			b.mu.Unlock()
		}
		r.Apply(f.H, f.Data)
		if release != nil {
			release(f.Data)
		}
		if unlocked {
			b.mu.Lock()
		}
	}
	if r.Finished {
		return
	}
	if closed != nil {
		if err := closed(); err != nil {
			r.Finish(err)
			return
		}
	}
	s.posted = r
}

// Posted is the receive that the next frame of s goes to, or nil if there
// is none or frames are queued before it.
func (s *Stream) Posted() *Recv {
	if len(s.q) > 0 {
		return nil
	}
	return s.posted
}

// Unpost forgets r as s's posted receive once it finished.
func (b *Box) Unpost(key Key, s *Stream, r *Recv) {
	if r.Finished && s.posted == r {
		s.posted = nil
	}
	b.GC(key, s)
}

// Start begins a write of frame h into s's posted receive r outside the
// lock: if h does not match, r ends with the mismatch and ok is false (the
// frame must be dropped); otherwise r.Writing is set and off is where the
// frame goes. The transport then writes (unlocked) and calls Written.
func (b *Box) Start(key Key, s *Stream, r *Recv, h wire.Header) (off int, ok bool) {
	if err := r.Check(h); err != nil {
		s.posted = nil
		r.Finish(err)
		b.GC(key, s)
		return 0, false
	}
	r.Writing = true
	return r.Got, true
}

// Offer hands a whole frame to the stream's posted receive if one is
// waiting and nothing is queued before the frame. It reports whether the
// frame was consumed.
func (b *Box) Offer(key Key, s *Stream, h wire.Header, data []byte) bool {
	r := s.Posted()
	if r == nil {
		return false
	}
	r.Apply(h, data)
	if r.Finished {
		s.posted = nil
		b.GC(key, s)
		if b.OnFinish != nil {
			b.OnFinish()
		}
	}
	return true
}

// Queue queues a frame (data is the Box's from now on) on s unless the
// posted receive takes it; it reports whether it was queued.
func (b *Box) Queue(key Key, s *Stream, h wire.Header, data []byte) bool {
	if b.Offer(key, s, h, data) {
		return false
	}
	s.push(Frame{H: h, Data: data})
	b.Queued += int64(len(data))
	return true
}

// Cancel ends r with err unless it finished already, and returns the error
// r ended with. If the transport is writing into r's buffer, Cancel waits
// for that frame (with wait, called without the lock) first. Cancel takes
// the lock itself.
func (b *Box) Cancel(s *Stream, r *Recv, err error, wait func(r *Recv)) error {
	b.mu.Lock()
	if r.Finished {
		b.mu.Unlock()
		return r.Err
	}
	if r.Writing {
		r.CancelErr = err
		b.mu.Unlock()
		wait(r)
		return r.Err
	}
	if s.posted == r {
		s.posted = nil
	}
	r.Finish(err)
	b.mu.Unlock()
	return err
}

// FailPosted ends every posted receive that is not being written with err,
// and reports whether it ended any.
func (b *Box) FailPosted(err error) bool {
	ended := false
	for key, s := range b.streams {
		if r := s.posted; r != nil && !r.Writing {
			s.posted = nil
			r.Finish(err)
			b.GC(key, s)
			ended = true
		}
	}
	return ended
}

// DeliverLocal puts a message sent to this rank itself into the Box,
// frame by frame (as a peer's would arrive): straight into a posted
// receive, or queued in a copy made by alloc. Callers hold the lock.
func (b *Box) DeliverLocal(h wire.Header, payload []byte, alloc func(n int) []byte) {
	key := KeyOf(h)
	total := len(payload)
	h.Total = uint64(total)
	for off := 0; ; {
		n := min(total-off, wire.MaxFrame)
		h.Offset, h.Len = uint64(off), uint32(n)
		data := payload[off : off+n]
		s := b.Stream(key)
		if !b.Offer(key, s, h, data) {
			buf := alloc(n)
			copy(buf, data)
			s.push(Frame{H: h, Data: buf})
			b.Queued += int64(n)
		}
		if off += n; off == total {
			return
		}
	}
}

// LockSend takes the send lock of stream key (acquire waits for a
// semaphore as the transport does: until it is free, ctx ends or the group
// fails); release it with UnlockSend(key, l). Callers do not hold the
// Box's lock.
func (b *Box) LockSend(ctx context.Context, key Key, acquire func(ctx context.Context, sem chan struct{}) error) (l *SendLock, err error) {
	b.mu.Lock()
	l = b.sends[key]
	if l == nil {
		if k := len(b.freeSends); k > 0 {
			l = b.freeSends[k-1]
			b.freeSends[k-1] = nil
			b.freeSends = b.freeSends[:k-1]
		} else {
			l = &SendLock{sem: make(chan struct{}, 1)}
		}
		b.sends[key] = l
	}
	l.refs++
	b.mu.Unlock()
	if err := acquire(ctx, l.sem); err != nil {
		b.dropSend(key, l)
		return nil, err
	}
	return l, nil
}

// SendFrames sends payload as one message with header h on the link whose
// Box b is: the send loop of the transports. It takes the send lock of h's
// stream (LockSend), then hands write the message's frames in order, each
// of at most maxFrame bytes (one empty frame for an empty payload) with
// h's Total, Offset and Len set, each write while holding wsem (the link's
// write semaphore). acquire waits for a semaphore as in LockSend (until it
// is free, ctx ends or the group fails). SendFrames returns after the last
// frame is written, or with the first error of acquire or write. Callers
// do not hold the Box's lock. write gets the header by value: a pointer
// handed to a function value escapes, which cost an allocation per Send
// (comm/shm's TestSmallOpAllocs wants none).
func (b *Box) SendFrames(ctx context.Context, h wire.Header, payload []byte, maxFrame int, wsem chan struct{},
	acquire func(ctx context.Context, sem chan struct{}) error, write func(h wire.Header, p []byte) error) error {
	key := KeyOf(h)
	sl, err := b.LockSend(ctx, key, acquire)
	if err != nil {
		return err
	}
	defer b.UnlockSend(key, sl)
	total := len(payload)
	h.Total = uint64(total)
	for off := 0; ; {
		n := min(total-off, maxFrame)
		h.Offset, h.Len = uint64(off), uint32(n)
		if err := acquire(ctx, wsem); err != nil {
			return err
		}
		err := write(h, payload[off:off+n])
		<-wsem
		if err != nil {
			return err
		}
		if off += n; off == total {
			return nil
		}
	}
}

// UnlockSend releases the send lock l of stream key (from LockSend).
func (b *Box) UnlockSend(key Key, l *SendLock) {
	<-l.sem
	b.dropSend(key, l)
}

// dropSend ends one use of l; the last forgets it (keeping it for reuse:
// nobody holds or waits for it).
func (b *Box) dropSend(key Key, l *SendLock) {
	b.mu.Lock()
	if l.refs--; l.refs == 0 {
		delete(b.sends, key)
		if len(b.freeSends) < maxFree {
			b.freeSends = append(b.freeSends, l)
		}
	}
	b.mu.Unlock()
}

// Counts is what the Box holds: streams, send locks and queued payload
// bytes (all zero when it is idle). Callers hold the lock.
func (b *Box) Counts() (streams, sends int, queued int64) {
	return len(b.streams), len(b.sends), b.Queued
}

// HasPosted reports whether a receive is posted on the stream of h.
// Callers hold the lock.
func (b *Box) HasPosted(h wire.Header) bool {
	s := b.streams[KeyOf(h)]
	return s != nil && s.posted != nil
}

// Inspect reports, taking the lock itself, whether a receive is posted on
// the stream of h, and what the Box holds (see Counts): for tests.
func (b *Box) Inspect(h wire.Header) (posted bool, streams, sends int, queued int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	streams, sends, queued = b.Counts()
	return b.HasPosted(h), streams, sends, queued
}
