//go:build linux

package shm

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/internal/mailbox"
	"github.com/gdist/gdist/comm/internal/wire"
)

var _ algo.Transport = (*Transport)(nil)

// Supported reports whether this platform has the shared-memory transport
// (Linux only: it needs futexes and pidfds).
const Supported = true

// Transport is the shared-memory implementation of algo.Transport for one
// rank. Its methods are safe for concurrent use.
type Transport struct {
	rank, size int
	cfg        comm.Config
	opts       Options
	peerDL     time.Duration
	tick       time.Duration
	logf       func(format string, args ...any)

	seg   *segment // nil when this rank is alone
	arena *arena   // the shared-memory areas (arena.go); nil if none
	path  string   // the segment file (unlinked once every rank mapped it)
	local []int    // local index -> world rank
	me    int      // this rank's local index
	// links[r] is the link to world rank r (nil: not in this segment);
	// links[rank] is the local mailbox. Fixed after New.
	links []*link
	peers []*link // the links with a ring, in local order

	// This rank's slot words.
	doorbell, sleepers, ctrlBell, myState, reasonLen *uint32
	heartbeat                                        *uint64
	pulse                                            *uint64 // bumped while a waiter of this rank polls
	reason                                           []byte
	nonce                                            []byte // the segment's (names the control sockets)

	// epoch moves on every event a waiter may have to react to: failure,
	// close, abort, a peer's goodbye.
	epoch atomic.Uint64
	// poll is the adaptive poll window of await, in nanoseconds, in
	// [0, Options.PollFor]: see await.
	poll atomic.Int64
	// pollers counts the waiters in await's first (polling) phase;
	// noPulse the waits in a row that polled and saw no pulse of their
	// peer (see await).
	pollers atomic.Int32
	noPulse atomic.Uint32
	// slowYields counts the waits in a row whose yielding phase found
	// the processor taken (a yield that gave it to another thread for
	// longer than yieldSlow: an oversubscribed machine); from 2 on, waits
	// skip that phase and sleep at once, but every 16th (see await).
	// yields counts the yields of that phase, yieldPhases the phases
	// (for the tests).
	slowYields  atomic.Uint32
	yields      atomic.Uint64
	yieldPhases atomic.Uint64
	// wakers: the ctxs a sleeping waiter was woken for (see armWaker).
	wakers wakers
	// ctrlWake: the control goroutine's socket (ctrlwake_linux.go).
	ctrlWake ctrlWaker

	mu      sync.Mutex
	err     error         // first failure (or errTransportClosed); set once
	dead    chan struct{} // closed when err is set
	aborted map[uint64]error
	abortCh chan struct{} // closed and replaced whenever a group is aborted
	saidBye bool
	claimed bool // this rank owns its slot (setup got that far)

	// Calls that may touch the mapping hold inflight; Close unmaps once
	// closing is set and inflight is back to zero.
	inflight atomic.Int64
	closing  atomic.Bool
	stopCtrl atomic.Bool
	ctrlDone chan struct{}

	closeOnce sync.Once
}

var errTransportClosed = fmt.Errorf("shm: transport closed: %w", comm.ErrClosed)

// The errors of a link (see package mailbox).
var (
	peerClosedErr = mailbox.PeerClosedErr
	lostErr       = mailbox.LostErr
	protoErr      = mailbox.ProtoErr
)

func ctxErr(ctx context.Context) error { return fmt.Errorf("shm: %w", ctx.Err()) }

// Rank is this rank's world rank.
func (t *Transport) Rank() int { return t.rank }

// Size is the world size.
func (t *Transport) Size() int { return t.size }

// Ranks returns the world ranks that share this transport's segment, this
// rank included, in increasing order.
func (t *Transport) Ranks() []int { return append([]int(nil), t.local...) }

// Err returns the failure that ended the transport (an error wrapping
// comm.ErrClosed after Close), or nil while it works.
func (t *Transport) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// enter registers a call that may touch the mapping; it fails once Close
// has begun unmapping.
func (t *Transport) enter() bool {
	t.inflight.Add(1)
	if t.closing.Load() {
		t.inflight.Add(-1)
		return false
	}
	return true
}

func (t *Transport) exit() { t.inflight.Add(-1) }

// state returns the error that ops of group must fail with.
func (t *Transport) state(group uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	return t.aborted[group]
}

func (t *Transport) isDead() bool {
	select {
	case <-t.dead:
		return true
	default:
		return false
	}
}

