package algo

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/wire"
)

// Point-to-point ops. Like collectives (comm.go), a Send or Recv does
// not get a goroutine of its own: its Wait runs it (and any op of the same
// (direction, peer, tag) issued before it and not started yet, which must
// run first) on the caller's goroutine. An op that nobody runs gets a
// runner goroutine: at once if somebody asks for its Done channel or
// waits under another ctx, else from the Comm's kick timer, between one
// and two kick periods after it became runnable. So two ranks that each
// Send, then Recv, then Wait for the Send progress even if the Sends wait
// for their Recvs: the kicks start the Recvs. A runner goes on with the
// next op of its key. The ops issued under one user ctx share one ctx
// (p2pCtx, made again only when the user's Done channel changes), and one
// watchdog timer per Comm, ticking only while p2p ops are pending,
// enforces the timeout. A p2p op that overruns it fails the Comm anyway,
// so ending the shared ctx, which fails the other pending p2p ops too,
// changes no outcome. An op's record is its Work; once a Wait returned
// its outcome it is recycled (see comm.Work), so in steady state issuing,
// running and waiting for an op allocate nothing.

// p2pState is a Comm's shared p2p machinery (guarded by c.mu).
type p2pState struct {
	cur    *p2pCtx           // the ctx of ops under the latest user ctx
	live   map[*p2pOp]uint64 // pending ops and the tick they were issued at
	ticks  uint64            // times p2pWatch ran
	dog    *time.Timer       // runs p2pWatch; nil until the first op
	dogSet bool              // dog is armed
}

// p2pCtx is the ctx of p2p ops issued under user ctxs with one Done
// channel: it ends when they end, when the Comm closes, or when a p2p op
// overruns the timeout.
type p2pCtx struct {
	done   <-chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool // stops the AfterFunc on the user ctx, if any
	refs   int         // pending ops that use it
}

func (u *p2pCtx) free() {
	if u.stop != nil {
		u.stop()
	}
	u.cancel()
}

// p2pCtxFor returns the shared ctx for an op issued under user, with a
// reference taken. c.mu is held.
func (c *Comm) p2pCtxFor(user context.Context) *p2pCtx {
	s := &c.p2ps
	d := user.Done()
	u := s.cur
	if u == nil || u.done != d || u.ctx.Err() != nil {
		if u != nil && u.refs == 0 {
			u.free()
		}
		ctx, cancel := context.WithCancel(c.life)
		u = &p2pCtx{done: d, ctx: ctx, cancel: cancel}
		if d != nil {
			u.stop = context.AfterFunc(user, cancel)
		}
		s.cur = nil
		if !c.closed {
			s.cur = u
		}
	}
	u.refs++
	return u
}

// p2pPut drops p's reference on its ctx and its watch. c.mu is held.
func (c *Comm) p2pPut(p *p2pOp) {
	s := &c.p2ps
	delete(s.live, p)
	u := p.uc
	if u.refs--; u.refs == 0 && s.cur != u {
		u.free()
	}
}

// p2pClose releases the current shared ctx. c.mu is held.
func (c *Comm) p2pClose() {
	s := &c.p2ps
	if u := s.cur; u != nil {
		s.cur = nil
		if u.refs == 0 {
			u.free()
		}
	}
}

// p2pWatch runs dogTicks times per timeout while p2p ops are pending;
// once one is more than dogTicks ticks old, it ends that op's ctx.
func (c *Comm) p2pWatch() {
	c.mu.Lock()
	s := &c.p2ps
	s.ticks++
	if len(s.live) == 0 {
		s.dogSet = false
		c.mu.Unlock()
		return
	}
	var late []*p2pCtx
	for p, t := range s.live {
		if s.ticks-t > dogTicks {
			late = append(late, p.uc)
		}
	}
	for _, u := range late {
		if s.cur == u {
			// Later ops get a fresh ctx; this one is freed when its
			// last op is done (p2pPut).
			s.cur = nil
		}
	}
	s.dog.Reset(c.opts.OpTimeout() / dogTicks)
	c.mu.Unlock()
	for _, u := range late {
		u.cancel()
	}
}

