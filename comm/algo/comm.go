package algo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/opcheck"
	"github.com/gdist/gdist/comm/internal/wire"
	"github.com/gdist/gdist/internal/reduce"
)

// WorldGroup is the group id of the Comm that spans a whole Transport.
const WorldGroup uint64 = 1

// Comm implements comm.Comm over a Transport: argument checks, ordering,
// sequence numbers, algorithm choice, sub-groups and failure handling.
type Comm struct {
	t       Transport
	group   uint64
	rank    int   // rank in this Comm
	members []int // Comm rank -> world rank
	opts    comm.Options
	world   bool // closing it closes the transport
	tuning  Tuning
	layout  Layout       // which members share a host (HostMap)
	args    opcheck.Args // argument checks

	// A view (see view) runs algorithms among some ranks of base: its
	// rank i is base's rank sub[i]. Its messages are base's; what they
	// report (traffic, stalls, errors) is told in base's terms.
	base *Comm
	sub  []int

	stg *staging // the staged all-reduce's (allreduce_staged.go); nil until its first op

	life   context.Context // ends on Close
	finish context.CancelFunc

	// collCtx is the ctx of collectives issued under a ctx that never
	// ends, and the parent of those of the others (uctx): it ends on
	// Close and when a collective overruns the timeout (watch).
	collCtx    context.Context
	collCancel context.CancelFunc

	sent, received atomic.Int64  // payload bytes
	moved          []peerTraffic // per rank of the transport (traffic.go)
	heard          []heard       // per rank: the last collective message received from it

	mu       sync.Mutex
	seq      uint64
	cq       []*collOp         // collectives issued and not yet started, in issue order
	cbusy    bool              // a goroutine is running a collective of cq
	kick     *time.Timer       // runs kicked
	kickSet  bool              // kick is armed
	kickWait time.Duration     // the kick period (see armKick)
	kickFor  *collOp           // cq's head when kick last ran
	cur      *collOp           // the collective running, if any
	uctx     *userCtx          // op ctx of collectives under the latest user ctx
	dog      *time.Timer       // runs watch; nil until the first collective
	dogSet   bool              // dog is armed
	ticks    uint64            // times watch ran
	p2pTail  map[p2pKey]*p2pOp // the last p2p op issued per (dir, peer, tag), until it completes
	p2pq     []*p2pOp          // p2p ops issued and not yet started
	p2ps     p2pState          // shared ctx and timeout of p2p ops (p2p.go)
	collRec  recycler[collOp]  // finished collectives' records (recycle.go)
	p2pRec   recycler[p2pOp]   // finished p2p ops' records
	failed   error
	closed   bool
}

type p2pKey struct {
	send bool
	peer int
	tag  int
}

var (
	_ comm.Comm           = (*Comm)(nil)
	_ comm.TrafficCounter = (*Comm)(nil)
)

// NewComm returns the world Comm over t: every rank of t, ranked as in t,
// tuned by TuningFromEnv(DefaultTuning()). Closing it closes t.
func NewComm(t Transport, opts comm.Options) *Comm {
	return NewTunedComm(t, opts, TuningFromEnv(DefaultTuning()))
}

// NewTunedComm is NewComm with the tuning given (every rank must give the
// same); the Comms Split makes from it inherit it.
func NewTunedComm(t Transport, opts comm.Options, tun Tuning) *Comm {
	members := make([]int, t.Size())
	for i := range members {
		members[i] = i
	}
	return newComm(t, WorldGroup, t.Rank(), members, opts, tun, true)
}

func newComm(t Transport, group uint64, rank int, members []int, opts comm.Options, tun Tuning, world bool) *Comm {
	life, finish := context.WithCancel(context.Background())
	c := &Comm{t: t, group: group, rank: rank, members: members, opts: opts, world: world,
		tuning: tun, life: life, finish: finish, p2pTail: map[p2pKey]*p2pOp{},
		heard: make([]heard, len(members)), moved: make([]peerTraffic, t.Size()),
		args: opcheck.Args{Rank: rank, Size: len(members), Buf: opcheck.HostBuf}}
	c.layout = OneHost(len(members))
	if hm, ok := t.(HostMap); ok {
		if hosts := hm.Hosts(); len(hosts) == t.Size() {
			ids := make([]string, len(members))
			for i, w := range members {
				ids[i] = hosts[w]
			}
			c.layout = NewLayout(ids)
		}
	}
	c.collCtx, c.collCancel = context.WithCancel(life)
	c.kick = time.AfterFunc(time.Hour, c.kicked)
	c.kick.Stop()
	return c
}

