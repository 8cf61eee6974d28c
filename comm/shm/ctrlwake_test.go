//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// TestControlWakeups: with a control tick longer than any test, the
// control goroutine still acts on every ring of its bell (an abort, a
// producer stuck on a full ring, Close), so each must wake it: through
// its control socket, which every rank binds.
func TestControlWakeups(t *testing.T) {
	defer func(d time.Duration) { ctrlTickMax = d }(ctrlTickMax)
	ctrlTickMax = time.Hour
	w := mkWorld(t, 2, comm.Options{PeerTimeout: 4 * time.Hour}, Options{RingBytes: 64 << 10})
	ctx := ctxT(t, 20*time.Second)
	for r, tr := range w.ts {
		if tr.tick != time.Hour {
			t.Fatalf("rank %d: tick %v", r, tr.tick)
		}
		if tr.ctrlWake.conn == nil {
			t.Fatalf("rank %d has no control socket: %s", r, w.logs[r])
		}
	}

	// A sender whose ring fills with a message nobody receives yet is
	// drained into queues by the receiver's control goroutine.
	n := 300 << 10
	if err := w.ts[0].Send(ctx, 1, p2p(0, 1), pattern(n, 3)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := w.ts[1].Recv(ctx, 0, p2p(0, 1), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(n, 3)) {
		t.Fatal("wrong data")
	}

	// An abort reaches a receive that waits for the aborting rank.
	done := make(chan error, 1)
	go func() { done <- w.ts[1].Recv(ctx, 0, coll(7, 1), make([]byte, 8)) }()
	waitFor(t, "the receive to be posted", func() bool { return posted(w.ts[1], 0, coll(7, 1)) })
	w.ts[0].Abort(7, []int{1}, errors.New("test abort"))
	if err := <-done; !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("receive after the peer's abort: %v", err)
	}

	// Close stops the control goroutine and releases the sockets.
	for r, tr := range w.ts {
		tr.Close()
		select {
		case <-tr.ctrlDone:
		default:
			t.Fatalf("rank %d: Close returned before its control goroutine stopped", r)
		}
		if tr.ctrlWake.conn != nil || tr.ctrlWake.send.Load() != 0 {
			t.Errorf("rank %d: control sockets still open after Close", r)
		}
	}
}

// A control socket that is not there (a peer in another network
// namespace) is reported as unreachable; a bound one is not.
func TestCtrlReach(t *testing.T) {
	var w ctrlWaker
	name := ctrlName([]byte("reach"), []byte(t.Name()), 0)
	if err := w.listen(name); err != nil {
		t.Skipf("no abstract unix sockets here: %v", err)
	}
	defer w.close()
	if err := w.send1(newCtrlAddr(name)); err != nil {
		t.Errorf("sending to a bound socket: %v", err)
	}
	if err := w.send1(newCtrlAddr(ctrlName([]byte("reach"), []byte(t.Name()), 1))); err == nil {
		t.Error("sending to a socket nobody bound succeeded")
	}
	var b [8]byte
	if n, _, err := w.conn.ReadFrom(b[:]); err != nil || n != 1 {
		t.Errorf("read %d bytes, %v", n, err)
	}
}

// Control socket names differ by rank, by job token and by segment.
func TestCtrlName(t *testing.T) {
	a := ctrlName([]byte("t"), []byte("nonce"), 0)
	for _, b := range []string{
		ctrlName([]byte("t"), []byte("nonce"), 1),
		ctrlName([]byte("u"), []byte("nonce"), 0),
		ctrlName([]byte("t"), []byte("other"), 0),
	} {
		if a == b {
			t.Errorf("two control sockets named %s", a)
		}
	}
	if a[0] != '@' || len(a) > 100 {
		t.Errorf("name %q: want an abstract name that fits a sockaddr_un", a)
	}
}