// wakeLocal wakes this rank's sleeping waiters, if any.
func (t *Transport) wakeLocal() {
	if atomic.LoadUint32(t.sleepers) != 0 {
		ring(t.doorbell)
	}
}

// wakeAll wakes this rank's waiters unconditionally.
func (t *Transport) wakeAll() {
	if t.doorbell != nil {
		ring(t.doorbell)
	}
}

// Fail ends the transport with err as if a peer had been lost: pending and
// later calls fail with err, and the peers get a goodbye that quotes it (so
// that they blame the rank err names). The first failure wins. Composite
// transports (the auto backend) use it to fail this part when another
// part fails.
func (t *Transport) Fail(err error) {
	if err == nil {
		return
	}
	t.fail(err)
}

// fail records the transport's first failure, says goodbye with it as the
// reason, and wakes every waiter.
func (t *Transport) fail(err error) {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	t.err = err
	close(t.dead)
	t.epoch.Add(1)
	t.mu.Unlock()
	t.logf("shm: rank %d: transport failed: %v", t.rank, err)
	t.goodbye(fmt.Sprintf("rank %d: %v", t.rank, err))
	t.wakeAll()
}

// goodbye publishes this rank's goodbye (with reason, when not empty) in
// its slot and wakes every peer. Later Recvs of the peers from this rank
// fail once they have consumed what it sent before.
func (t *Transport) goodbye(reason string) {
	t.mu.Lock()
	if t.saidBye || t.seg == nil || !t.claimed {
		t.mu.Unlock()
		return
	}
	t.saidBye = true
	t.mu.Unlock()
	if !t.enter() {
		return
	}
	defer t.exit()
	reason = truncateText(reason, wire.MaxAbortText)
	n := copy(t.reason, reason)
	atomic.StoreUint32(t.reasonLen, uint32(n))
	atomic.StoreUint32(t.myState, stateClosed)
	for _, l := range t.peers {
		ring(l.peerDoorbell)
		l.ringCtrl()
	}
}

func (t *Transport) abortGroup(group uint64, err error) {
	t.mu.Lock()
	if _, ok := t.aborted[group]; ok {
		t.mu.Unlock()
		return
	}
	t.aborted[group] = err
	close(t.abortCh)
	t.abortCh = make(chan struct{})
	t.epoch.Add(1)
	t.mu.Unlock()
	if t.enter() {
		t.wakeAll()
		t.exit()
	}
}

// acquire takes the one-slot semaphore sem, giving up when ctx ends, the
// transport fails or group is aborted.
func (t *Transport) acquire(ctx context.Context, sem chan struct{}, group uint64) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	for {
		t.mu.Lock()
		err := t.err
		if err == nil {
			err = t.aborted[group]
		}
		ch := t.abortCh
		t.mu.Unlock()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		select {
		case sem <- struct{}{}:
			if err := t.state(group); err != nil {
				<-sem
				return err
			}
			return nil
		case <-ctx.Done():
		case <-t.dead:
		case <-ch:
		}
	}
}

// Waiting. A waiter first polls its condition, then polls while yielding
// the processor (for Options.SpinFor), then sleeps on this rank's doorbell, a
// futex word in its slot. Before sleeping it counts itself in the slot's
// sleepers and, for waits on a ring, in the pair's waiter count; whoever
// makes the condition true (the peer publishing data or freeing space, a
// local drainer finishing the op, a failure, an abort, ctx's end) checks
// the count after its change and rings the doorbell. Both sides use
// sequentially consistent atomics, so either the waiter sees the change
// or the changer sees the waiter. Sleeps are bounded (sleepMax), so a lost
// wake-up would cost time, never a hang. How long a waiter polls, spins
// and polls past its window is Options.PollFor, SpinFor and ActiveFor.
const (
	// activeGap is how recently the peer's pulse must have moved for a
	// waiter to poll past its window (a peer between two waits, copying
	// or reducing a small message, does not pulse for a few
	// microseconds).
	activeGap = 10 * time.Microsecond
	// yieldSlow: a yield that returns later than this gave the processor
	// to another thread (with nothing else to run, one takes about a
	// microsecond).
	yieldSlow = 20 * time.Microsecond
	sleepMax  = 50 * time.Millisecond
	// pokeAfter: a producer that has slept this long for ring space asks
	// the consumer's control goroutine to drain the ring (into queues).
	pokeAfter = time.Millisecond
)