// Rank is this rank's index in the Comm.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks in the Comm.
func (c *Comm) Size() int { return len(c.members) }

// OpTimeout is the bound on each operation that its Options give (0:
// none), for wrappers that bound their own waits for an operation alike
// (comm/staging).
func (c *Comm) OpTimeout() time.Duration { return c.opts.OpTimeout() }

// WorldRank maps a rank of this Comm to its rank in the transport's world.
func (c *Comm) WorldRank(r int) int { return c.members[r] }

// SetTuning replaces the algorithm choices (thresholds, chunk size, forced
// algorithms) the Comm was made with. Every rank must use the same.
func (c *Comm) SetTuning(t Tuning) { c.mu.Lock(); c.tuning = t; c.mu.Unlock() }

// Tuning returns the algorithm choices in use (NewComm's or NewTunedComm's
// unless SetTuning replaced them).
func (c *Comm) Tuning() Tuning { c.mu.Lock(); defer c.mu.Unlock(); return c.tuning }

// Layout returns where the ranks of c run (see Layout).
func (c *Comm) Layout() Layout { return c.layout }

// view returns a Comm on which algorithms run among the ranks sub of c
// (rank i of the view is rank sub[i] of c; c's rank must be one of them):
// it sends on c's group, so an op on it must use c's header and run
// inside one of c's collectives, and the ranks of sub must not exchange
// other messages of that collective at the same time. It has no queue,
// timers or ctx of its own.
func (c *Comm) view(sub []int) *Comm {
	v := &Comm{t: c.t, group: c.group, rank: -1, members: make([]int, len(sub)), opts: c.opts,
		layout: c.layout.sub(sub), base: c, sub: sub}
	for i, r := range sub {
		v.members[i] = c.members[r]
		if r == c.rank {
			v.rank = i
		}
	}
	return v
}

// outer returns the Comm that c is a view of (c itself if none) and the
// rank there of c's rank r.
func (c *Comm) outer(r int) (*Comm, int) {
	if c.base == nil {
		return c, r
	}
	return c.base, c.sub[r]
}

// Close fails pending operations with comm.ErrClosed; closing the world Comm
// closes the transport (and so every sub-group).
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	// The staging (allreduce_staged.go) is given back only by a Comm that
	// closes healthy with no collective running: no op touches it after.
	stg := c.failed == nil && !c.cbusy
	if c.failed == nil {
		c.failed = comm.ErrClosed
	}
	if u := c.uctx; u != nil {
		c.uctx = nil
		if u.refs == 0 {
			u.release()
		}
	}
	c.p2pClose()
	c.mu.Unlock()
	if stg {
		c.closeStaging()
	}
	c.finish()
	if c.world {
		return c.t.Close()
	}
	return nil
}

// op is one collective or point-to-point operation in flight.
type op struct {
	c    *Comm
	ctx  context.Context
	user context.Context
	name string
	hdr  wire.Header
	dt   comm.DType
	red  comm.ReduceOp
	tun  Tuning
	// A collective's arguments, for its run function (a plain function,
	// not a closure: issuing allocates nothing but the collOp).
	a, b comm.Buffer
	root int
}

// fail poisons the Comm with err (the first error wins) and tells the other
// members, so none of them waits for this rank.
func (c *Comm) fail(err error) error {
	c.mu.Lock()
	if c.failed != nil {
		first := c.failed
		c.mu.Unlock()
		return first
	}
	c.failed = err
	c.mu.Unlock()
	peers := make([]int, 0, len(c.members)-1)
	for i, w := range c.members {
		if i != c.rank {
			peers = append(peers, w)
		}
	}
	c.t.Abort(c.group, peers, err)
	return err
}

// Collectives of one Comm run one at a time, in issue order, from a queue
// (cq). An issued collective does not get a goroutine of its own: the
// caller's Wait runs it (and any issued before it) on the caller's
// goroutine when it can, which saves the hand-off to and from another
// goroutine that dominates small messages. So that every collective makes
// progress whether or not anybody waits for it, a queue that nobody runs
// gets a runner goroutine: between one and two kick periods after its
// head was issued (kicked), at once when a Wait cannot run it, and after a
// Wait that ran its own collective leaves others queued.

// The kick period is kickDelay while kicks find ops that nobody runs; each
// kick that finds none (the program waits for what it issues, at once)
// doubles it, up to kickMaxDelay, so that a loop of blocking small ops does
// not wake a thread (a timer firing) every kickDelay: on a machine with
// few cores that thread runs on a processor a rank is polling on.
var (
	kickDelay    = 50 * time.Microsecond
	kickMaxDelay = 400 * time.Microsecond
)

