package algo

import (
	"context"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/wire"
)

// Point-to-point ops. Each runs on a goroutine of its own (a Send and a
// Recv must progress without a Wait: two ranks may each Send, then Recv,
// then Wait), ordered after the previous op of the same (direction,
// peer, tag). What used to be per op besides the goroutine, a timeout
// ctx (a timer, a cancel ctx, an AfterFunc on the Comm's life) and a
// Request, is now shared or folded into the op: the ops issued under one
// user ctx share one ctx (p2pCtx, made again only when the user's Done
// channel changes), and one watchdog timer per Comm, ticking only while
// p2p ops are pending, enforces the timeout. A p2p op that overruns it
// fails the Comm anyway, so ending the shared ctx, which fails the other
// pending p2p ops too, changes no outcome. Issuing an op allocates the
// op (its Work), its done channel and its goroutine's closure.

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
	o    op // o.a is the buffer, o.root the peer
	key  p2pKey
	prev chan struct{} // done channel of the previous op of key, if any
	uc   *p2pCtx
	done chan struct{} // closed when err is set
	err  error
}

var _ comm.Work = (*p2pOp)(nil)

// Wait: see comm.Work.
func (p *p2pOp) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done: see comm.Work.
func (p *p2pOp) Done() <-chan struct{} { return p.done }

// Err: see comm.Work.
func (p *p2pOp) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (c *Comm) p2p(ctx context.Context, send bool, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	name, err := c.args.P2P(ctx, send, buf, peer)
	if err != nil {
		return nil, err
	}
	h := wire.Header{Kind: wire.KindP2P, Op: wire.OpSend, Group: c.group, Seq: uint64(int64(tag)),
		DType: uint8(buf.DType()), Count: uint64(buf.Len())}
	p := &p2pOp{o: op{c: c, user: ctx, name: name, hdr: h, dt: buf.DType(), a: buf, root: peer},
		key: p2pKey{send: send, peer: peer, tag: tag}, done: make(chan struct{})}
	c.mu.Lock()
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		return nil, &comm.OpError{Op: name, Rank: c.rank, Err: err}
	}
	p.prev = c.p2pTail[p.key]
	c.p2pTail[p.key] = p.done
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
	c.mu.Unlock()
	go p.run()
	return p, nil
}

// run waits for the previous op of p's key, then runs p.
func (p *p2pOp) run() {
	c := p.o.c
	if p.prev != nil {
		select {
		case <-p.prev:
		case <-p.o.ctx.Done():
		}
	}
	run := runRecv
	if p.key.send {
		run = runSend
	}
	p.err = c.run(&p.o, run)
	c.mu.Lock()
	if c.p2pTail[p.key] == p.done {
		delete(c.p2pTail, p.key)
	}
	c.p2pPut(p)
	c.mu.Unlock()
	close(p.done)
}

func runSend(o *op) error { return o.send(o.root, 0, o.a.Host()) }
func runRecv(o *op) error { return o.recv(o.root, 0, o.a.Host()) }
