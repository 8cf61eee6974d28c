//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/opcheck"
)

// Point-to-point messages. comm.Comm wants them ordered per (peer, tag),
// independent of other tags and of the collectives; NCCL matches sends and
// receives per pair in issue order and serializes everything on one
// communicator. So each (sender, receiver, tag) gets its own two-rank NCCL
// communicator (a channel), made on first use: the sender creates the
// unique id and publishes it through the store. A message to this rank
// itself never touches NCCL: sends and receives are matched here per tag
// and the data moves with a device-to-device copy on a separate stream.

type chanKey struct{ src, dst, tag int }

type channel struct {
	key   chanKey
	ready chan struct{} // closed once c or err is set
	c     *Comm         // the two-rank communicator: sender rank 0, receiver rank 1
	err   error
	last  chan struct{} // guarded by the parent's mu: closed once the last op issued on the channel was launched
}

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
	dt, err := c.dtype(name, buf.DType())
	if err != nil {
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
	key := chanKey{c.rank, peer, tag}
	if !send {
		key = chanKey{peer, c.rank, tag}
	}
	ch := c.chans[key]
	if ch == nil {
		ch = &channel{key: key, ready: make(chan struct{}), last: closedChan}
		c.chans[key] = ch
		go c.openChannel(ch)
	}
	prev := ch.last
	launched := make(chan struct{})
	ch.last = launched
	req := comm.NewRequest()
	go c.runP2P(ctx, name, ch, prev, launched, send, buf, dt, req)
	return req, nil
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *Comm) runP2P(ctx context.Context, name string, ch *channel, prev <-chan struct{}, launched chan struct{},
	send bool, buf comm.Buffer, dt C.int, req *comm.Request) {
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
	peer := 1
	if !send {
		peer = 0
	}
	cc := ch.c
	ops := []C.gdnc_p2p{p2pOp(send, buf, peer, dt)}
	w, err := cc.issue(ctx, cc.coll, name, false, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_group(cc.lib.c, C.int(cc.device), st, ev, h, &ops[0], 1)
	}, nil)
	markLaunched()
	if err != nil {
		req.Complete(err)
		return
	}
	req.Complete(w.Wait(context.Background()))
}

// openChannel sets up ch's communicator; the sender makes the unique id.
func (c *Comm) openChannel(ch *channel) {
	key := fmt.Sprintf("%s/p2p/%d.%d.%d", c.path, ch.key.src, ch.key.dst, ch.key.tag)
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
			opts: c.opts, store: c.store, path: key, parent: c})
	}()
	if err != nil {
		err = fmt.Errorf("nccl: setting up messages with tag %d from rank %d to rank %d: %w", ch.key.tag, ch.key.src, ch.key.dst, err)
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
	send   bool
	name   string
	buf    comm.Buffer
	req    *comm.Request
	stop   func() bool
	cancel context.CancelFunc
	done   atomic.Bool
}

type selfQueue struct{ ops []*selfOp } // unmatched ops, all sends or all receives

// take claims o for a match; false if it already failed.
func (o *selfOp) take() bool {
	if o.done.Swap(true) {
		return false
	}
	o.stop()
	o.cancel()
	return true
}

func (o *selfOp) fail(c *Comm, err error) {
	if o.take() {
		o.req.Complete(&comm.OpError{Op: o.name, Rank: c.reportRank, Err: err})
	}
}

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
	o := &selfOp{send: send, name: name, buf: buf, req: comm.NewRequest()}
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