// armKick arms the kick timer unless it is armed. c.mu is held.
func (c *Comm) armKick() {
	if c.kickSet {
		return
	}
	if c.kickWait == 0 {
		c.kickWait = kickDelay
	}
	c.kick.Reset(c.kickWait)
	c.kickSet = true
}

// kicked runs a kick period after an idle queue got a head (the timer is
// not re-armed or stopped per collective: setting a timer is a clock read
// and often a thread wake-up). A head that nobody took since the last run
// has waited at least a period: a runner goroutine starts it.
func (c *Comm) kicked() {
	c.mu.Lock()
	c.kickSet = false
	again, started := c.p2pKicked()
	runner := false
	switch {
	case c.cbusy || len(c.cq) == 0:
		// Whoever runs the queue hands on what is left.
		c.kickFor = nil
	case c.cq[0] != c.kickFor:
		c.kickFor = c.cq[0]
		again = true
	default:
		c.kickFor = nil
		runner = true
	}
	if again || runner || started {
		c.kickWait = kickDelay
	} else {
		c.kickWait = min(2*max(c.kickWait, kickDelay), kickMaxDelay)
	}
	if again {
		c.armKick()
	}
	c.mu.Unlock()
	if runner {
		c.runColl(nil)
	}
}

// collOp is a collective in a Comm's queue, and its Work: its Wait runs
// the collective itself when nothing else is running the Comm's queue.
// Once a Wait has returned its outcome it goes to the Comm's recycler and
// is reused by a later collective (see comm.Work), so issuing a
// collective allocates nothing in steady state; its done channel is made
// only if somebody asks for it (Done, or a Wait that must block).
type collOp struct {
	o       op
	fn      func(o *op) error
	uc      *userCtx    // o.ctx, if not collCtx
	issued  uint64      // c.ticks when it was issued
	started bool        // taken off the queue (guarded by c.mu)
	unwatch func() bool // stops the watch on o.ctx while queued, if any

	complete atomic.Bool   // err is set
	released atomic.Bool   // a Wait returned the outcome: the record may be reused
	noReuse  bool          // its unwatch had fired: never reuse it (guarded by c.mu)
	err      error         // the outcome, once complete
	done     chan struct{} // made on demand, closed on completion (guarded by c.mu)
}

// releasedErr is what a method of a Work returns once its Wait returned.
func (o *op) releasedErr() error {
	var seq uint64
	if o.hdr.Kind == wire.KindColl {
		seq = o.hdr.Seq
	}
	return &comm.OpError{Op: o.name, Seq: seq, Rank: o.c.rank, Err: comm.ErrWorkReleased}
}

// finish returns q's outcome to its Wait and recycles q.
func (q *collOp) finish() error {
	c := q.o.c
	err := q.err
	c.mu.Lock()
	if q.released.Load() { // another Wait got here first
		c.mu.Unlock()
		return q.o.releasedErr()
	}
	q.released.Store(true)
	// Drop what it refers to (user buffers, ctxs) while it waits for
	// reuse; what releasedErr reports stays.
	q.o.a, q.o.b, q.o.ctx, q.o.user, q.fn, q.uc = comm.Buffer{}, comm.Buffer{}, nil, nil, nil, nil
	if !q.noReuse {
		c.collRec.put(q)
	}
	c.mu.Unlock()
	return err
}

var _ comm.Work = (*collOp)(nil)

// closedChan is the Done channel of every collective that completed before
// anybody asked for one.
var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Done: see comm.Work.
func (q *collOp) Done() <-chan struct{} {
	if q.complete.Load() || q.released.Load() {
		return closedChan
	}
	c := q.o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if q.complete.Load() {
		return closedChan
	}
	if q.done == nil {
		q.done = make(chan struct{})
	}
	return q.done
}

// Err: see comm.Work.
func (q *collOp) Err() error {
	if q.released.Load() {
		return q.o.releasedErr()
	}
	if q.complete.Load() {
		return q.err
	}
	return nil
}