// p2pOp is a Send or a Recv, and its Work.
type p2pOp struct {
	o   op // o.a is the buffer, o.root the peer
	key p2pKey
	uc  *p2pCtx

	// Guarded by c.mu.
	prev, next *p2pOp        // the ops of key issued just before and after (prev is nil once it completed)
	started    bool          // taken to run (off c.p2pq)
	kicked     bool          // a kick saw it runnable and not started
	prompt     bool          // not small: start a runner as soon as it is runnable
	done       chan struct{} // made on demand, closed on completion

	complete atomic.Bool // err is set
	released atomic.Bool // a Wait returned the outcome: the record may be reused
	err      error
}

var _ comm.Work = (*p2pOp)(nil)

// Wait: see comm.Work. It runs the op, and any op of its key issued
// before it that has not started, on the calling goroutine when ctx can
// only end when the op's own ctx does (as collectives do); otherwise, or
// while an earlier op of its key runs elsewhere, it waits for a runner.
func (p *p2pOp) Wait(ctx context.Context) error {
	c := p.o.c
	for {
		if p.released.Load() {
			return p.o.releasedErr()
		}
		if p.complete.Load() {
			return p.finish()
		}
		c.mu.Lock()
		if p.complete.Load() {
			c.mu.Unlock()
			continue
		}
		q := p // the earliest op of p's key not complete
		for q.prev != nil {
			q = q.prev
		}
		if !q.started {
			if d := ctx.Done(); d == nil || d == q.o.user.Done() {
				c.p2pTake(q)
				c.mu.Unlock()
				c.p2pRun(q, false)
				continue
			}
			c.p2pTake(q)
			go c.p2pRunner(q)
		}
		ch := q.doneChan()
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// finish returns p's outcome to its Wait and recycles p.
func (p *p2pOp) finish() error {
	c := p.o.c
	err := p.err
	c.mu.Lock()
	if p.released.Load() {
		c.mu.Unlock()
		return p.o.releasedErr()
	}
	p.released.Store(true)
	p.o.a, p.o.ctx, p.o.user, p.uc = comm.Buffer{}, nil, nil, nil
	c.p2pRec.put(p)
	c.mu.Unlock()
	return err
}

// doneChan returns p's done channel, making it if need be. c.mu is held.
func (p *p2pOp) doneChan() chan struct{} {
	if p.complete.Load() {
		return closedChan
	}
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}

// Done: see comm.Work. Somebody is about to block on it: if nothing runs
// the op yet and nothing must run before it, a runner goroutine starts.
func (p *p2pOp) Done() <-chan struct{} {
	if p.complete.Load() || p.released.Load() {
		return closedChan
	}
	c := p.o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.prev == nil && !p.started {
		c.p2pTake(p)
		go c.p2pRunner(p)
	}
	return p.doneChan()
}

// Err: see comm.Work.
func (p *p2pOp) Err() error {
	if p.released.Load() {
		return p.o.releasedErr()
	}
	if p.complete.Load() {
		return p.err
	}
	return nil
}

func (c *Comm) p2p(ctx context.Context, send bool, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	name, err := c.args.P2P(ctx, send, buf, peer)
	if err != nil {
		return nil, err
	}
	h := wire.Header{Kind: wire.KindP2P, Op: wire.OpSend, Group: c.group, Seq: uint64(int64(tag)),
		DType: uint8(buf.DType()), Count: uint64(buf.Len())}
	c.mu.Lock()
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		return nil, &comm.OpError{Op: name, Rank: c.rank, Err: err}
	}
	p := c.p2pRec.get()
	if p == nil {
		p = new(p2pOp)
	}
	*p = p2pOp{o: op{c: c, user: ctx, name: name, hdr: h, dt: buf.DType(), a: buf, root: peer},
		key: p2pKey{send: send, peer: peer, tag: tag}}
	if t := c.p2pTail[p.key]; t != nil {
		p.prev, t.next = t, p
	}
	c.p2pTail[p.key] = p
	p.uc = c.p2pCtxFor(ctx)
	p.o.ctx = p.uc.ctx
	s := &c.p2ps
	if d := c.opts.OpTimeout(); d > 0 {
		if s.live == nil {
			s.live = map[*p2pOp]uint64{}
		}
		s.live[p] = s.ticks
		if !s.dogSet {
			if s.dog == nil {
				s.dog = time.AfterFunc(d/dogTicks, c.p2pWatch)
			} else {
				s.dog.Reset(d / dogTicks)
			}
			s.dogSet = true
		}
	}
	// A small Send (one the transport delivers without waiting for its
	// Recv) runs now, on this goroutine, unless an earlier op of its key
	// is pending; a message that is not small gets a runner at once, as
	// its transfer is worth overlapping; a small Recv of at most
	// lazyRecvBytes waits for its Wait (or a kick): its data waits in the
	// transport meanwhile (larger ones would fill a ring sooner).
	n := len(buf.Host())
	small := p.o.eager(peer, n)
	if !send && n > lazyRecvBytes {
		small = false
	}
	p.prompt = !small
	switch {
	case p.prev != nil:
		c.p2pq = append(c.p2pq, p)
	case small && send:
		p.started = true
		c.mu.Unlock()
		c.p2pRun(p, false)
		return p, nil
	case !small:
		p.started = true
		c.mu.Unlock()
		go c.p2pRunner(p)
		return p, nil
	default:
		c.p2pq = append(c.p2pq, p)
	}
	c.armKick()
	c.mu.Unlock()
	return p, nil
}

// p2pTake marks p started and takes it off c.p2pq. c.mu is held.
func (c *Comm) p2pTake(p *p2pOp) {
	p.started = true
	for i, q := range c.p2pq {
		if q == p {
			last := len(c.p2pq) - 1
			copy(c.p2pq[i:], c.p2pq[i+1:])
			c.p2pq[last] = nil
			c.p2pq = c.p2pq[:last]
			break
		}
	}
}

// p2pRun runs p (taken) and completes it. With chain, it then takes
// and returns the next op of p's key if nobody has started it.
func (c *Comm) p2pRun(p *p2pOp, chain bool) *p2pOp {
	run := runRecv
	if p.key.send {
		run = runSend
	}
	err := c.run(&p.o, run)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p2pTail[p.key] == p {
		delete(c.p2pTail, p.key)
	}
	n := p.next
	if n != nil {
		n.prev = nil
		p.next = nil
	}
	c.p2pPut(p)
	p.err = err
	p.complete.Store(true)
	if p.done != nil {
		close(p.done)
	}
	if n != nil && !n.started && (chain || n.prompt) {
		c.p2pTake(n)
		if chain {
			return n
		}
		go c.p2pRunner(n)
	}
	return nil
}

// p2pRunner runs p (taken) on a goroutine of its own, then each later op
// of its key that nobody has started.
func (c *Comm) p2pRunner(p *p2pOp) {
	for p != nil {
		p = c.p2pRun(p, true)
	}
}

// p2pKicked starts a runner for each op that is runnable and was seen
// not started by the previous kick; it reports whether ops are left
// waiting for a later kick, and whether it started any. c.mu is held.
func (c *Comm) p2pKicked() (left, started bool) {
	for i := 0; i < len(c.p2pq); {
		p := c.p2pq[i]
		if p.prev != nil {
			left = true
			i++
			continue
		}
		if !p.kicked {
			p.kicked = true
			left = true
			i++
			continue
		}
		c.p2pTake(p)
		started = true
		go c.p2pRunner(p)
	}
	return left, started
}

// lazyRecvBytes: see p2p.
const lazyRecvBytes = 16 << 10

func runSend(o *op) error { return o.send(o.root, 0, o.a.Host()) }
func runRecv(o *op) error { return o.recv(o.root, 0, o.a.Host()) }
