//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/mailbox"
	"github.com/gdist/gdist/comm/internal/wire"
)

// Ring records. Every record starts on a 64-byte boundary and is a
// multiple of 64 bytes long; a record never wraps around the end of its
// ring (a pad record fills the end instead).
//
//	data ring:    [0:4] record length  [4] type  [64:128] wire.Header
//	              [128:] payload (Header.Len bytes)
//	control ring: [0:4] record length  [4] type  [8:16] group
//	              [16:20] text length  [64:] text
const (
	recData  = 1
	recPad   = 2
	recAbort = 3

	dataRecHdr = 128
	ctrlRecHdr = 64
)

func align64(n int) int { return (n + 63) &^ 63 }

// ringRef points into one direction of a pair: the indices, waiter counts
// and rings of pair (from, to).
type ringRef struct {
	tail, head                *uint64 // data ring: bytes ever written / consumed
	dataWaiters, spaceWaiters *uint32
	ctail, chead              *uint64 // control ring
	data                      []byte
	ctrl                      []byte
}

func (s *segment) pair(from, to int) ringRef {
	off := s.pairOff(from, to)
	c := off + pairCtlSize
	d := c + s.ctrlBytes
	return ringRef{
		tail: s.u64(off + pairTail), head: s.u64(off + pairHead),
		dataWaiters: s.u32(off + pairDataWaiters), spaceWaiters: s.u32(off + pairSpaceWaiters),
		ctail: s.u64(off + pairCtrlTail), chead: s.u64(off + pairCtrlHead),
		ctrl: s.mem[c : c+s.ctrlBytes : c+s.ctrlBytes],
		data: s.mem[d : d+s.ringBytes : d+s.ringBytes],
	}
}

// link is this rank's end of the pair of rings with one peer, and the
// mailbox of the streams that peer sends on. The link to the rank itself
// has a mailbox only (self).
type link struct {
	t        *Transport
	peer     int // world rank
	self     bool
	maxFrame int

	// Outbound: this rank -> peer.
	out   ringRef
	wsem  chan struct{} // the write lock, one record at a time
	otail uint64        // guarded by wsem
	ctlMu sync.Mutex    // guards the control ring's tail
	ctail uint64

	// Inbound: peer -> this rank.
	in       ringRef
	draining atomic.Bool // the consumer role of the inbound data ring
	ihead    uint64      // guarded by draining
	chead    uint64      // control goroutine only

	// The peer's slot.
	peerState, peerDoorbell, peerCtrlBell, peerReasonLen *uint32
	peerSleepers                                         *uint32
	peerCtrlAddr                                         *ctrlAddr // the peer's control socket (ctrlwake_linux.go)
	peerHB                                               *uint64
	peerPulse                                            *uint64 // moves while the peer polls (await)
	peerReason                                           []byte
	peerPid                                              int
	watch                                                *procWatch // nil: same process

	// Liveness, control goroutine only.
	lastHB   uint64
	lastHBAt time.Time

	mu         sync.Mutex   // guards box and the fields below
	box        *mailbox.Box // the streams the peer sends on
	peerClosed bool         // the peer said goodbye
	byeErr     error        // what ops on this link fail with after the goodbye
}

func newLink(t *Transport, peer int) *link {
	l := &link{t: t, peer: peer, self: peer == t.rank, wsem: make(chan struct{}, 1)}
	l.box = mailbox.New(&l.mu)
	l.box.OnFinish = t.wakeLocal
	return l
}

// noteGoodbye records the peer's goodbye (once) and wakes this rank's
// waiters so that they re-check. The posted receives fail once the ring is
// drained (see drain).
func (l *link) noteGoodbye() {
	l.mu.Lock()
	if l.peerClosed {
		l.mu.Unlock()
		return
	}
	n := min(int(atomic.LoadUint32(l.peerReasonLen)), len(l.peerReason))
	l.peerClosed = true
	l.byeErr = peerClosedErr(l.peer, string(l.peerReason[:n]))
	l.mu.Unlock()
	l.t.epoch.Add(1)
	l.t.wakeAll()
}

// closedErr returns the error of an op on this link if its peer said
// goodbye, else nil.
func (l *link) closedErr() error {
	if l.self || atomic.LoadUint32(l.peerState) != stateClosed {
		return nil
	}
	l.noteGoodbye()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byeErr
}

// sendState is the error a Send of group on this link must fail with.
func (l *link) sendState(group uint64) error {
	if err := l.t.state(group); err != nil {
		return err
	}
	return l.closedErr()
}