// Wait: see comm.Work. If ctx can only end when the collective's own ctx
// does (the usual comm.Run pattern: the same ctx, or one that never ends),
// Wait runs the queue up to this collective on the calling goroutine;
// otherwise it makes sure a runner goroutine does, and waits for it.
func (q *collOp) Wait(ctx context.Context) error {
	if q.released.Load() {
		return q.o.releasedErr()
	}
	if q.complete.Load() {
		return q.finish()
	}
	c := q.o.c
	if d := ctx.Done(); d == nil || d == q.o.user.Done() {
		c.runColl(q)
	} else {
		c.mu.Lock()
		if !c.cbusy && len(c.cq) > 0 {
			go c.runColl(nil)
		}
		c.mu.Unlock()
	}
	if q.complete.Load() {
		return q.finish()
	}
	select {
	case <-q.Done():
		return q.finish()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// issueColl queues a collective: it takes the next sequence number and
// returns the Work; fn runs once every collective issued before it ended,
// with a, b and root in its op.
func (c *Comm) issueColl(ctx context.Context, name string, h wire.Header, dt comm.DType, red comm.ReduceOp,
	a, b comm.Buffer, root int, fn func(o *op) error) (comm.Work, error) {
	if err := opcheck.Ctx(name, ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		return nil, &comm.OpError{Op: name, Rank: c.rank, Err: err}
	}
	c.seq++
	h.Kind = wire.KindColl
	h.Group = c.group
	h.Seq = c.seq
	h.DType = uint8(dt)
	h.Red = uint8(red)
	octx, uc := c.collCtxFor(ctx)
	q := c.collRec.get()
	if q == nil {
		q = new(collOp)
	}
	*q = collOp{o: op{c: c, ctx: octx, user: ctx, name: name, hdr: h, dt: dt, red: red, tun: c.tuning, a: a, b: b, root: root},
		fn: fn, uc: uc, issued: c.ticks}
	o := &q.o
	if d := c.opts.OpTimeout(); d > 0 && !c.dogSet {
		if c.dog == nil {
			c.dog = time.AfterFunc(d/dogTicks, c.watch)
		} else {
			c.dog.Reset(d / dogTicks)
		}
		c.dogSet = true
	}
	c.cq = append(c.cq, q)
	head := len(c.cq) == 1 && !c.cbusy
	if head {
		c.armKick()
	} else if ctx.Done() != nil {
		// Queued behind another collective: if its ctx ends first, fail
		// the Comm now (which ends the ones ahead of it too) rather than
		// when its turn comes. (Close and the timeout end the one
		// running, which reports them.)
		q.unwatch = context.AfterFunc(ctx, func() {
			c.mu.Lock()
			started := q.started
			c.mu.Unlock()
			if !started {
				c.fail(o.ctxErr(-1))
			}
		})
	}
	c.mu.Unlock()
	return q, nil
}

// userCtx is the ctx of the collectives issued under user ctxs with one
// Done channel: it ends when they end or collCtx does. A Comm keeps the
// latest one (most programs issue every op under one ctx), so a collective
// usually costs no ctx of its own.
type userCtx struct {
	done    <-chan struct{}
	ctx     context.Context
	release func()
	refs    int // collectives not finished that use it
}

// collCtxFor returns the ctx a collective issued under user runs with, and
// the userCtx it holds a reference to (nil for collCtx). c.mu is held.
func (c *Comm) collCtxFor(user context.Context) (context.Context, *userCtx) {
	d := user.Done()
	if d == nil {
		return c.collCtx, nil
	}
	u := c.uctx
	if u == nil || u.done != d {
		if u != nil && u.refs == 0 {
			u.release()
		}
		ctx, cancel := context.WithCancel(c.collCtx)
		stop := context.AfterFunc(user, cancel)
		u = &userCtx{done: d, ctx: ctx, release: func() { stop(); cancel() }}
		if !c.closed {
			c.uctx = u
		}
	}
	u.refs++
	return u.ctx, u
}

// dogTicks is how many times per timeout watch runs while collectives are
// pending: a collective fails between 1 and 1+1/dogTicks timeouts after it
// was issued. (Counting ticks spares each collective reading the clock.)
const dogTicks = 16

// watch enforces the timeout on collectives with one timer for all of
// them, which ticks while any is pending: once the oldest unfinished one
// is more than dogTicks ticks old it ends collCtx, which fails it (with
// comm.ErrTimeout) and so the Comm.
func (c *Comm) watch() {
	c.mu.Lock()
	c.ticks++
	oldest := c.cur
	if oldest == nil && len(c.cq) > 0 {
		oldest = c.cq[0]
	}
	if oldest == nil {
		c.dogSet = false
		c.mu.Unlock()
		return
	}
	if c.ticks-oldest.issued <= dogTicks {
		c.dog.Reset(c.opts.OpTimeout() / dogTicks)
		c.mu.Unlock()
		return
	}
	c.dogSet = false
	c.mu.Unlock()
	c.collCancel()
}

// runColl runs queued collectives in order while no other goroutine runs
// one: all of them (upTo nil: a runner goroutine), or up to and including
// upTo (a Wait), handing any left to a runner goroutine.
func (c *Comm) runColl(upTo *collOp) {
	c.mu.Lock()
	for !c.cbusy && len(c.cq) > 0 && (upTo == nil || !upTo.started) {
		q := c.cq[0]
		c.cq[0] = nil
		if len(c.cq) == 1 {
			c.cq = c.cq[:0] // keep the array: the next issue appends without allocating
		} else {
			c.cq = c.cq[1:]
		}
		q.started = true
		c.cbusy = true
		c.cur = q
		c.mu.Unlock()
		if q.unwatch != nil && !q.unwatch() {
			// Its AfterFunc runs (or ran) and looks at q: keep q out of
			// the recycler, whatever it finds.
			c.mu.Lock()
			q.noReuse = true
			c.mu.Unlock()
		}
		err := c.run(&q.o, q.fn)
		c.mu.Lock()
		c.cbusy = false
		c.cur = nil
		if u := q.uc; u != nil {
			if u.refs--; u.refs == 0 && c.uctx != u {
				u.release()
			}
		}
		q.err = err
		q.complete.Store(true)
		if q.done != nil {
			close(q.done)
		}
	}
	if upTo != nil && !c.cbusy && len(c.cq) > 0 {
		go c.runColl(nil)
	}
	c.mu.Unlock()
}

func (c *Comm) run(o *op, fn func(o *op) error) error {
	c.mu.Lock()
	failed := c.failed
	c.mu.Unlock()
	var seq uint64 // a p2p header's Seq is its tag
	if o.hdr.Kind == wire.KindColl {
		seq = o.hdr.Seq
	}
	wrap := func(err error) error { return &comm.OpError{Op: o.name, Seq: seq, Rank: c.rank, Err: err} }
	if failed != nil {
		return wrap(failed)
	}
	if err := o.ctx.Err(); err != nil {
		return wrap(c.fail(o.ctxErr(-1)))
	}
	err := fn(o)
	if err == nil {
		return nil
	}
	return wrap(c.fail(err))
}

// ctxErr explains why o.ctx ended while waiting on peer (-1: none): the
// cause (the user's ctx error, Close, or the Comm's timeout) and, for a
// collective, what this rank knows of the peer it waited for (stall).
func (o *op) ctxErr(peer int) error {
	c, _ := o.c.outer(0)
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return comm.ErrClosed
	}
	if err := o.user.Err(); err != nil {
		if peer >= 0 {
			return fmt.Errorf("%w %s", err, o.stall(peer))
		}
		if o.hdr.Kind == wire.KindColl {
			return fmt.Errorf("%w before %s #%d started (it was queued behind earlier collectives)", err, o.name, o.hdr.Seq)
		}
		return err
	}
	who := ""
	if peer >= 0 {
		who = " " + o.stall(peer)
	}
	return fmt.Errorf("%w: %s did not finish within %v%s", comm.ErrTimeout, o.name, c.opts.OpTimeout(), who)
}

// heard is the sequence number and step of the last collective message a
// Comm received from one rank: what a timed-out rank knows of the rank it
// waited for, as a stall inspector would report it.
type heard struct {
	seq  atomic.Uint64
	step atomic.Uint32
}

// note records a collective message received from rank from.
func (o *op) note(from int, step uint32) {
	if o.hdr.Kind == wire.KindColl && from != o.c.rank {
		c, f := o.c.outer(from)
		h := &c.heard[f]
		h.step.Store(step)
		h.seq.Store(o.hdr.Seq)
	}
}

// stall says whom o waits for and whether that rank reached o, from the
// messages this rank received: "waiting for rank 1, which never arrived at
// all_reduce #5 ...". Each rank that times out says what it saw; the rank
// that all of them name is the one that stalled.
func (o *op) stall(peer int) string {
	c, peer := o.c.outer(peer)
	if o.hdr.Kind != wire.KindColl {
		return fmt.Sprintf("waiting for rank %d", peer)
	}
	h := &c.heard[peer]
	seq, step := h.seq.Load(), h.step.Load()
	this := fmt.Sprintf("%s #%d", o.name, o.hdr.Seq)
	last := "nothing from it on this group yet"
	switch {
	case seq >= o.hdr.Seq:
		return fmt.Sprintf("waiting for rank %d, which did arrive at %s (this rank has its step %d) and so waits for another rank", peer, this, step)
	case seq > 0:
		last = fmt.Sprintf("its last message here was of collective #%d", seq)
	}
	return fmt.Sprintf("waiting for rank %d, which never arrived at %s (%s), unless it waits for another rank", peer, this, last)
}

// explain turns a transport error on a message with peer into the error
// the user sees.
func (o *op) explain(err error, peer int, sending bool) error {
	if err == nil {
		return nil
	}
	var me *wire.MismatchError
	if errors.As(err, &me) {
		// Got is the peer's side and Want this rank's; a point-to-point
		// pair is one send and one recv.
		_, p := o.c.outer(peer)
		_, self := o.c.outer(o.c.rank)
		return fmt.Errorf("%w: rank %d called %s but rank %d (this rank) called %s",
			comm.ErrMismatch, p, wire.DescribeP2P(me.Got, sending), self, wire.DescribeP2P(me.Want, !sending))
	}
	if o.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return o.ctxErr(peer)
	}
	return err
}