// await waits until ready() holds (and returns true), or until the epoch
// moves past ep or ctx ends (false). flag, if not nil, is the pair-level
// count of waiters that the other side checks; poke, if not nil, is a
// link whose peer's control goroutine is woken once this waiter has slept
// pokeAfter (ringCtrl); peer, if not nil, is the pulse word of the rank
// whose message or space this wait is for.
func (t *Transport) await(ctx context.Context, ep uint64, flag *uint32, poke *link, peer *uint64, ready func() bool) bool {
	done := ctx.Done()
	interrupted := func() bool {
		if t.epoch.Load() != ep {
			return true
		}
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	for range 16 {
		if ready() {
			return true
		}
	}
	// Poll without giving up the processor, reading the clock every 64
	// polls (a poll is a few loads; the clock, a vDSO call, costs about
	// as much as 64 of them), for the adaptive window and then for as
	// long as the peer is itself polling: its pulse word, which every
	// polling waiter bumps at each clock read, moved within activeGap.
	// A peer that polls is running on another processor and about to
	// answer, so yielding or sleeping now would only add a wake-up (the
	// tail of small messages); a peer that computes, sleeps or was
	// descheduled (a loaded machine) stops pulsing, and the waiter stops
	// polling activeGap later. Options.ActiveFor bounds it (two ranks that
	// wait for a third keep each other pulsing). The window adapts: a wait
	// that ends within twice the window (at least 2 us) doubles it, up
	// to Options.PollFor; a longer one halves it (below a microsecond: none).
	start := time.Now()
	w := time.Duration(t.poll.Load())
	defer func() {
		t.adaptPoll(w, time.Since(start) <= max(2*w, 2*time.Microsecond))
	}()
	if w > 0 || (peer != nil && t.opts.ActiveFor > 0) {
		// A pulse that moved before this wait began proves nothing (the
		// peer may share this processor and be waiting for it): only
		// movement seen while polling counts, and without any the
		// waiter stops 2 us into its wait or at the end of its window.
		// And only a lone poller of this rank goes on past its window:
		// with two (a large message's send and receive at once) this
		// rank already keeps two processors busy, and the peer's pulse
		// may come from its other waiter while the one this wait needs
		// waits for a processor (1 MiB all-reduces were 10% slower).
		// Those 2 us are lost on every wait of ranks that share a
		// processor for good (its window shrinks to nothing), so after 4
		// waits in a row that saw no pulse only every 16th probes.
		probe := 2 * time.Microsecond
		if n := t.noPulse.Load(); w < probe && n >= 4 && n%16 != 0 {
			probe = 0
		}
		var seen uint64
		seenAt := start.Add(probe - activeGap)
		moved := false
		if peer != nil {
			seen = atomic.LoadUint64(peer)
		}
		t.pollers.Add(1)
		defer t.pollers.Add(-1)
		for i := 1; ; i++ {
			if ready() {
				if peer != nil {
					t.noPulse.Store(0)
				}
				return true
			}
			if i&63 != 0 {
				continue
			}
			if interrupted() {
				return false
			}
			atomic.AddUint64(t.pulse, 1)
			now := time.Now()
			el := now.Sub(start)
			if el <= w {
				continue
			}
			if peer == nil || el > t.opts.ActiveFor || t.pollers.Load() > 1 {
				break
			}
			if p := atomic.LoadUint64(peer); p != seen {
				seen, seenAt, moved = p, now, true
			} else if now.Sub(seenAt) > activeGap {
				break
			}
		}
		if peer != nil {
			if moved {
				t.noPulse.Store(0)
			} else {
				t.noPulse.Add(1)
			}
		}
	}
	// Let other processes run between polls (often the peer that is
	// about to send what this one waits for), and every fourth poll the
	// goroutines of this process too, if any is waiting for a processor:
	// a goroutine just started on this processor (a large message's
	// send, beside this receive) runs only once this one lets it (every
	// 32nd poll cost a third of 1 MiB's bandwidth). Only if one waits:
	// runtime.Gosched also wakes an idle thread when the process has an
	// idle P, and that thread takes the processor from this rank (or from
	// the peer) for 20-40 us on a machine with few cores; with nothing
	// runnable it was most of the thread wake-ups of a 4 KiB all-reduce
	// loop (benchmarks/README.md). Small messages rarely get here now
	// (see the pulse above).
	//
	// On an oversubscribed machine (more runnable threads than
	// processors: other jobs, or more ranks than cores) a yield hands the
	// processor to another thread for a whole time slice (milliseconds),
	// and the waiter polls again only when its turn comes round, long
	// after the peer answered; asleep on the futex it leaves its share
	// to the peer and is woken as soon as the peer publishes. So the
	// phase ends at the first yield that took longer than yieldSlow (the
	// clock is read after every yield), and after 2 such waits in a row
	// the next ones sleep at once, but every 16th, which probes whether
	// the processors are free again. (Reading the clock every 8th yield
	// made every wait on a loaded machine 8 time slices long: collectives
	// 5-20x slower under load than the load's share of the cores
	// explains, and test deadlines missed: issue 25.)
	if n := t.slowYields.Load(); n < 2 || n%16 == 0 {
		t.yieldPhases.Add(1)
		last := time.Now()
		for i := 1; ; i++ {
			if i&3 == 0 && othersRunnable() {
				runtime.Gosched()
			} else {
				osYield()
			}
			t.yields.Add(1)
			now := time.Now()
			slow := now.Sub(last) > yieldSlow
			if slow {
				t.slowYields.Add(1)
			} else if i == 1 {
				t.slowYields.Store(0)
			}
			if ready() {
				return true
			}
			if interrupted() {
				return false
			}
			if slow {
				break
			}
			if last = now; now.Sub(start) > t.opts.SpinFor {
				break
			}
		}
	} else {
		t.slowYields.Add(1)
	}
	if done != nil {
		t.armWaker(ctx, done)
	}
	slept := time.Duration(0)
	for {
		if flag != nil {
			atomic.AddUint32(flag, 1)
		}
		atomic.AddUint32(t.sleepers, 1)
		d := atomic.LoadUint32(t.doorbell)
		ok := ready()
		intr := !ok && interrupted()
		if !ok && !intr {
			nap := sleepMax
			if poke != nil && slept < pokeAfter {
				nap = pokeAfter
			}
			t0 := time.Now()
			futexWait(t.doorbell, d, nap)
			slept += time.Since(t0)
			if poke != nil && slept >= pokeAfter {
				// Still counted in flag, so whoever acts on the poke
				// sees this waiter and wakes it.
				poke.ringCtrl()
				poke = nil
			}
		}
		atomic.AddUint32(t.sleepers, ^uint32(0))
		if flag != nil {
			atomic.AddUint32(flag, ^uint32(0))
		}
		if ok || ready() {
			return true
		}
		if intr || interrupted() {
			return false
		}
	}
}

// runnableSample reads how many goroutines wait for a processor; a pool
// keeps the sample, so that the check allocates nothing.
var runnableSample = sync.Pool{New: func() any {
	return &[1]metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
}}

// othersRunnable reports whether some goroutine of this process is ready
// to run but has no processor (about 50 ns: a scheduler lock, no system
// call).
func othersRunnable() bool {
	s := runnableSample.Get().(*[1]metrics.Sample)
	metrics.Read(s[:])
	n := uint64(1) // unknown (a runtime without the metric): yield to be safe
	if s[0].Value.Kind() == metrics.KindUint64 {
		n = s[0].Value.Uint64()
	}
	runnableSample.Put(s)
	return n > 0
}

// adaptPoll doubles the poll window w after a wait that ended soon
// enough (quick), else halves it: see await.
func (t *Transport) adaptPoll(w time.Duration, quick bool) {
	if quick {
		w = min(t.opts.PollFor, max(2*w, time.Microsecond))
	} else if w /= 2; w < time.Microsecond {
		w = 0
	}
	t.poll.Store(int64(w))
}

// wakers remembers the ctxs (by Done channel) whose end wakes this
// rank's sleepers. Registering an AfterFunc per sleep cost two
// allocations and a ctx lock each time; the ctxs a transport waits under
// are few and long-lived (a Comm's collective ctx, the shared ctx of its
// p2p ops), so each is registered once and kept, up to len(ring); the
// oldest is dropped past that. A sleeper whose ctx was dropped still wakes
// within sleepMax of its end (sleeps are bounded), never hangs.
type wakers struct {
	mu   sync.Mutex
	ring [8]struct {
		done <-chan struct{}
		stop func() bool
	}
	next int
}

// armWaker makes sure the end of ctx (whose Done channel is done) wakes
// this rank's sleepers.
func (t *Transport) armWaker(ctx context.Context, done <-chan struct{}) {
	w := &t.wakers
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.ring {
		if w.ring[i].done == done {
			return
		}
	}
	e := &w.ring[w.next]
	w.next = (w.next + 1) % len(w.ring)
	if e.stop != nil {
		e.stop()
	}
	e.done, e.stop = done, context.AfterFunc(ctx, t.wakeFromCtx)
}

// dropWakers stops every registered waker (Close).
func (t *Transport) dropWakers() {
	w := &t.wakers
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.ring {
		if e := &w.ring[i]; e.stop != nil {
			e.stop()
			e.done, e.stop = nil, nil
		}
	}
}

// wakeFromCtx runs when the ctx of a sleeping waiter ends.
func (t *Transport) wakeFromCtx() {
	if t.enter() {
		t.wakeAll()
		t.exit()
	}
}

// checkArgs validates a peer and a header for Send and Recv.
func (t *Transport) checkArgs(what string, peer int, h wire.Header) error {
	if peer < 0 || peer >= t.size {
		return comm.InvalidArgf("shm: %s rank %d out of range [0, %d)", what, peer, t.size)
	}
	if t.links[peer] == nil {
		return comm.InvalidArgf("shm: %s rank %d: that rank does not share this segment (ranks %v)", what, peer, t.local)
	}
	if err := wire.CheckMessage(h); err != nil {
		return comm.InvalidArgf("shm: %s rank %d: %v", what, peer, err)
	}
	return nil
}

// Send delivers payload as one message to world rank to (see
// algo.Transport). It copies payload into the ring to that rank, frame by
// frame, and returns once the last frame is in the ring (or, for to ==
// Rank(), copied into the local mailbox). It blocks while the ring is full;
// ctx is honoured while it waits.
func (t *Transport) Send(ctx context.Context, to int, h wire.Header, payload []byte) error {
	if err := t.checkArgs("send to", to, h); err != nil {
		return err
	}
	if !t.enter() {
		return errTransportClosed
	}
	defer t.exit()
	if err := t.state(h.Group); err != nil {
		return err
	}
	l := t.links[to]
	if l.self {
		return l.deliverLocal(h, payload)
	}
	if err := l.closedErr(); err != nil {
		return err
	}
	group := h.Group
	return l.box.SendFrames(ctx, h, payload, l.maxFrame, l.wsem,
		func(ctx context.Context, sem chan struct{}) error { return t.acquire(ctx, sem, group) },
		func(h wire.Header, p []byte) error { return l.writeFrame(ctx, &h, p) })
}

// Recv receives the next message of stream (from, h.Group, h.Kind[, h.Seq])
// into dst (see algo.Transport). It blocks until the whole message is in
// dst, or fails; it never returns while the transport still writes dst.
func (t *Transport) Recv(ctx context.Context, from int, h wire.Header, dst []byte) error {
	if err := t.checkArgs("recv from", from, h); err != nil {
		return err
	}
	return t.recv(ctx, from, h, dst, nil, len(dst))
}

// RecvPayload is Recv without the copy out of the ring (see
// algo.PayloadReceiver): it checks the message of n bytes the same way and
// calls fn with each frame's payload where it lies, in the shared segment
// (or in a queued copy, if the frame arrived before the receive), in order.
// fn runs on whichever goroutine drains the ring, must not keep the slice
// or call the transport, and should be quick: the ring's space is freed
// after it returns. RecvPayload returns after the last call; it never
// returns while fn runs.
func (t *Transport) RecvPayload(ctx context.Context, from int, h wire.Header, n int, fn func(off int, payload []byte)) error {
	if err := t.checkArgs("recv from", from, h); err != nil {
		return err
	}
	if n < 0 || fn == nil {
		return comm.InvalidArgf("shm: RecvPayload of %d bytes with fn %p", n, fn)
	}
	return t.recv(ctx, from, h, nil, fn, n)
}

var _ algo.PayloadReceiver = (*Transport)(nil)

// recv receives n bytes into dst, or handed to fn. The receive's record
// comes from the link's free list and goes back there when recv returns:
// by then it is finished, unposted, and nobody writes into it (a drainer
// that finished it did so under l.mu, which the return takes).
func (t *Transport) recv(ctx context.Context, from int, h wire.Header, dst []byte, fn func(off int, payload []byte), n int) error {
	if !t.enter() {
		return errTransportClosed
	}
	defer t.exit()
	if err := t.state(h.Group); err != nil {
		return err
	}
	l := t.links[from]
	box := l.box
	key := mailbox.KeyOf(h)

	l.mu.Lock()
	op := box.GetRecv(dst, fn, n)
	op.Want = h
	op.Want.Offset, op.Want.Len, op.Want.Total = 0, 0, uint64(op.N)
	s := box.Stream(key)
	s.Join()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		box.Leave(key, s)
		box.PutRecv(op)
		l.mu.Unlock()
	}()
	if err := t.acquire(ctx, s.RSem, h.Group); err != nil {
		return err
	}
	defer func() { <-s.RSem }()

	l.mu.Lock()
	box.Take(s, op, nil, false, nil)
	l.mu.Unlock()
	if op.Done() {
		return op.Err
	}
	return l.wait(ctx, s, op)
}

