package tcp

import (
	"bytes"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/wire"
)

// waiting reports whether tr's reader of the link from peer waits for a
// receive to be posted.
func waiting(tr *Transport, from int) bool {
	c := tr.conns[from]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// TestReaderWaitsForReceive: a frame that arrives before its receive is
// posted waits in the socket for the receive (Recv or RecvPayload) instead
// of being queued, and then goes straight to it.
func TestReaderWaitsForReceive(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 20*time.Second)
	b := w.ts[1]
	b.postWait.Store(int64(time.Hour)) // only a post ends the wait
	c := b.conns[0]
	n := 1 << 20
	for i, payload := range []bool{false, true} {
		h := coll(0, uint64(i+1))
		h.Count = uint64(n)
		sent := make(chan error, 1)
		go func() { sent <- w.ts[0].Send(ctx, 1, h, pattern(n, byte(i))) }()
		waitFor(t, "the reader to wait for the receive", func() bool { return waiting(b, 0) })
		if q := queued(b, 0); q != 0 {
			t.Fatalf("%d bytes queued while the reader waits", q)
		}
		got := make([]byte, n)
		var err error
		if payload {
			var fn func(int, []byte)
			got, fn = collect(t, n)
			err = b.RecvPayload(ctx, 0, h, n, fn)
		} else {
			err = b.Recv(ctx, 0, h, got)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pattern(n, byte(i))) {
			t.Fatal("wrong data")
		}
		if hits := c.waitHits.Load(); hits != int64(i+1) {
			t.Errorf("%d waits ended by a post, want %d", hits, i+1)
		}
	}
	if m := c.waitMisses.Load(); m != 0 {
		t.Errorf("%d waits timed out", m)
	}
}

// TestReaderWaitIsBounded: frames whose receive is not posted within
// postWait are queued, the reader goes on, and the receives posted later
// get them in order.
func TestReaderWaitIsBounded(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 20*time.Second)
	b := w.ts[1]
	n := waitMinBytes + wire.MaxFrame // two frames
	const msgs = 3
	h := coll(0, 7)
	h.Count = uint64(n)
	for i := range msgs {
		if err := w.ts[0].Send(ctx, 1, h, pattern(n, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the messages to be queued", func() bool { return queued(b, 0) == msgs*int64(n) })
	if b.conns[0].waitMisses.Load() == 0 {
		t.Error("no wait timed out")
	}
	for i := range msgs {
		got := make([]byte, n)
		if err := b.Recv(ctx, 0, h, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pattern(n, byte(i))) {
			t.Fatalf("message %d: wrong data", i)
		}
	}
}

// TestReaderWaitEndsOnClose: a reader waiting for a receive does not hold
// up Close, and the peer still sees an orderly goodbye.
func TestReaderWaitEndsOnClose(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 20*time.Second)
	b := w.ts[1]
	b.postWait.Store(int64(time.Hour))
	n := 1 << 20
	h := coll(0, 1)
	h.Count = uint64(n)
	if err := w.ts[0].Send(ctx, 1, h, pattern(n, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reader to wait for the receive", func() bool { return waiting(b, 0) })
	start := time.Now()
	b.Close()
	if d := time.Since(start); d > 2*closeLinger {
		t.Errorf("Close took %v", d)
	}
	select {
	case <-b.conns[0].readerDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader did not exit")
	}
	err := w.ts[0].Recv(ctx, 1, coll(0, 2), make([]byte, 1))
	wantPeerErr(t, err, 1, comm.ErrClosed)
}