// writeFrame writes one data record into the outbound ring, waiting for
// space. The caller holds wsem.
func (l *link) writeFrame(ctx context.Context, h *wire.Header, p []byte) error {
	r := &l.out
	size := uint64(len(r.data))
	need := uint64(dataRecHdr + align64(len(p)))
	for {
		pos := l.otail & (size - 1)
		if room := size - pos; room < need {
			// Fill the end of the ring with a pad record and wrap.
			if err := l.waitSpace(ctx, h.Group, room); err != nil {
				return err
			}
			rec := r.data[pos:]
			binary.LittleEndian.PutUint32(rec[0:], uint32(room))
			rec[4] = recPad
			l.otail += room
			atomic.StoreUint64(r.tail, l.otail)
			continue
		}
		if err := l.waitSpace(ctx, h.Group, need); err != nil {
			return err
		}
		rec := r.data[pos : pos+need]
		binary.LittleEndian.PutUint32(rec[0:], uint32(need))
		rec[4] = recData
		h.Encode(rec[64:dataRecHdr])
		copy(rec[dataRecHdr:], p)
		raceRelease()
		l.otail += need
		atomic.StoreUint64(r.tail, l.otail)
		if atomic.LoadUint32(r.dataWaiters) != 0 {
			ring(l.peerDoorbell)
		}
		return nil
	}
}

// waitSpace waits until the outbound ring has need free bytes.
func (l *link) waitSpace(ctx context.Context, group uint64, need uint64) error {
	r := &l.out
	size := uint64(len(r.data))
	free := func() bool { return size-(l.otail-atomic.LoadUint64(r.head)) >= need }
	if free() {
		return nil
	}
	t := l.t
	for {
		ep := t.epoch.Load()
		if err := l.sendState(group); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		ready := func() bool { return free() || atomic.LoadUint32(l.peerState) == stateClosed }
		if t.await(ctx, ep, r.spaceWaiters, l, l.peerPulse, ready) && free() {
			return nil
		}
	}
}

// wait drives the receive of op to its end: it takes the consumer role of
// the inbound ring whenever it is free and drains (delivering to every
// posted receive, not just op), and otherwise waits for data or for
// another drainer to finish op.
func (l *link) wait(ctx context.Context, s *mailbox.Stream, op *mailbox.Recv) error {
	t := l.t
	group := op.Want.Group
	var flag *uint32
	if !l.self {
		flag = l.in.dataWaiters
	}
	ready := func() bool {
		if op.Done() {
			return true
		}
		if l.self {
			return false
		}
		return (atomic.LoadUint64(l.in.tail) != atomic.LoadUint64(l.in.head) ||
			atomic.LoadUint32(l.peerState) == stateClosed) && !l.draining.Load()
	}
	for {
		if op.Done() {
			return op.Err
		}
		ep := t.epoch.Load()
		if err := t.state(group); err != nil {
			return l.cancel(s, op, err)
		}
		if ctx.Err() != nil {
			return l.cancel(s, op, ctxErr(ctx))
		}
		if !l.self && l.draining.CompareAndSwap(false, true) {
			err := l.drain(op)
			l.releaseDrain()
			if err != nil {
				t.fail(err)
				continue
			}
			if op.Done() {
				return op.Err
			}
		}
		t.await(ctx, ep, flag, nil, l.peerPulse, ready)
	}
}

// releaseDrain gives up the consumer role; if records remain, a waiter may
// have to take over.
func (l *link) releaseDrain() {
	head := l.ihead
	l.draining.Store(false)
	if atomic.LoadUint64(l.in.tail) != head {
		l.t.wakeLocal()
	}
}

// cancel ends op with err unless it finished already. If a drainer is
// copying into op's buffer, it waits for that frame first.
func (l *link) cancel(s *mailbox.Stream, op *mailbox.Recv, err error) error {
	return l.box.Cancel(s, op, err, func(op *mailbox.Recv) {
		for !op.Done() {
			l.t.await(context.Background(), l.t.epoch.Load(), nil, nil, nil, op.Done)
		}
	})
}