func (o *op) send(to int, step uint32, b []byte) error {
	h := o.hdr
	h.Step = step
	err := o.c.t.Send(o.ctx, o.c.members[to], h, b)
	if err == nil && to != o.c.rank {
		c, _ := o.c.outer(0)
		c.sent.Add(int64(len(b)))
		o.c.traffic(to).sent.Add(int64(len(b)))
	}
	return o.explain(err, to, true)
}

func (o *op) recv(from int, step uint32, b []byte) error {
	h := o.hdr
	h.Step = step
	err := o.c.t.Recv(o.ctx, o.c.members[from], h, b)
	if err == nil && from != o.c.rank {
		c, _ := o.c.outer(0)
		c.received.Add(int64(len(b)))
		o.c.traffic(from).received.Add(int64(len(b)))
		o.note(from, step)
	}
	return o.explain(err, from, false)
}

// staged reports whether reductions need a scratch buffer to receive into
// (the transport is not a PayloadReceiver).
func (o *op) staged() bool {
	_, ok := o.c.t.(PayloadReceiver)
	return !ok
}

// recvReduce receives len(dst) bytes from rank from and sets dst = acc op
// received (acc may be dst). With a PayloadReceiver transport it reduces
// straight from the payload; otherwise it receives into tmp (at least
// len(dst) bytes) first.
func (o *op) recvReduce(from int, step uint32, dst, acc, tmp []byte) error {
	if pr, ok := o.c.t.(PayloadReceiver); ok {
		h := o.hdr
		h.Step = step
		pc := getPieces(o.dt, o.red, dst, acc)
		err := pr.RecvPayload(o.ctx, o.c.members[from], h, len(dst), pc.fn)
		putPieces(pc)
		if err == nil && from != o.c.rank {
			c, _ := o.c.outer(0)
			c.received.Add(int64(len(dst)))
			o.c.traffic(from).received.Add(int64(len(dst)))
			o.note(from, step)
		}
		return o.explain(err, from, false)
	}
	t := tmp[:len(dst)]
	if err := o.recv(from, step, t); err != nil {
		return err
	}
	reduce.To(o.dt, o.red, dst, acc, t)
	return nil
}