// Abort fails every pending and later Send and Recv of group on this rank
// with cause, and writes an abort record carrying cause's text (truncated
// to wire.MaxAbortText) into the control ring of each listed world rank
// that shares the segment. It does not wait for them.
func (t *Transport) Abort(group uint64, peers []int, cause error) {
	if cause == nil {
		cause = comm.ErrAborted
	}
	t.abortGroup(group, cause)
	text := truncateText(cause.Error(), wire.MaxAbortText)
	seen := map[int]bool{}
	for _, p := range peers {
		if p < 0 || p >= t.size || p == t.rank || seen[p] || t.links[p] == nil {
			continue
		}
		seen[p] = true
		l := t.links[p]
		if !t.enter() {
			return
		}
		if t.isDead() {
			t.exit()
			return
		}
		if l.sendAbort(group, text) {
			t.exit()
			continue
		}
		// The control ring is full: keep trying in the background (the
		// goroutine holds the inflight reference).
		go func() {
			defer t.exit()
			deadline := time.Now().Add(t.peerDL)
			for !t.isDead() {
				time.Sleep(time.Millisecond)
				if l.sendAbort(group, text) {
					return
				}
				if time.Now().After(deadline) {
					t.logf("shm: rank %d: could not tell rank %d about the abort: control ring full", t.rank, l.peer)
					return
				}
			}
		}()
	}
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cutting may split a rune; drop the pieces.
	return strings.ToValidUTF8(s[:n], "")
}

