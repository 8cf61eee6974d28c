//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/opcheck"
	"github.com/gdist/gdist/gpu/cuda"
)

// Point-to-point messages. comm.Comm wants them ordered per (peer, tag),
// independent of other tags and of the collectives. NCCL matches sends and
// receives between two ranks of one communicator in issue order, and runs
// the operations of one communicator one after another; a receive posted
// ahead (as pipelines do) would hold up every later operation on its
// communicator, so the two directions must not share one. Each ordered pair
// (sender, receiver) that exchanges messages therefore gets one two-rank
// communicator (a channel: sender rank 0, receiver rank 1), whatever the
// tags: the two channels of a pair are made together, at the first message
// between the two ranks, in the same order on both (the lower rank's
// sending channel first), so a pair's creations never wait for each other.
//
// Tags are matched on the host: every message is a 24-byte header (tag,
// dtype, count) followed by the data, in one NCCL group. The receiver runs
// one loop per channel while receives from that peer are pending: it
// receives the next header, copies it to pinned memory, reads it, and
// receives the data straight into the oldest pending receive with that tag;
// a message whose tag nobody waits for yet is received into device memory
// from the pool and copied on the device when its receive comes. So tags
// stay independent, messages of one tag arrive in order, and a mismatched
// dtype or count is reported as comm.ErrMismatch.
//
// A message to this rank itself never touches NCCL: sends and receives are
// matched here per tag and the data moves with a device-to-device copy on a
// separate stream.

type chanKey struct{ src, dst int }

type channel struct {
	key   chanKey
	ready chan struct{} // closed once c or err is set
	c     *Comm         // the two-rank communicator: sender rank 0, receiver rank 1
	err   error

	// Guarded by the parent's mu.
	last    chan struct{}      // sender: closed once the last send issued was launched
	recvs   map[int][]*recvOp  // receiver: pending receives per tag, oldest first
	nrecv   int                // receiver: pending receives, all tags
	stash   map[int][]*stashed // receiver: messages that came before their receive
	looping bool               // receiver: the receive loop runs
}

// A recvOp is a receive waiting for its message's header.
type recvOp struct {
	ctx context.Context
	pendingOp
}

// pendingOp is a posted send or receive waiting for its match: matched
// (take) or failed, once.
type pendingOp struct {
	name   string
	buf    comm.Buffer
	req    *comm.Request
	stop   func() bool
	cancel context.CancelFunc
	done   atomic.Bool
}

// take claims o for a match; false if it already failed.
func (o *pendingOp) take() bool {
	if o.done.Swap(true) {
		return false
	}
	o.stop()
	o.cancel()
	return true
}

func (o *pendingOp) fail(c *Comm, err error) {
	if o.take() {
		o.req.Complete(&comm.OpError{Op: o.name, Rank: c.reportRank, Err: err})
	}
}

// A stashed message came before a receive with its tag was posted.
type stashed struct {
	dt  comm.DType
	n   int
	blk *cuda.Block // nil for an empty message
}

// hdrBytes is the size of a message header: tag, dtype, count (int64 each).
const hdrBytes = 24

// Send: see comm.Comm.
func (c *Comm) Send(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return c.p2p(ctx, true, buf, peer, tag)
}

// Recv: see comm.Comm.
func (c *Comm) Recv(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return c.p2p(ctx, false, buf, peer, tag)
}