// pieces reduces a payload that arrives in consecutive pieces, carrying an
// element split between two pieces over in a small buffer.
type pieces struct {
	dt       comm.DType
	red      comm.ReduceOp
	dst, acc []byte
	carry    [8]byte
	nc       int               // bytes in carry
	fn       func(int, []byte) // add, bound once (a method value allocates)
}

// piecesPool keeps pieces with their fn, so that a receive-and-reduce
// allocates nothing in steady state.
var piecesPool = sync.Pool{New: func() any { p := new(pieces); p.fn = p.add; return p }}

func getPieces(dt comm.DType, red comm.ReduceOp, dst, acc []byte) *pieces {
	p := piecesPool.Get().(*pieces)
	p.dt, p.red, p.dst, p.acc, p.nc = dt, red, dst, acc, 0
	return p
}

// putPieces recycles p once the transport is done with its fn
// (RecvPayload returned).
func putPieces(p *pieces) {
	p.dst, p.acc = nil, nil
	piecesPool.Put(p)
}

func (p *pieces) add(off int, b []byte) {
	es := p.dt.Size()
	if p.nc > 0 {
		k := copy(p.carry[p.nc:es], b)
		p.nc += k
		b, off = b[k:], off+k
		if p.nc < es {
			return
		}
		at := off - es
		reduce.To(p.dt, p.red, p.dst[at:at+es], p.acc[at:at+es], p.carry[:es])
		p.nc = 0
	}
	whole := len(b) / es * es
	if whole > 0 {
		reduce.To(p.dt, p.red, p.dst[off:off+whole], p.acc[off:off+whole], b[:whole])
	}
	p.nc = copy(p.carry[:], b[whole:])
}