// drain consumes the records available in the inbound ring, handing each
// frame to its stream's posted receive or queueing it, until stop is done
// (nil: until the ring is empty). If the ring is empty and the peer said
// goodbye, it fails every posted receive of the link. The caller holds the
// consumer role (l.draining). A malformed record is returned as a
// protocol error naming the peer.
func (l *link) drain(stop *mailbox.Recv) error {
	r := &l.in
	size := uint64(len(r.data))
	for {
		if stop != nil && stop.Done() {
			return nil
		}
		tail := atomic.LoadUint64(r.tail)
		if tail == l.ihead {
			if atomic.LoadUint32(l.peerState) != stateClosed {
				return nil
			}
			// The peer wrote everything before it said goodbye.
			if atomic.LoadUint64(r.tail) != l.ihead {
				continue
			}
			l.noteGoodbye()
			l.failPosted()
			return nil
		}
		raceAcquire()
		avail := tail - l.ihead
		if avail > size {
			return protoErr(l.peer, "ring indices out of range (tail %d, head %d)", tail, l.ihead)
		}
		pos := l.ihead & (size - 1)
		rec := r.data[pos:]
		recLen := uint64(binary.LittleEndian.Uint32(rec[0:]))
		typ := rec[4]
		if recLen < 64 || recLen%64 != 0 || recLen > avail || pos+recLen > size {
			return protoErr(l.peer, "bad record length %d at ring offset %d (%d bytes available)", recLen, pos, avail)
		}
		switch typ {
		case recPad:
		case recData:
			if recLen < dataRecHdr {
				return protoErr(l.peer, "data record of %d bytes", recLen)
			}
			var hb [wire.HeaderSize]byte
			copy(hb[:], rec[64:dataRecHdr])
			h, err := wire.Decode(hb[:])
			if err != nil {
				return protoErr(l.peer, "%v", err)
			}
			if h.Kind != wire.KindColl && h.Kind != wire.KindP2P {
				return protoErr(l.peer, "%v frame in the data ring", h.Kind)
			}
			if uint64(dataRecHdr+align64(int(h.Len))) != recLen {
				return protoErr(l.peer, "frame of %d payload bytes in a %d-byte record", h.Len, recLen)
			}
			if err := l.deliver(h, rec[dataRecHdr:dataRecHdr+int(h.Len)]); err != nil {
				return err
			}
		default:
			return protoErr(l.peer, "unknown record type %d", typ)
		}
		l.ihead += recLen
		atomic.StoreUint64(r.head, l.ihead)
		if atomic.LoadUint32(r.spaceWaiters) != 0 {
			ring(l.peerDoorbell)
		}
	}
}

// failPosted fails every posted receive of the link with its goodbye error.
func (l *link) failPosted() {
	l.mu.Lock()
	woke := l.box.FailPosted(l.byeErr)
	l.mu.Unlock()
	if woke {
		l.t.wakeLocal()
	}
}

// deliver hands one frame (data, still in the ring) to its stream: to the
// posted receive if there is one (copied into its buffer, or passed to its
// fn in place), else into a queued copy.
func (l *link) deliver(h wire.Header, data []byte) error {
	key := mailbox.KeyOf(h)
	box := l.box
	l.mu.Lock()
	s := box.Stream(key)
	if op := s.Posted(); op != nil {
		off, ok := box.Start(key, s, op, h)
		l.mu.Unlock()
		if !ok {
			l.t.wakeLocal()
			return nil
		}
		op.Put(off, data)
		l.mu.Lock()
		fin := op.Written(int(h.Len), nil, nil)
		box.Unpost(key, s, op)
		l.mu.Unlock()
		if fin {
			l.t.wakeLocal()
		}
		return nil
	}
	if box.Queued+int64(h.Len) > l.t.opts.MaxUnexpected {
		l.mu.Unlock()
		return protoErr(l.peer, "sent more than %d bytes that no receive was posted for", l.t.opts.MaxUnexpected)
	}
	box.Queued += int64(h.Len) // reserved while the payload is copied
	l.mu.Unlock()
	buf := make([]byte, h.Len)
	copy(buf, data)
	l.mu.Lock()
	box.Queued -= int64(h.Len)
	box.Queue(key, box.Stream(key), h, buf)
	l.mu.Unlock()
	return nil
}

// deliverLocal puts a message sent to this rank itself into the mailbox,
// copying it (straight into a posted receive when there is one).
func (l *link) deliverLocal(h wire.Header, payload []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.box.DeliverLocal(h, payload, func(n int) []byte { return make([]byte, n) })
	return nil
}

// sendAbort writes an abort record for group into the outbound control
// ring and rings the peer's control bell. It reports false if the ring
// has no room.
func (l *link) sendAbort(group uint64, text string) bool {
	if atomic.LoadUint32(l.peerState) == stateClosed {
		return true // nobody reads the ring any more
	}
	l.ctlMu.Lock()
	defer l.ctlMu.Unlock()
	r := &l.out
	size := uint64(len(r.ctrl))
	need := uint64(ctrlRecHdr + align64(len(text)))
	for {
		free := size - (l.ctail - atomic.LoadUint64(r.chead))
		pos := l.ctail & (size - 1)
		if room := size - pos; room < need {
			if free < room {
				return false
			}
			binary.LittleEndian.PutUint32(r.ctrl[pos:], uint32(room))
			r.ctrl[pos+4] = recPad
			l.ctail += room
			atomic.StoreUint64(r.ctail, l.ctail)
			continue
		}
		if free < need {
			return false
		}
		rec := r.ctrl[pos : pos+need]
		binary.LittleEndian.PutUint32(rec[0:], uint32(need))
		rec[4] = recAbort
		binary.LittleEndian.PutUint64(rec[8:], group)
		binary.LittleEndian.PutUint32(rec[16:], uint32(len(text)))
		copy(rec[ctrlRecHdr:], text)
		l.ctail += need
		atomic.StoreUint64(r.ctail, l.ctail)
		l.ringCtrl()
		return true
	}
}

