//go:build cgo

package nccl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gdist/gdist/comm"
)

// Liveness and failures across ranks, on the host. NCCL tells a rank of a
// lost peer only through ncclCommGetAsyncError, and only where its
// transport notices (a network); over NVLink, P2P or shared memory a dead
// peer leaves the kernels waiting for it until the operation timeout. And
// NCCL never tells the other ranks that one rank aborted its communicator.
// So the ranks of a world Comm beat through the store, as the host backends
// do over their links, and every Comm publishes its failure there:
//
//   - Heartbeats: every rank sets <path>/hb/<rank> to a new counter value
//     every PeerDeadline()/4 (at most every second) and watches one peer,
//     the next rank in a ring that skips ranks that closed ("bye"). A peer
//     whose value stands still for PeerDeadline() is lost. Watching one peer
//     each keeps the store's load at two requests per rank and period; a
//     rank that dies is noticed as long as one rank lives.
//   - Failures: the first failure of a Comm (a lost peer, a timeout, a
//     mismatched message, Abort; not Close) is published at <path>/abort.
//     Every rank of the Comm waits for that key (a blocked Get, no polling);
//     when another rank publishes, the Comm fails with a *comm.PeerError
//     naming the lost rank (wrapping comm.ErrPeerLost), or with
//     comm.ErrAborted quoting the other rank's error, and its NCCL
//     communicators are aborted, which ends their kernels.

// beatEvery is the heartbeat period for a peer deadline d.
func beatEvery(d time.Duration) time.Duration { return min(max(d/4, time.Millisecond), time.Second) }

// remoteError is a failure another rank published: it is not published
// again.
type remoteError struct{ error }

func (e remoteError) Unwrap() error { return e.error }

// startWatch starts the failure watcher of a world or Split Comm, and the
// heartbeats of a world Comm.
func (c *Comm) startWatch(world bool) {
	if c.size == 1 || c.store == nil {
		return
	}
	c.mu.Lock()
	c.watched = true
	c.mu.Unlock()
	go c.watchAbort()
	if world {
		ctx, stop := context.WithCancel(c.life)
		c.hbStop = stop
		go c.heartbeat(ctx)
	}
}

func (c *Comm) hbKey(rank int) string { return c.path + "/hb/" + strconv.Itoa(rank) }

// heartbeat beats for this rank and watches the next live rank of the ring
// until ctx ends or a peer is lost.
func (c *Comm) heartbeat(ctx context.Context) {
	deadline := c.opts.PeerDeadline()
	period := beatEvery(deadline)
	var n uint64
	beat := func() error {
		n++
		return c.store.Set(ctx, c.hbKey(c.rank), []byte(strconv.FormatUint(n, 10)))
	}
	watched := (c.rank + 1) % c.size
	last, since := "", time.Now()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := beat(); err != nil {
			if ctx.Err() == nil {
				c.fail(fmt.Errorf("nccl: rank %d: the rendezvous store, which carries the heartbeats, failed, so lost peers cannot be noticed (is the store's server still up?): %w", c.rank, err))
			}
			return
		}
		if watched != c.rank {
			gctx, cancel := context.WithTimeout(ctx, period)
			v, err := c.store.Get(gctx, c.hbKey(watched))
			timedOut := gctx.Err() != nil
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil && timedOut: // not beating yet
			case err != nil:
				c.fail(fmt.Errorf("nccl: rank %d: the rendezvous store, which carries the heartbeats, failed, so lost peers cannot be noticed (is the store's server still up?): %w", c.rank, err))
				return
			case string(v) == "bye": // closed: watch the next one
				watched = (watched + 1) % c.size
				last, since = "", time.Now()
				continue
			case string(v) != last:
				last, since = string(v), time.Now()
			}
			if d := time.Since(since); d > deadline {
				c.fail(&comm.PeerError{Rank: watched, Err: fmt.Errorf("%w: no heartbeat for %v (rank %d watches it through the store; NCCL reports no error for a peer lost over NVLink, P2P or shared memory); raise comm.Options.PeerTimeout if it was only slow",
					comm.ErrPeerLost, d.Round(time.Millisecond), c.rank)})
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stopHeartbeat stops the heartbeats without a goodbye.
func (c *Comm) stopHeartbeat() {
	if c.hbStop != nil {
		c.hbStop()
	}
}

// goodbye tells the peer watching this rank that it closed (in the
// background; Close waits for it a little, see awaitNotes).
func (c *Comm) goodbye() {
	if c.hbStop == nil {
		return
	}
	c.hbStop()
	c.notes.Add(1)
	go func() {
		defer c.notes.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.PeerDeadline())
		defer cancel()
		c.store.Set(ctx, c.hbKey(c.rank), []byte("bye"))
	}()
}

// publish tells the other ranks of the Comm that it failed with err (the
// first failure of any rank wins), in the background.
func (c *Comm) publish(err error) {
	var re remoteError
	if errors.As(err, &re) || errors.Is(err, comm.ErrClosed) {
		return
	}
	kind, rank, why := "abort", c.rank, err.Error()
	var pe *comm.PeerError
	if errors.As(err, &pe) && errors.Is(err, comm.ErrPeerLost) {
		kind, rank = "lost", pe.Rank
		why = strings.TrimPrefix(pe.Err.Error(), comm.ErrPeerLost.Error()+": ")
	}
	msg := fmt.Sprintf("%s %d %d\n%s", kind, rank, c.rank, why)
	c.notes.Add(1)
	go func() {
		defer c.notes.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.PeerDeadline())
		defer cancel()
		c.store.CompareAndSet(ctx, c.path+"/abort", nil, []byte(msg))
	}()
}

// awaitNotes waits, for at most min(PeerDeadline(), 2s), until this
// rank's failure notice and goodbye are in the store. A process that
// closes its Comm after a failure and exits at once (as a training script
// does) would otherwise leave the others to time out on its heartbeat and
// blame it, instead of the rank that was lost (TestKilledRankProcess).
func (c *Comm) awaitNotes() {
	done := make(chan struct{})
	go func() {
		c.notes.Wait()
		close(done)
	}()
	t := time.NewTimer(min(c.opts.PeerDeadline(), 2*time.Second))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// watchAbort waits for another rank's failure and fails the Comm with it.
func (c *Comm) watchAbort() {
	v, err := c.store.Get(c.life, c.path+"/abort")
	if err != nil {
		return // closed, or the store failed (the heartbeats report that)
	}
	head, msg, _ := strings.Cut(string(v), "\n")
	var kind string
	var rank, from int
	if _, err := fmt.Sscanf(head, "%s %d %d", &kind, &rank, &from); err != nil {
		c.fail(remoteError{fmt.Errorf("%w: rank %d: malformed failure notice %q in the store", comm.ErrProtocol, c.rank, v)})
		return
	}
	if from == c.rank {
		return
	}
	var e error
	if kind == "lost" {
		e = &comm.PeerError{Rank: rank, Err: fmt.Errorf("%w: rank %d reported it lost: %s", comm.ErrPeerLost, from, msg)}
	} else {
		e = fmt.Errorf("%w by rank %d: %s", comm.ErrAborted, rank, msg)
	}
	c.fail(remoteError{e})
}

// Abort fails the Comm with cause and tells the other ranks, whose
// operations on it then fail with an error wrapping comm.ErrAborted that
// quotes cause (see comm.Aborter).
func (c *Comm) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted")
	}
	c.fail(cause)
}

var _ comm.Aborter = (*Comm)(nil)