// Traffic returns the payload bytes this rank has sent to and received
// from other ranks on this Comm (sub-groups count their own).
func (c *Comm) Traffic() (sent, received int64) { return c.sent.Load(), c.received.Load() }

// eager reports whether a send of n bytes to rank to returns without
// waiting for its receive (see EagerSender), so that the sender may
// receive afterwards on the same goroutine.
func (o *op) eager(to, n int) bool {
	es, ok := o.c.t.(EagerSender)
	return ok && n <= es.EagerBytes(o.c.members[to])
}

// sendRecvReduce sends buf to peer and sets buf = buf op (what peer sends),
// using tmp (len(buf) bytes) as scratch if it must.
func (o *op) sendRecvReduce(peer int, buf, tmp []byte, step uint32) error {
	if sc := o.serialChunk(); sc > 0 && peer != o.c.rank && len(buf) > sc && step < 1<<8 {
		// Serial (see serial): chunk by chunk on this goroutine, each
		// chunk sent (eagerly, copied out) before the peer's is reduced
		// into it. A whole message each way at once would fill both
		// rings, and a pinned rank's send and receive would take turns
		// on its one processor (128-256 KiB all-reduces ran at 0.5-1
		// GB/s pinned).
		return o.xfer(step, peer, buf, peer, buf, buf)
	}
	if peer != o.c.rank && o.eager(peer, len(buf)) {
		// buf is copied out once send returns: reduce into it in place,
		// straight from the payload where the transport allows.
		if err := o.send(peer, step, buf); err != nil {
			return err
		}
		return o.recvReduce(peer, step, buf, buf, tmp)
	}
	if err := o.sendrecv(peer, buf, peer, tmp, step); err != nil {
		return err
	}
	reduce.Into(o.dt, o.red, buf, tmp)
	return nil
}

// sendrecv sends sb to `to` while it receives rb from `from`.
func (o *op) sendrecv(to int, sb []byte, from int, rb []byte, step uint32) error {
	if to == o.c.rank && from == o.c.rank {
		copy(rb, sb)
		return nil
	}
	if o.eager(to, len(sb)) {
		if err := o.send(to, step, sb); err != nil {
			return err
		}
		return o.recv(from, step, rb)
	}
	errc := make(chan error, 1)
	go func() { errc <- o.send(to, step, sb) }()
	rerr := o.recv(from, step, rb)
	serr := <-errc
	if rerr != nil {
		return rerr
	}
	return serr
}

// AllReduce: see comm.Comm.
func (c *Comm) AllReduce(ctx context.Context, buf comm.Buffer, red comm.ReduceOp) (comm.Work, error) {
	if err := c.args.AllReduce(buf, red); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpAllReduce, Count: uint64(buf.Len())}
	return c.issueColl(ctx, "all_reduce", h, buf.DType(), red, buf, comm.Buffer{}, 0, runAllReduce)
}

// Broadcast: see comm.Comm.
func (c *Comm) Broadcast(ctx context.Context, buf comm.Buffer, root int) (comm.Work, error) {
	if err := c.args.Broadcast(buf, root); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpBroadcast, Count: uint64(buf.Len()), Root: int32(root)}
	return c.issueColl(ctx, "broadcast", h, buf.DType(), 0, buf, comm.Buffer{}, root, runBroadcast)
}

// Reduce: see comm.Comm.
func (c *Comm) Reduce(ctx context.Context, buf comm.Buffer, red comm.ReduceOp, root int) (comm.Work, error) {
	if err := c.args.Reduce(buf, red, root); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpReduce, Count: uint64(buf.Len()), Root: int32(root)}
	return c.issueColl(ctx, "reduce", h, buf.DType(), red, buf, comm.Buffer{}, root, runReduce)
}

// AllGather: see comm.Comm.
func (c *Comm) AllGather(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	if err := c.args.AllGather(dst, src); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpAllGather, Count: uint64(src.Len())}
	return c.issueColl(ctx, "all_gather", h, src.DType(), 0, dst, src, 0, runAllGather)
}

// Gather: see comm.Comm.
func (c *Comm) Gather(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	if err := c.args.Gather(dst, src, root); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpGather, Count: uint64(src.Len()), Root: int32(root)}
	return c.issueColl(ctx, "gather", h, src.DType(), 0, dst, src, root, runGather)
}

