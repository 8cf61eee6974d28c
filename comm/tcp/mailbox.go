package tcp

import (
	"fmt"

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

// frame is a received frame nobody was waiting for.
type frame struct {
	h    wire.Header
	data []byte
}

// stream is the receive side of one stream. Invariant: while a receive is
// posted, the queue is empty (Recv drains it before posting, and the reader
// hands new frames to the posted receive).
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

// recvOp is one Recv or RecvPayload in progress. Its fields are guarded by
// the conn's mu.
type recvOp struct {
	want      wire.Header                   // Total = n
	dst       []byte                        // Recv: where the message goes (len n)
	fn        func(off int, payload []byte) // RecvPayload: where it goes
	n         int                           // bytes in the message
	got       int                           // bytes received so far
	writing   bool                          // the reader is reading a frame into dst
	cancelErr error                         // set when Recv gave up while writing was true
	finished  bool
	err       error
	done      chan struct{}
}

func (op *recvOp) finish(err error) {
	if op.finished {
		return
	}
	op.finished = true
	op.err = err
	close(op.done)
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

// apply hands a frame to op: checks it, copies it (or passes it to op.fn),
// and finishes op when the message is complete or the frame does not match
// (the frame is dropped).
func (op *recvOp) apply(h wire.Header, data []byte) {
	if err := op.check(h); err != nil {
		op.finish(err)
		return
	}
	op.deliver(data)
	op.got += len(data)
	if op.got == op.n {
		op.finish(nil)
	}
}

// deliver puts data at op.got of the message: into dst, or to fn.
func (op *recvOp) deliver(data []byte) {
	switch {
	case len(data) == 0:
	case op.fn != nil:
		op.fn(op.got, data)
	default:
		copy(op.dst[op.got:], data)
	}
}

// stream returns the stream of key, creating it. Callers hold c.mu.
func (c *conn) stream(key streamKey) *stream {
	s := c.streams[key]
	if s == nil {
		s = &stream{rsem: make(chan struct{}, 1)}
		c.streams[key] = s
	}
	return s
}

// gc forgets an idle stream. Callers hold c.mu.
func (c *conn) gc(key streamKey, s *stream) {
	if len(s.q) == 0 && s.posted == nil && s.waiters == 0 && c.streams[key] == s {
		delete(c.streams, key)
	}
}

// offer hands a frame to the stream's posted receive if one is waiting and
// nothing is queued before the frame. It reports whether the frame was
// consumed. Callers hold c.mu.
func (c *conn) offer(key streamKey, s *stream, h wire.Header, data []byte) bool {
	op := s.posted
	if op == nil || len(s.q) > 0 {
		return false
	}
	op.apply(h, data)
	if op.finished {
		s.posted = nil
		c.gc(key, s)
	}
	return true
}

// cancel ends op with err unless it finished already. If the reader is
// writing into op's buffer, it waits for that frame first.
func (c *conn) cancel(s *stream, op *recvOp, err error) error {
	c.mu.Lock()
	if op.finished {
		c.mu.Unlock()
		return op.err
	}
	if op.writing {
		op.cancelErr = err
		c.mu.Unlock()
		<-op.done
		return op.err
	}
	if s.posted == op {
		s.posted = nil
	}
	op.finish(err)
	c.mu.Unlock()
	return err
}

// deliverLocal puts a message sent to this rank itself into the mailbox,
// copying it (straight into a posted receive when there is one).
func (c *conn) deliverLocal(h wire.Header, payload []byte) error {
	key := keyOf(h)
	total := len(payload)
	h.Total = uint64(total)
	c.mu.Lock()
	defer c.mu.Unlock()
	for off := 0; ; {
		n := min(total-off, wire.MaxFrame)
		h.Offset, h.Len = uint64(off), uint32(n)
		data := payload[off : off+n]
		s := c.stream(key)
		if !c.offer(key, s, h, data) {
			buf := getBuf(n)
			copy(buf, data)
			s.push(frame{h: h, data: buf})
			c.queued += int64(n)
		}
		if off += n; off == total {
			return nil
		}
	}
}