// readControl processes the records of the inbound control ring (aborts).
// Control goroutine only.
func (l *link) readControl() error {
	r := &l.in
	size := uint64(len(r.ctrl))
	for {
		tail := atomic.LoadUint64(r.ctail)
		if tail == l.chead {
			return nil
		}
		avail := tail - l.chead
		pos := l.chead & (size - 1)
		if avail > size {
			return protoErr(l.peer, "control ring indices out of range")
		}
		rec := r.ctrl[pos:]
		recLen := uint64(binary.LittleEndian.Uint32(rec[0:]))
		if recLen < 64 || recLen%64 != 0 || recLen > avail || pos+recLen > size {
			return protoErr(l.peer, "bad control record length %d", recLen)
		}
		switch rec[4] {
		case recPad:
		case recAbort:
			group := binary.LittleEndian.Uint64(rec[8:])
			n := uint64(binary.LittleEndian.Uint32(rec[16:]))
			if n > wire.MaxAbortText || ctrlRecHdr+n > recLen {
				return protoErr(l.peer, "abort record with %d bytes of text", n)
			}
			text := string(rec[ctrlRecHdr : ctrlRecHdr+n])
			l.t.logf("shm: rank %d: rank %d aborted group %#x: %s", l.t.rank, l.peer, group, text)
			err := fmt.Errorf("%w: rank %d aborted: %s", comm.ErrAborted, l.peer, text)
			l.t.abortGroup(group, err)
			if f := l.t.opts.OnAbort; f != nil {
				f(group, err)
			}
		default:
			return protoErr(l.peer, "unknown control record type %d", rec[4])
		}
		l.chead += recLen
		atomic.StoreUint64(r.chead, l.chead)
	}
}

// checkPeer looks at the peer's slot and process: it notes a goodbye, and
// returns an error if the peer died or stopped its heartbeats for the
// peer deadline. Control goroutine only.
func (l *link) checkPeer(now time.Time) error {
	if atomic.LoadUint32(l.peerState) == stateClosed {
		l.noteGoodbye()
		return nil
	}
	if hb := atomic.LoadUint64(l.peerHB); hb != l.lastHB {
		l.lastHB, l.lastHBAt = hb, now
	}
	if l.watch != nil && !l.watch.alive() {
		if atomic.LoadUint32(l.peerState) == stateClosed {
			l.noteGoodbye()
			return nil
		}
		return lostErr(l.peer, "process %d died", l.peerPid)
	}
	if d := now.Sub(l.lastHBAt); d > l.t.peerDL {
		return lostErr(l.peer, "no heartbeat for %v", d.Round(time.Millisecond))
	}
	return nil
}

// ctrlLoop is the control goroutine: it sleeps until this rank's control
// bell is rung (for aborts, goodbyes and producers stuck on a full ring;
// see ctrlSleep), for at most a tick, bumps this rank's heartbeat, handles the control rings,
// watches the peers' liveness, and drains a ring whose producer waits for
// space while no receive is draining it (so a sender never waits forever
// for a receive that is not posted yet).
func (t *Transport) ctrlLoop() {
	defer close(t.ctrlDone)
	seen := atomic.LoadUint32(t.ctrlBell)
	for {
		if t.stopCtrl.Load() {
			return
		}
		t.ctrlSleep(seen)
		seen = atomic.LoadUint32(t.ctrlBell)
		if t.stopCtrl.Load() {
			return
		}
		atomic.AddUint64(t.heartbeat, 1)
		now := time.Now()
		for _, l := range t.peers {
			if err := l.readControl(); err != nil {
				t.fail(err)
			}
			if t.isDead() {
				continue
			}
			if err := l.checkPeer(now); err != nil {
				t.fail(err)
				continue
			}
			if atomic.LoadUint32(l.in.spaceWaiters) != 0 && l.draining.CompareAndSwap(false, true) {
				err := l.drain(nil)
				l.releaseDrain()
				if err != nil {
					t.fail(err)
				}
			}
		}
	}
}
