package mailbox

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gdist/gdist/comm/internal/wire"
)

func msgHeader(seq uint64, n int) wire.Header {
	return wire.Header{Kind: wire.KindColl, Op: wire.OpAllReduce, DType: 5, Group: 1, Seq: seq, Count: uint64(n), Total: uint64(n)}
}

// A message queued before its receive, one that arrives while it is
// posted, and one to this rank itself in several frames all end up whole
// and in order; the idle Box forgets its streams.
func TestQueueTakeOffer(t *testing.T) {
	var mu sync.Mutex
	b := New(&mu)
	finished := 0
	b.OnFinish = func() { finished++ }
	mu.Lock()
	defer mu.Unlock()

	h1 := msgHeader(1, 3)
	h1.Len = 3
	key := KeyOf(h1)
	s := b.Stream(key)
	if !b.Queue(key, s, h1, []byte{1, 2, 3}) {
		t.Fatal("frame with no receive posted was not queued")
	}
	if _, _, q := b.Counts(); q != 3 {
		t.Fatalf("queued %d bytes, want 3", q)
	}
	s.Join()
	r := NewRecv(make([]byte, 3), nil, 3)
	r.Want = msgHeader(1, 3)
	b.Take(s, r, nil, false, nil)
	if !r.Done() || r.Err != nil || string(r.Dst) != "\x01\x02\x03" {
		t.Fatalf("queued message: done %v, err %v, dst %v", r.Done(), r.Err, r.Dst)
	}

	// Posted first, then two frames.
	r = NewRecv(make([]byte, 4), nil, 4)
	r.Want = msgHeader(2, 4)
	b.Take(s, r, nil, false, nil)
	if r.Done() || !b.HasPosted(r.Want) {
		t.Fatal("receive with nothing queued was not posted")
	}
	for off := 0; off < 4; off += 2 {
		h := msgHeader(2, 4)
		h.Offset, h.Len = uint64(off), 2
		if !b.Offer(key, s, h, []byte{byte(off), byte(off + 1)}) {
			t.Fatal("posted receive refused its frame")
		}
	}
	if !r.Done() || r.Err != nil || string(r.Dst) != "\x00\x01\x02\x03" || finished != 1 {
		t.Fatalf("posted message: done %v, err %v, dst %v, OnFinish ran %d times", r.Done(), r.Err, r.Dst, finished)
	}
	b.Leave(key, s)
	if n, m, q := b.Counts(); n != 0 || m != 0 || q != 0 {
		t.Fatalf("idle box holds %d streams, %d send locks, %d bytes", n, m, q)
	}

	// To itself, in frames of wire.MaxFrame.
	n := wire.MaxFrame + 5
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	h := msgHeader(3, n)
	b.DeliverLocal(h, payload, func(n int) []byte { return make([]byte, n) })
	s = b.Stream(key)
	r = NewRecv(make([]byte, n), nil, n)
	r.Want = h
	b.Take(s, r, nil, false, nil)
	if !r.Done() || r.Err != nil || string(r.Dst) != string(payload) {
		t.Fatalf("local message: done %v, err %v", r.Done(), r.Err)
	}
}

// A frame of another collective ends the receive with a mismatch naming
// both; a receive of a closed peer ends with its error; Cancel ends a
// posted receive.
func TestMismatchClosedCancel(t *testing.T) {
	var mu sync.Mutex
	b := New(&mu)
	mu.Lock()
	want := msgHeader(5, 2)
	s := b.Stream(KeyOf(want))
	r := NewRecv(make([]byte, 2), nil, 2)
	r.Want = want
	b.Take(s, r, nil, false, nil)
	got := msgHeader(6, 2)
	got.Len = 2
	b.Offer(KeyOf(got), s, got, []byte{9, 9})
	var me *wire.MismatchError
	if !r.Done() || !errors.As(r.Err, &me) || me.Got.Seq != 6 || me.Want.Seq != 5 {
		t.Fatalf("mismatched frame: done %v, err %v", r.Done(), r.Err)
	}

	bye := errors.New("peer said goodbye")
	r = NewRecv(make([]byte, 2), nil, 2)
	r.Want = want
	b.Take(s, r, func() error { return bye }, false, nil)
	if !r.Done() || r.Err != bye {
		t.Fatalf("receive from a closed peer: done %v, err %v", r.Done(), r.Err)
	}

	r = NewRecv(make([]byte, 2), nil, 2)
	r.Want = want
	b.Take(s, r, nil, false, nil)
	mu.Unlock()
	if err := b.Cancel(s, r, context.Canceled, nil); err != context.Canceled || !r.Done() {
		t.Fatalf("Cancel: %v", err)
	}
	mu.Lock()
	if b.HasPosted(want) {
		t.Fatal("cancelled receive still posted")
	}
	mu.Unlock()
}

// acquireSem takes sem, or fails once ctx ends.
func acquireSem(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LockSend serialises the senders of one stream and forgets the lock when
// nobody holds it.
func TestLockSend(t *testing.T) {
	var mu sync.Mutex
	b := New(&mu)
	key := KeyOf(msgHeader(1, 1))
	l, err := b.LockSend(context.Background(), key, acquireSem)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.LockSend(ctx, key, acquireSem); !errors.Is(err, context.Canceled) {
		t.Fatalf("second sender got the held lock: %v", err)
	}
	b.UnlockSend(key, l)
	if _, m, _ := b.Counts(); m != 0 {
		t.Fatalf("%d send locks left", m)
	}
	// The lock is reused, free: the next sender takes it at once.
	l2, err := b.LockSend(ctx, key, func(ctx context.Context, sem chan struct{}) error {
		select {
		case sem <- struct{}{}:
			return nil
		default:
			return errors.New("reused lock is held")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if l2 != l {
		t.Errorf("the idle lock was not reused")
	}
	b.UnlockSend(key, l2)
}

// SendFrames cuts a message into frames of at most maxFrame bytes (one
// empty frame for an empty message), each written holding wsem, and
// releases the send lock and wsem whether write fails or not.
func TestSendFrames(t *testing.T) {
	var mu sync.Mutex
	b := New(&mu)
	wsem := make(chan struct{}, 1)
	for _, n := range []int{0, 1, 7, 8, 9, 24, 25} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i)
		}
		var got []byte
		var frames []wire.Header
		err := b.SendFrames(context.Background(), msgHeader(3, n), payload, 8, wsem, acquireSem, func(h wire.Header, p []byte) error {
			if len(wsem) != 1 {
				t.Errorf("frame written without holding wsem")
			}
			if int(h.Len) != len(p) || int(h.Offset) != len(got) || int(h.Total) != n {
				t.Errorf("%d bytes: frame header %+v for %d bytes at %d", n, h, len(p), len(got))
			}
			frames = append(frames, h)
			got = append(got, p...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := max(1, (n+7)/8); len(frames) != want || !bytes.Equal(got, payload) {
			t.Errorf("%d bytes: %d frames (want %d), payload %v", n, len(frames), want, got)
		}
	}
	fail := errors.New("write failed")
	calls := 0
	err := b.SendFrames(context.Background(), msgHeader(4, 20), make([]byte, 20), 8, wsem, acquireSem, func(wire.Header, []byte) error {
		calls++
		return fail
	})
	if !errors.Is(err, fail) || calls != 1 {
		t.Fatalf("write error: got %v after %d writes", err, calls)
	}
	if len(wsem) != 0 {
		t.Fatal("wsem still held after a failed write")
	}
	if _, m, _ := b.Counts(); m != 0 {
		t.Fatalf("%d send locks left", m)
	}
}