// Scatter: see comm.Comm.
func (c *Comm) Scatter(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	if err := c.args.Scatter(dst, src, root); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpScatter, Count: uint64(dst.Len()), Root: int32(root)}
	return c.issueColl(ctx, "scatter", h, dst.DType(), 0, dst, src, root, runScatter)
}

// ReduceScatter: see comm.Comm.
func (c *Comm) ReduceScatter(ctx context.Context, dst, src comm.Buffer, red comm.ReduceOp) (comm.Work, error) {
	if err := c.args.ReduceScatter(dst, src, red); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpReduceScatter, Count: uint64(dst.Len())}
	return c.issueColl(ctx, "reduce_scatter", h, src.DType(), red, dst, src, 0, runReduceScatter)
}

// AllToAll: see comm.Comm.
func (c *Comm) AllToAll(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	if err := c.args.AllToAll(dst, src); err != nil {
		return nil, err
	}
	h := wire.Header{Op: wire.OpAllToAll, Count: uint64(src.Len())}
	return c.issueColl(ctx, "all_to_all", h, src.DType(), 0, dst, src, 0, runAllToAll)
}

// Barrier: see comm.Comm.
func (c *Comm) Barrier(ctx context.Context) (comm.Work, error) {
	h := wire.Header{Op: wire.OpBarrier}
	return c.issueColl(ctx, "barrier", h, comm.Uint8, 0, comm.Buffer{}, comm.Buffer{}, 0, runBarrier)
}

// The run functions of the collectives: o.a and o.b are the buffers given
// to issueColl (dst, src where there are two), o.root the root.
func runAllReduce(o *op) error     { return o.allReduce(o.a.Host()) }
func runBroadcast(o *op) error     { return o.broadcast(o.a.Host(), o.root) }
func runReduce(o *op) error        { return o.reduce(o.a.Host(), o.root) }
func runAllGather(o *op) error     { return o.allGather(o.a.Host(), o.b.Host()) }
func runGather(o *op) error        { return o.gather(o.a.Host(), o.b.Host(), o.root) }
func runScatter(o *op) error       { return o.scatter(o.a.Host(), o.b.Host(), o.root) }
func runReduceScatter(o *op) error { return o.reduceScatter(o.a.Host(), o.b.Host()) }
func runAllToAll(o *op) error      { return o.allToAll(o.a.Host(), o.b.Host()) }
func runBarrier(o *op) error       { return o.barrier() }

// Send: see comm.Comm.
func (c *Comm) Send(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return c.p2p(ctx, true, buf, peer, tag)
}

// Recv: see comm.Comm.
func (c *Comm) Recv(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return c.p2p(ctx, false, buf, peer, tag)
}

// Split: see comm.Comm.
func (c *Comm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	const name = "split"
	if color < 0 && color != comm.ColorNone {
		return nil, comm.InvalidArgf("%s: color %d is negative (use comm.ColorNone to opt out)", name, color)
	}
	p := c.Size()
	all := make([]int64, 2*p)
	mine := []int64{int64(color), int64(key)}
	var seq uint64
	h := wire.Header{Op: wire.OpSplit, Count: 2}
	w, err := c.issueColl(ctx, name, h, comm.Int64, 0, comm.Buffer{}, comm.Buffer{}, 0, func(o *op) error {
		seq = o.hdr.Seq
		return o.allGather(comm.FromSlice(all).Host(), comm.FromSlice(mine).Host())
	})
	if err != nil {
		return nil, err
	}
	if err := w.Wait(ctx); err != nil {
		return nil, err
	}
	if color == comm.ColorNone {
		return nil, nil
	}
	type mem struct{ key, rank int }
	var ms []mem
	for r := 0; r < p; r++ {
		if int(all[2*r]) == color {
			ms = append(ms, mem{int(all[2*r+1]), r})
		}
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].key != ms[j].key {
			return ms[i].key < ms[j].key
		}
		return ms[i].rank < ms[j].rank
	})
	members := make([]int, len(ms))
	rank := -1
	for i, m := range ms {
		members[i] = c.members[m.rank]
		if m.rank == c.rank {
			rank = i
		}
	}
	hs := fnv.New64a()
	fmt.Fprintf(hs, "%d/%d/%d", c.group, seq, color)
	id := hs.Sum64()
	if id <= WorldGroup {
		id += 2
	}
	child := newComm(c.t, id, rank, members, c.opts, c.Tuning(), false)
	context.AfterFunc(c.life, func() { child.Close() })
	return child, nil
}
