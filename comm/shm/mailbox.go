//go:build linux

package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/gdist/gdist/comm/internal/wire"
)

// streamKey names a stream of one sender: (group, kind) for collectives,
// plus the tag for point-to-point messages.
type streamKey struct {
	group uint64
	kind  wire.Kind
	tag   uint64
}

func keyOf(h wire.Header) streamKey {
	k := streamKey{group: h.Group, kind: h.Kind}
	if h.Kind == wire.KindP2P {
		k.tag = h.Seq
	}
	return k
}

// frame is a received frame nobody was waiting for, copied out of the ring.
type frame struct {
	h    wire.Header
	data []byte
}

// stream is the receive side of one stream. Invariant: while a receive is
// posted, the queue is empty (Recv drains it before posting, and the
// drainer hands new frames to the posted receive).
type stream struct {
	q       []frame
	posted  *recvOp
	rsem    chan struct{} // one Recv at a time, in arrival order
	waiters int           // Recvs holding or waiting for rsem
}

func (s *stream) push(f frame) { s.q = append(s.q, f) }

func (s *stream) pop() frame {
	f := s.q[0]
	s.q[0] = frame{}
	s.q = s.q[1:]
	if len(s.q) == 0 {
		s.q = nil
	}
	return f
}

// recvOp is one Recv in progress. Its fields are guarded by the link's mu,
// except done, which its owner polls.
type recvOp struct {
	want      wire.Header // Total = n
	dst       []byte      // where the message goes (Recv), or
	fn        func(off int, payload []byte)
	n         int   // the message's length
	got       int   // bytes received so far
	writing   bool  // a drainer is copying a frame into dst
	cancelErr error // set when Recv gave up while writing was true
	finished  bool
	err       error
	done      atomic.Bool // set (after err) when finished
}

func (op *recvOp) finish(err error) {
	if op.finished {
		return
	}
	op.finished = true
	op.err = err
	op.done.Store(true)
}

// check tells whether frame h is the next frame of the message op waits for.
func (op *recvOp) check(h wire.Header) error {
	if err := wire.Match(h, op.want); err != nil {
		return err
	}
	if h.Offset != uint64(op.got) || uint64(h.Len) > h.Total-h.Offset {
		want := op.want
		want.Offset = uint64(op.got)
		return fmt.Errorf("%w (frame at byte %d of the message, expected byte %d)",
			&wire.MismatchError{Got: h, Want: want}, h.Offset, op.got)
	}
	return nil
}

// put hands data, the bytes of the message at offset off, to op: it copies
// them into dst, or passes them to fn (RecvPayload).
func (op *recvOp) put(off int, data []byte) {
	if op.fn == nil {
		copy(op.dst[off:], data)
	} else if len(data) > 0 {
		op.fn(off, data)
	}
}

// apply hands a queued frame to op: checks it, delivers it, and finishes
// op when the message is complete or the frame does not match (the frame
// is dropped).
func (op *recvOp) apply(h wire.Header, data []byte) {
	if err := op.check(h); err != nil {
		op.finish(err)
		return
	}
	op.put(op.got, data)
	op.got += len(data)
	if op.got == op.n {
		op.finish(nil)
	}
}

// sendStream serialises the messages of one stream on a link, so that
// their frames never interleave.
type sendStream struct {
	sem  chan struct{}
	refs int
}