func (c *Comm) p2p(ctx context.Context, send bool, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	name, err := c.args.P2P(ctx, send, buf, peer)
	if err != nil {
		return nil, err
	}
	if _, err := c.dtype(name, buf.DType()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(name, 0); err != nil {
		return nil, err
	}
	if buf.Len() == 0 { // both sides agree on the length: nothing to move
		return comm.Completed(nil), nil
	}
	if peer == c.rank {
		return c.selfLocked(ctx, name, send, buf, tag)
	}
	key := chanKey{c.rank, peer}
	if !send {
		key = chanKey{peer, c.rank}
	}
	ch := c.channelLocked(key)
	if send {
		prev := ch.last
		launched := make(chan struct{})
		ch.last = launched
		req := comm.NewRequest()
		go c.runSend(ctx, name, ch, prev, launched, buf, tag, req)
		return req, nil
	}
	return c.recvLocked(ctx, name, ch, buf, tag)
}

// channelLocked returns the channel of key, setting up both channels between
// its two ranks if this is their first message (c.mu held).
func (c *Comm) channelLocked(key chanKey) *channel {
	if ch := c.chans[key]; ch != nil {
		return ch
	}
	lo, hi := min(key.src, key.dst), max(key.src, key.dst)
	up := &channel{key: chanKey{lo, hi}, ready: make(chan struct{}), last: closedChan}
	down := &channel{key: chanKey{hi, lo}, ready: make(chan struct{}), last: closedChan}
	c.chans[up.key], c.chans[down.key] = up, down
	go func() { // in the same order on both ranks of the pair
		c.openChannel(up)
		c.openChannel(down)
	}()
	return c.chans[key]
}

// ConnectPeers makes the send/recv communicators between this rank and
// each of peers now (see comm.PeerConnector): pair by pair, in ascending
// order of (lower rank, higher rank), each pair's two in the same order as
// at a first message. It blocks until they are ready or ctx ends.
func (c *Comm) ConnectPeers(ctx context.Context, peers []int) error {
	const name = "connect_peers"
	if ctx == nil {
		return comm.InvalidArgf("%s: nil context", name)
	}
	ps := append([]int(nil), peers...)
	for _, p := range ps {
		if p < 0 || p >= c.size {
			return comm.InvalidArgf("%s: peer %d out of range [0, %d)", name, p, c.size)
		}
	}
	// Every pair has this rank in it: sorting by the other rank sorts by
	// (lower, higher).
	slices.Sort(ps)
	for _, p := range slices.Compact(ps) {
		if p == c.rank {
			continue
		}
		c.mu.Lock()
		if err := c.errLocked(name, 0); err != nil {
			c.mu.Unlock()
			return err
		}
		out, in := c.channelLocked(chanKey{c.rank, p}), c.channelLocked(chanKey{p, c.rank})
		c.mu.Unlock()
		for _, ch := range []*channel{out, in} {
			select {
			case <-ch.ready:
			case <-ctx.Done():
				return &comm.OpError{Op: name, Rank: c.reportRank, Err: fmt.Errorf("waiting for rank %d: %w", p, ctx.Err())}
			}
			if ch.err != nil {
				return &comm.OpError{Op: name, Rank: c.reportRank, Err: ch.err}
			}
		}
	}
	return nil
}

var _ comm.PeerConnector = (*Comm)(nil)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// runSend sends the header and the data of one message in one group, after
// the sends issued before it on ch were launched.
func (c *Comm) runSend(ctx context.Context, name string, ch *channel, prev <-chan struct{}, launched chan struct{},
	buf comm.Buffer, tag int, req *comm.Request) {
	markLaunched := sync.OnceFunc(func() { close(launched) })
	defer markLaunched()
	octx, cancel := opcheck.Context(ctx, c.life, c.opts.OpTimeout())
	defer cancel()
	fail := func(err error) {
		c.fail(err)
		req.Complete(&comm.OpError{Op: name, Rank: c.reportRank, Err: err})
	}
	select {
	case <-prev:
	case <-octx.Done():
		fail(c.ctxErr(name, ctx))
		return
	}
	select {
	case <-ch.ready:
	case <-octx.Done():
		fail(c.ctxErr(name, ctx))
		return
	}
	if ch.err != nil {
		fail(ch.err)
		return
	}
	hdev, hpin, err := c.headerBlocks()
	if err != nil {
		fail(fmt.Errorf("nccl: %s: %w", name, err))
		return
	}
	binary.LittleEndian.PutUint64(hpin.Host[0:], uint64(int64(tag)))
	binary.LittleEndian.PutUint64(hpin.Host[8:], uint64(buf.DType()))
	binary.LittleEndian.PutUint64(hpin.Host[16:], uint64(buf.Len()))
	cc := ch.c
	u8 := ncclTypes[comm.Uint8]
	ops := []C.gdnc_p2p{
		{kind: 3, buf: C.uintptr_t(hdev.Ptr), src: C.uintptr_t(uintptr(unsafe.Pointer(&hpin.Host[0]))), bytes: hdrBytes},
		{kind: 0, peer: 1, dt: u8, buf: C.uintptr_t(hdev.Ptr), count: hdrBytes},
		{kind: 0, peer: 1, dt: u8, buf: dptr(buf), count: C.size_t(buf.Bytes())},
	}
	w, err := cc.issue(ctx, cc.coll, name, false, cc.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_group(cc.lib.c, C.int(cc.device), st, ev, h, &ops[0], C.int(len(ops)))
	}), c.putHeader(hdev, hpin))
	markLaunched()
	if err != nil {
		req.Complete(err)
		return
	}
	req.Complete(w.Wait(context.Background()))
}

