// Package transporttest is the test kit every algo.Transport runs: the
// transport-level behaviour that comm/algo relies on (streams that are
// independent and ordered, checks before a byte is written, cancellation
// that never writes late, Close that fails what is pending), written once
// and run by comm/tcp and comm/shm from their tests:
//
//	func TestTransportKit(t *testing.T) { transporttest.Run(t, kitWorld) }
//
// (inproc's and the algo tests' in-memory transports are covered by the
// conformance suite, comm/commtest, through the Comm.)
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/internal/mailbox"
	"github.com/gdist/gdist/comm/internal/wire"
)

// World is what a transport gives the kit.
type World struct {
	// New builds n connected transports (rank i at index i) with opts;
	// it closes them when t ends.
	New func(t *testing.T, n int, opts comm.Options) []algo.Transport
	// Box returns the mailbox in which tr keeps what rank from sent it.
	Box func(tr algo.Transport, from int) *mailbox.Box
	// Big is the size of a message that takes several frames (and, for a
	// transport of rings, more than a ring holds).
	Big int
	// Lazy: frames stay in the link (a ring) until a receive drains it,
	// so nothing is queued before a receive waits.
	Lazy bool
	// Fail ends tr with err as a failure inside it would (it says goodbye
	// to its peers with err as the reason).
	Fail func(tr algo.Transport, err error)
}

// Run runs the kit.
func Run(t *testing.T, w World) {
	t.Run("Mesh", func(t *testing.T) { mesh(t, w) })
	t.Run("StreamsIndependent", func(t *testing.T) { streamsIndependent(t, w) })
	t.Run("Mismatch", func(t *testing.T) { mismatch(t, w) })
	t.Run("RecvCancel", func(t *testing.T) { recvCancel(t, w) })
	t.Run("RecvCancelNeverWritesLate", func(t *testing.T) { recvCancelNeverWritesLate(t, w) })
	t.Run("CloseWithPending", func(t *testing.T) { closeWithPending(t, w) })
	t.Run("Abort", func(t *testing.T) { abort(t, w) })
	t.Run("GoodbyeCarriesReason", func(t *testing.T) { goodbyeCarriesReason(t, w) })
}

// Coll is the header of a collective message of group and seq.
func Coll(group, seq uint64) wire.Header {
	return wire.Header{Kind: wire.KindColl, Op: wire.OpAllReduce, DType: 1, Red: 1, Group: group, Seq: seq, Count: 5}
}

// P2P is the header of a point-to-point message of group and tag.
func P2P(group, tag uint64) wire.Header {
	return wire.Header{Kind: wire.KindP2P, Op: wire.OpSend, DType: 5, Group: group, Seq: tag}
}

// Pattern is n bytes that differ with seed.
func Pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// Ctx is a ctx that ends after d or with t.
func Ctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond until it holds (5 s at most).
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// WantPeerErr fails t unless err is a *comm.PeerError naming rank and
// wrapping sentinel.
func WantPeerErr(t *testing.T, err error, rank int, sentinel error) {
	t.Helper()
	var pe *comm.PeerError
	if !errors.As(err, &pe) || pe.Rank != rank || !errors.Is(err, sentinel) {
		t.Fatalf("got %v, want a PeerError naming rank %d wrapping %v", err, rank, sentinel)
	}
}

func (w World) posted(tr algo.Transport, from int, h wire.Header) bool {
	p, _, _, _ := w.Box(tr, from).Inspect(h)
	return p
}

func (w World) queued(tr algo.Transport, from int) int64 {
	_, _, _, q := w.Box(tr, from).Inspect(wire.Header{})
	return q
}

func transportErr(tr algo.Transport) error {
	if e, ok := tr.(interface{ Err() error }); ok {
		return e.Err()
	}
	return nil
}