// Close says goodbye to every peer, fails pending calls with
// comm.ErrClosed, stops the control goroutine and unmaps the segment. It
// never hangs and may be called more than once.
func (t *Transport) Close() error {
	t.closeOnce.Do(t.close)
	return nil
}

// closeWait bounds how long Close waits for calls in flight to leave the
// mapping; past it the mapping is leaked rather than pulled from under them.
const closeWait = 5 * time.Second

func (t *Transport) close() {
	t.mu.Lock()
	first := t.err == nil
	if first {
		t.err = errTransportClosed
		close(t.dead)
	}
	t.epoch.Add(1)
	t.mu.Unlock()
	if first {
		t.goodbye("")
	}
	if t.seg == nil {
		return
	}
	t.wakeAll()
	t.stopCtrl.Store(true)
	ring(t.ctrlBell)
	t.ctrlWake.wake(t.ctrlWake.self)
	<-t.ctrlDone
	t.ctrlWake.close()
	t.closing.Store(true)
	deadline := time.Now().Add(closeWait)
	for t.inflight.Load() != 0 {
		if time.Now().After(deadline) {
			t.logf("shm: rank %d: calls still in flight after %v; leaving the segment mapped", t.rank, closeWait)
			t.arena.close()
			return
		}
		t.wakeAll()
		time.Sleep(50 * time.Microsecond)
	}
	for _, l := range t.peers {
		if l.watch != nil {
			l.watch.close()
		}
	}
	t.dropWakers()
	t.seg.unmap()
	t.arena.close()
}

// EagerBytes is the longest payload to world rank to that Send delivers
// without waiting for its receive (see algo.EagerSender): one frame. Send
// never waits for a receive to be posted (a full ring is drained into
// queues), and a message of one frame does not profit from being sent
// while the receive runs.
func (t *Transport) EagerBytes(to int) int {
	if to < 0 || to >= t.size || t.links[to] == nil {
		return 0
	}
	return t.links[to].maxFrame
}

var _ algo.EagerSender = (*Transport)(nil)