// headerBlocks gets device and pinned memory for one header.
func (c *Comm) headerBlocks() (dev, pin *cuda.Block, err error) {
	if dev, err = c.devPool.Get(hdrBytes); err != nil {
		return nil, nil, err
	}
	if pin, err = c.hostPool.Get(hdrBytes); err != nil {
		c.devPool.Put(dev)
		return nil, nil, err
	}
	return dev, pin, nil
}

// putHeader is the release function of an operation that used dev and pin.
func (c *Comm) putHeader(dev, pin *cuda.Block) func(ok bool) {
	return func(ok bool) {
		if ok { // aborted work may still touch the memory: leak it
			c.devPool.Put(dev)
			c.hostPool.Put(pin)
		}
	}
}

// recvLocked posts a receive on ch (c.mu held): from a stashed message if
// one with tag came already, else as a pending receive for ch's loop.
func (c *Comm) recvLocked(ctx context.Context, name string, ch *channel, buf comm.Buffer, tag int) (comm.Work, error) {
	if q := ch.stash[tag]; len(q) > 0 {
		m := q[0]
		if len(q) == 1 {
			delete(ch.stash, tag)
		} else {
			ch.stash[tag] = q[1:]
		}
		if err := c.matchErr(ch, tag, m.dt, m.n, buf); err != nil {
			c.failLocked(err)
			return comm.Completed(&comm.OpError{Op: name, Rank: c.reportRank, Err: err}), nil
		}
		cc := ch.c
		ops := []C.gdnc_p2p{{kind: 2, buf: dptr(buf), src: C.uintptr_t(m.blk.Ptr), bytes: C.size_t(buf.Bytes())}}
		blk := m.blk
		return cc.issue(ctx, cc.coll, name, false, cc.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
			return C.gdnc_group(cc.lib.c, C.int(cc.device), st, ev, h, &ops[0], 1)
		}), func(ok bool) {
			if ok {
				c.devPool.Put(blk)
			}
		})
	}
	o := &recvOp{ctx: ctx, pendingOp: pendingOp{name: name, buf: buf, req: comm.NewRequest()}}
	octx, cancel := opcheck.Context(ctx, c.life, c.opts.OpTimeout())
	o.cancel = cancel
	o.stop = context.AfterFunc(octx, func() { c.expireRecv(ch, o, tag) })
	if ch.recvs == nil {
		ch.recvs = map[int][]*recvOp{}
	}
	ch.recvs[tag] = append(ch.recvs[tag], o)
	ch.nrecv++
	if !ch.looping {
		ch.looping = true
		go c.recvLoop(ch)
	}
	return o.req, nil
}

// matchErr says why a message of n dt with tag does not fit buf, or nil.
func (c *Comm) matchErr(ch *channel, tag int, dt comm.DType, n int, buf comm.Buffer) error {
	if dt == buf.DType() && n == buf.Len() {
		return nil
	}
	return fmt.Errorf("%w: rank %d called send(tag %d, %v x %d), but rank %d (this rank) called recv(tag %d, %v x %d); "+
		"the messages of one tag must have the receives' dtypes and counts, in order",
		comm.ErrMismatch, ch.key.src, tag, dt, n, ch.key.dst, tag, buf.DType(), buf.Len())
}

// expireRecv fails the Comm when a receive still waiting for its message
// runs out of time.
func (c *Comm) expireRecv(ch *channel, o *recvOp, tag int) {
	c.mu.Lock()
	found := false
	for i, x := range ch.recvs[tag] {
		if x == o {
			ch.recvs[tag] = append(ch.recvs[tag][:i:i], ch.recvs[tag][i+1:]...)
			ch.nrecv--
			found = true
			break
		}
	}
	c.mu.Unlock()
	if !found {
		return
	}
	err := c.ctxErr(o.name, o.ctx)
	c.fail(err)
	o.fail(c, err)
}