// mesh: every rank of worlds of 1 to 4 sends to every rank (itself
// included) and receives from every rank.
func mesh(t *testing.T, w World) {
	for size := 1; size <= 4; size++ {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ts := w.New(t, size, comm.Options{})
			ctx := Ctx(t, 10*time.Second)
			var wg sync.WaitGroup
			errs := make(chan error, 2*size*size)
			for r, tr := range ts {
				if tr.Rank() != r || tr.Size() != size {
					t.Fatalf("rank %d: Rank %d Size %d", r, tr.Rank(), tr.Size())
				}
				for p := range size {
					wg.Go(func() { errs <- tr.Send(ctx, p, Coll(1, 1), []byte{byte(r), byte(p)}) })
					wg.Go(func() {
						got := make([]byte, 2)
						if err := tr.Recv(ctx, p, Coll(1, 1), got); err != nil {
							errs <- err
						} else if got[0] != byte(p) || got[1] != byte(r) {
							errs <- fmt.Errorf("rank %d from %d: got %v", r, p, got)
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// streamsIndependent: multi-frame messages on four streams, sent at once
// (their frames interleave on the link), are received in the reverse
// order; the messages of one stream keep their order and never interleave
// their frames; idle streams are forgotten.
func streamsIndependent(t *testing.T, w World) {
	ts := w.New(t, 2, comm.Options{})
	ctx := Ctx(t, 20*time.Second)
	a, b := ts[0], ts[1]
	big := w.Big
	hs := []wire.Header{P2P(1, 1), P2P(1, 2), Coll(1, 1), Coll(2, 1)}
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			if err := a.Send(ctx, 1, h, Pattern(big, byte(i))); err != nil {
				t.Error(err)
			}
		})
	}
	for i := len(hs) - 1; i >= 0; i-- {
		got := make([]byte, big)
		if err := b.Recv(ctx, 0, hs[i], got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, Pattern(big, byte(i))) {
			t.Errorf("stream %d: wrong data", i)
		}
	}
	wg.Wait()

	h := P2P(1, 9)
	for i := range 3 {
		if err := a.Send(ctx, 1, h, Pattern(10, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		got := make([]byte, 10)
		if err := b.Recv(ctx, 0, h, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, Pattern(10, byte(i))) {
			t.Fatalf("message %d out of order: %v", i, got)
		}
	}
	for i := range 2 {
		wg.Go(func() {
			if err := a.Send(ctx, 1, h, bytes.Repeat([]byte{byte(i + 1)}, big)); err != nil {
				t.Error(err)
			}
		})
	}
	seen := map[byte]bool{}
	for range 2 {
		got := make([]byte, big)
		if err := b.Recv(ctx, 0, h, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bytes.Repeat(got[:1], big)) {
			t.Fatal("frames of two messages interleaved")
		}
		seen[got[0]] = true
	}
	wg.Wait()
	if !seen[1] || !seen[2] {
		t.Fatalf("got messages %v", seen)
	}
	for r, tr := range ts {
		for from := range ts {
			if _, n, m, q := w.Box(tr, from).Inspect(wire.Header{}); n != 0 || m != 0 || q != 0 {
				t.Errorf("rank %d link %d: %d streams, %d send streams, %d queued bytes left", r, from, n, m, q)
			}
		}
	}
}

// mismatch: a message of another op, count or length fails the receive
// (posted before it arrived, or after) with a *wire.MismatchError naming
// the sender's side, and is discarded; the transport still works.
func mismatch(t *testing.T, w World) {
	ts := w.New(t, 2, comm.Options{})
	ctx := Ctx(t, 10*time.Second)
	a, b := ts[0], ts[1]
	other := Coll(4, 1)
	other.Op = wire.OpBroadcast
	count := Coll(4, 1)
	count.Count = 6
	cases := map[string]struct {
		want wire.Header
		n    int
	}{
		"op":     {other, 8},
		"count":  {count, 8},
		"length": {Coll(4, 1), 9},
	}
	for name, c := range cases {
		for _, postFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/posted=%v", name, postFirst), func(t *testing.T) {
				done := make(chan error, 1)
				recv := func() { done <- b.Recv(ctx, 0, c.want, make([]byte, c.n)) }
				if postFirst {
					go recv()
					WaitFor(t, "the receive to be posted", func() bool { return w.posted(b, 0, c.want) })
				}
				if err := a.Send(ctx, 1, Coll(4, 1), make([]byte, 8)); err != nil {
					t.Fatal(err)
				}
				if !postFirst {
					if !w.Lazy {
						WaitFor(t, "the message to be queued", func() bool { return w.queued(b, 0) == 8 })
					}
					go recv()
				}
				err := <-done
				var me *wire.MismatchError
				if !errors.As(err, &me) {
					t.Fatalf("got %v, want a *wire.MismatchError", err)
				}
				if me.Got.Op != wire.OpAllReduce || me.Got.Count != 5 {
					t.Fatalf("mismatch names %+v", me.Got)
				}
				if q := w.queued(b, 0); q != 0 {
					t.Fatalf("mismatched frame not discarded: %d bytes queued", q)
				}
			})
		}
	}
	if err := a.Send(ctx, 1, Coll(4, 2), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(ctx, 0, Coll(4, 2), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}

// recvCancel: a receive whose ctx ends returns its error and is no longer
// posted.
func recvCancel(t *testing.T, w World) {
	ts := w.New(t, 2, comm.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ts[0].Recv(ctx, 1, Coll(0, 1), make([]byte, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if w.posted(ts[0], 1, Coll(0, 1)) {
		t.Fatal("cancelled receive still posted")
	}
}

// recvCancelNeverWritesLate: a receive cancelled while its message streams
// in returns only once the transport has stopped writing its buffer (the
// race detector checks it too).
func recvCancelNeverWritesLate(t *testing.T, w World) {
	ts := w.New(t, 2, comm.Options{})
	ctx := Ctx(t, 20*time.Second)
	n := w.Big
	for i := range 4 {
		h := P2P(0, uint64(100+i))
		dst := make([]byte, n)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- ts[1].Recv(rctx, 0, h, dst) }()
		WaitFor(t, "the receive to be posted", func() bool { return w.posted(ts[1], 0, h) })
		sent := make(chan error, 1)
		go func() { sent <- ts[0].Send(ctx, 1, h, Pattern(n, 1)) }()
		time.Sleep(time.Duration(i) * 300 * time.Microsecond)
		cancel()
		err := <-done
		snap := bytes.Clone(dst)
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if err != nil && !bytes.Equal(snap, dst) {
			t.Fatalf("iteration %d: buffer written after Recv returned %v", i, err)
		}
	}
	if err := transportErr(ts[1]); err != nil {
		t.Fatal(err)
	}
}

// closeWithPending: Close fails this rank's pending receives with
// comm.ErrClosed at once; the peer keeps what was sent before, then fails
// its operations on the closed rank with a PeerError, and still talks to
// itself.
func closeWithPending(t *testing.T, w World) {
	ts := w.New(t, 2, comm.Options{})
	ctx := Ctx(t, 10*time.Second)
	a, b := ts[0], ts[1]
	if err := a.Send(ctx, 1, Coll(0, 1), []byte{42}); err != nil {
		t.Fatal(err)
	}
	pending := make(chan error, 2)
	go func() { pending <- a.Recv(ctx, 1, Coll(7, 1), make([]byte, 1)) }()
	go func() { pending <- a.Recv(ctx, 0, Coll(7, 1), make([]byte, 1)) }()
	WaitFor(t, "the receives to be posted", func() bool { return w.posted(a, 1, Coll(7, 1)) && w.posted(a, 0, Coll(7, 1)) })
	if !w.Lazy {
		WaitFor(t, "the message to arrive", func() bool { return w.queued(b, 0) == 1 })
	}

	peerPending := make(chan error, 1)
	go func() { peerPending <- b.Recv(ctx, 0, Coll(8, 1), make([]byte, 1)) }()
	WaitFor(t, "the receive to be posted", func() bool { return w.posted(b, 0, Coll(8, 1)) })

	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	for range 2 {
		if err := <-pending; !errors.Is(err, comm.ErrClosed) {
			t.Errorf("pending recv: %v", err)
		}
	}
	if err := a.Send(ctx, 1, Coll(0, 1), nil); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("send after close: %v", err)
	}
	WantPeerErr(t, <-peerPending, 0, comm.ErrClosed)
	got := make([]byte, 1)
	if err := b.Recv(ctx, 0, Coll(0, 1), got); err != nil || got[0] != 42 {
		t.Fatalf("message sent before close: %v %v", got, err)
	}
	WantPeerErr(t, b.Recv(ctx, 0, Coll(0, 1), got), 0, comm.ErrClosed)
	WantPeerErr(t, b.Send(ctx, 0, Coll(0, 1), got), 0, comm.ErrClosed)
	if err := transportErr(b); err != nil {
		t.Fatalf("the peer's transport failed: %v", err)
	}
	if err := b.Send(ctx, 1, Coll(0, 1), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(ctx, 1, Coll(0, 1), got); err != nil {
		t.Fatal(err)
	}
}

// abort: Abort fails the group's pending and later operations on the
// listed peers (naming this rank and the cause) and on this rank (with
// the cause), and no other group; long causes are truncated, and more
// aborts than a link buffers at once all arrive.
func abort(t *testing.T, w World) {
	ts := w.New(t, 3, comm.Options{})
	ctx := Ctx(t, 10*time.Second)
	a, b := ts[0], ts[1]
	pending := make(chan error, 1)
	go func() { pending <- b.Recv(ctx, 2, Coll(7, 1), make([]byte, 1)) }()
	WaitFor(t, "the receive to be posted", func() bool { return w.posted(b, 2, Coll(7, 1)) })

	cause := errors.New("boom")
	a.Abort(7, []int{1, 0, 1, 9}, cause)
	err := <-pending
	if !errors.Is(err, comm.ErrAborted) || !strings.Contains(err.Error(), "rank 0 aborted: boom") {
		t.Fatalf("peer's pending recv: %v", err)
	}
	if err := b.Send(ctx, 2, Coll(7, 2), nil); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("peer's later send: %v", err)
	}
	if err := a.Recv(ctx, 1, Coll(7, 2), nil); !errors.Is(err, cause) {
		t.Fatalf("local recv: %v", err)
	}
	if err := a.Send(ctx, 1, Coll(8, 1), []byte{3}); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(ctx, 0, Coll(8, 1), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", wire.MaxAbortText)
	for g := uint64(100); g < 110; g++ {
		a.Abort(g, []int{1}, errors.New(long))
	}
	for g := uint64(100); g < 110; g++ {
		if err := b.Recv(ctx, 0, Coll(g, 1), nil); !errors.Is(err, comm.ErrAborted) {
			t.Fatalf("group %d: %v", g, err)
		}
	}
}

// goodbyeCarriesReason: when a rank fails, its peers' operations on it
// fail with a PeerError (comm.ErrClosed) that gives the failure.
func goodbyeCarriesReason(t *testing.T, w World) {
	ts := w.New(t, 3, comm.Options{})
	ctx := Ctx(t, 10*time.Second)
	errc := make(chan error, 1)
	go func() { errc <- ts[0].Recv(ctx, 2, Coll(0, 1), make([]byte, 4)) }()
	WaitFor(t, "the receive to be posted", func() bool { return w.posted(ts[0], 2, Coll(0, 1)) })
	w.Fail(ts[2], &comm.PeerError{Rank: 1, Err: fmt.Errorf("%w: test crash", comm.ErrPeerLost)})
	err := <-errc
	WantPeerErr(t, err, 2, comm.ErrClosed)
	if !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "test crash") {
		t.Errorf("error does not give rank 2's reason: %v", err)
	}
	err = ts[0].Send(ctx, 2, Coll(0, 2), []byte{1})
	if err == nil || !strings.Contains(err.Error(), "test crash") {
		t.Errorf("send after the goodbye: %v", err)
	}
}