// recvLoop receives the messages on ch while receives are pending.
func (c *Comm) recvLoop(ch *channel) {
	select {
	case <-ch.ready:
	case <-c.life.Done(): // closed: pending receives fail with it
		c.mu.Lock()
		ch.looping = false
		c.mu.Unlock()
		return
	}
	for {
		c.mu.Lock()
		if ch.nrecv == 0 || c.failed != nil || c.closed {
			ch.looping = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if ch.err != nil {
			c.fail(ch.err)
			continue
		}
		if err := c.receiveOne(ch); err != nil {
			c.fail(err)
		}
	}
}

// receiveOne receives the next header on ch and then its data, into the
// oldest pending receive with its tag or into the stash.
func (c *Comm) receiveOne(ch *channel) error {
	const name = "recv"
	cc := ch.c
	hdev, hpin, err := c.headerBlocks()
	if err != nil {
		return fmt.Errorf("nccl: %s: %w", name, err)
	}
	u8 := ncclTypes[comm.Uint8]
	ops := []C.gdnc_p2p{
		{kind: 1, peer: 0, dt: u8, buf: C.uintptr_t(hdev.Ptr), count: hdrBytes},
		{kind: 4, buf: C.uintptr_t(uintptr(unsafe.Pointer(&hpin.Host[0]))), src: C.uintptr_t(hdev.Ptr), bytes: hdrBytes},
	}
	var hdr [hdrBytes]byte
	release := c.putHeader(hdev, hpin)
	w, err := cc.issue(c.life, cc.coll, name, false, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_group(cc.lib.c, C.int(cc.device), st, ev, h, &ops[0], C.int(len(ops)))
	}, func(ok bool) {
		if ok {
			copy(hdr[:], hpin.Host[:hdrBytes])
		}
		release(ok)
	})
	if err != nil {
		return err
	}
	if err := w.Wait(c.life); err != nil {
		return err
	}
	tag := int(int64(binary.LittleEndian.Uint64(hdr[0:])))
	dt := comm.DType(binary.LittleEndian.Uint64(hdr[8:]))
	n := int(binary.LittleEndian.Uint64(hdr[16:]))
	if !dt.Valid() || n <= 0 {
		return fmt.Errorf("%w: rank %d: a message from rank %d has the header dtype %d, count %d", comm.ErrProtocol, ch.key.dst, ch.key.src, dt, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(name, 0); err != nil {
		return nil // the loop ends
	}
	var o *recvOp
	for q := ch.recvs[tag]; len(q) > 0 && o == nil; q = ch.recvs[tag] {
		if len(q) == 1 {
			delete(ch.recvs, tag)
		} else {
			ch.recvs[tag] = q[1:]
		}
		ch.nrecv--
		if q[0].take() {
			o = q[0]
		}
	}
	u8n := C.size_t(n * dt.Size())
	if o != nil {
		if err := c.matchErr(ch, tag, dt, n, o.buf); err != nil {
			c.failLocked(err)
			o.req.Complete(&comm.OpError{Op: o.name, Rank: c.reportRank, Err: err})
			return nil
		}
		ops := []C.gdnc_p2p{{kind: 1, peer: 0, dt: u8, buf: dptr(o.buf), count: u8n}}
		cc.mu.Lock()
		_, err := cc.issueLocked(o.ctx, cc.coll, o.name, false, cc.ordered(o.ctx, func(h, st, ev C.uintptr_t) C.int {
			return C.gdnc_group(cc.lib.c, C.int(cc.device), st, ev, h, &ops[0], 1)
		}), nil, o.req)
		cc.mu.Unlock()
		if err != nil {
			o.req.Complete(err)
			return err
		}
		return nil
	}
	// Nobody waits for this tag yet: receive into the stash, in stream
	// order before the copy out of it (c.mu is held until it is issued).
	blk, err := c.devPool.Get(int(u8n))
	if err != nil {
		return fmt.Errorf("nccl: %s: a message with tag %d from rank %d before its receive: %w", name, tag, ch.key.src, err)
	}
	ops = []C.gdnc_p2p{{kind: 1, peer: 0, dt: u8, buf: C.uintptr_t(blk.Ptr), count: u8n}}
	cc.mu.Lock()
	_, err = cc.issueLocked(c.life, cc.coll, name, false, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_group(cc.lib.c, C.int(cc.device), st, ev, h, &ops[0], 1)
	}, nil, nil)
	cc.mu.Unlock()
	if err != nil {
		return err
	}
	if ch.stash == nil {
		ch.stash = map[int][]*stashed{}
	}
	ch.stash[tag] = append(ch.stash[tag], &stashed{dt: dt, n: n, blk: blk})
	return nil
}

// openChannel sets up ch's communicator; the sender makes the unique id.
func (c *Comm) openChannel(ch *channel) {
	key := fmt.Sprintf("%s/p2p/%d.%d", c.path, ch.key.src, ch.key.dst)
	rank := 0
	if c.rank != ch.key.src {
		rank = 1
	}
	cc, err := func() (*Comm, error) {
		id, err := exchangeID(c.life, c.lib, c.device, c.store, key+"/id", rank == 0, 2)
		if err != nil {
			return nil, err
		}
		return open(c.life, c.lib, params{id: id, size: 2, rank: rank, reportRank: c.reportRank, device: c.device,
			opts: c.opts, store: c.store, path: key, parent: c, peer: ch.key.src + ch.key.dst - c.rank})
	}()
	if err != nil {
		err = fmt.Errorf("nccl: rank %d: setting up messages from rank %d to rank %d: %w", c.reportRank, ch.key.src, ch.key.dst, err)
	}
	c.mu.Lock()
	switch {
	case err != nil:
		ch.err = err
	case c.failed != nil:
		ch.err = c.failed
		defer cc.Close()
	default:
		ch.c = cc
	}
	c.mu.Unlock()
	close(ch.ready)
}

// fail fails ch's communicator, if it is set up.
func (ch *channel) fail(err error) {
	select {
	case <-ch.ready:
		if ch.c != nil {
			ch.c.fail(err)
		}
	default:
	}
}

// close closes ch's communicator once it is set up.
func (ch *channel) close() {
	go func() {
		<-ch.ready
		if ch.c != nil {
			ch.c.Close()
		}
	}()
}

// A selfOp is a send to or receive from this rank, waiting for its match.
type selfOp struct {
	send bool
	pendingOp
}

type selfQueue struct{ ops []*selfOp } // unmatched ops, all sends or all receives

// selfLocked matches a send to or receive from this rank with a waiting one
// of the other kind, or queues it (c.mu held).
func (c *Comm) selfLocked(ctx context.Context, name string, send bool, buf comm.Buffer, tag int) (comm.Work, error) {
	q := c.selfq[tag]
	if q == nil {
		q = &selfQueue{}
		c.selfq[tag] = q
	}
	for len(q.ops) > 0 && q.ops[0].send != send {
		other := q.ops[0]
		q.ops = q.ops[1:]
		if len(q.ops) == 0 {
			delete(c.selfq, tag)
		}
		if !other.take() {
			continue
		}
		sbuf, rbuf := buf, other.buf
		if !send {
			sbuf, rbuf = other.buf, buf
		}
		if sbuf.DType() != rbuf.DType() || sbuf.Len() != rbuf.Len() {
			err := fmt.Errorf("%w: rank %d sent %v to itself with tag %d, but the matching receive is %v",
				comm.ErrMismatch, c.rank, sbuf, tag, rbuf)
			c.failLocked(err)
			other.req.Complete(&comm.OpError{Op: other.name, Rank: c.reportRank, Err: err})
			return comm.Completed(&comm.OpError{Op: name, Rank: c.reportRank, Err: err}), nil
		}
		if c.self == nil {
			t, err := c.newTracker()
			if err != nil {
				err = fmt.Errorf("nccl: %s: %w", name, err)
				c.failLocked(err)
				other.req.Complete(&comm.OpError{Op: other.name, Rank: c.reportRank, Err: err})
				return nil, &comm.OpError{Op: name, Rank: c.reportRank, Err: err}
			}
			c.self = t
		}
		ops := []C.gdnc_p2p{copyOp(rbuf, sbuf)}
		w, err := c.issueLocked(ctx, c.self, name, false, func(h, st, ev C.uintptr_t) C.int {
			return C.gdnc_group(c.lib.c, C.int(c.device), st, ev, h, &ops[0], 1)
		}, nil, other.req)
		if err != nil {
			other.req.Complete(err)
			return nil, err
		}
		return w.reqs[0], nil
	}
	o := &selfOp{send: send, pendingOp: pendingOp{name: name, buf: buf, req: comm.NewRequest()}}
	octx, cancel := opcheck.Context(ctx, c.life, c.opts.OpTimeout())
	o.cancel = cancel
	o.stop = context.AfterFunc(octx, func() { c.expireSelf(o, tag, ctx) })
	q.ops = append(q.ops, o)
	return o.req, nil
}

// expireSelf fails the Comm when an unmatched send to or receive from this
// rank runs out of time (as a host backend would).
func (c *Comm) expireSelf(o *selfOp, tag int, user context.Context) {
	c.mu.Lock()
	found := false
	if q := c.selfq[tag]; q != nil {
		for i, x := range q.ops {
			if x == o {
				q.ops = append(q.ops[:i], q.ops[i+1:]...)
				found = true
				break
			}
		}
	}
	c.mu.Unlock()
	if !found {
		return
	}
	err := c.ctxErr(o.name, user)
	c.fail(err)
	o.fail(c, err)
}
