package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/wire"
)

// collect returns an fn for RecvPayload that assembles the pieces into a
// buffer and checks that they come in order.
func collect(t *testing.T, n int) (buf []byte, fn func(off int, p []byte)) {
	buf = make([]byte, n)
	next := 0
	return buf, func(off int, p []byte) {
		if off != next {
			t.Errorf("piece at %d, want %d", off, next)
		}
		if len(p) == 0 {
			t.Error("empty piece")
		}
		next = off + copy(buf[off:], p)
	}
}

// TestRecvPayload: RecvPayload hands over every byte of a message of
// several frames in order, whether the receive was posted before the
// message arrived (through the reader's staging buffer), after (queued
// frames), or from the rank itself; the queue is empty afterwards. A
// message of another length is a mismatch and fn never sees it.
func TestRecvPayload(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 20*time.Second)
	n := wire.MaxFrame + stagePiece + 3
	for i, mode := range []string{"posted", "queued", "self"} {
		t.Run(mode, func(t *testing.T) {
			h := p2p(0, uint64(i))
			from := 0
			if mode == "self" {
				from = 1
			}
			src := w.ts[from]
			buf, fn := collect(t, n)
			done := make(chan error, 1)
			recv := func() { done <- w.ts[1].RecvPayload(ctx, from, h, n, fn) }
			if mode == "posted" {
				go recv()
				waitFor(t, "the receive to be posted", func() bool { return posted(w.ts[1], from, h) })
			}
			if err := src.Send(ctx, 1, h, pattern(n, byte(i))); err != nil {
				t.Fatal(err)
			}
			if mode != "posted" {
				waitFor(t, "the message to be queued", func() bool { return queued(w.ts[1], from) == int64(n) })
				go recv()
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, pattern(n, byte(i))) {
				t.Fatal("wrong data")
			}
			if q := queued(w.ts[1], from); q != 0 {
				t.Fatalf("%d bytes still queued", q)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		h := p2p(0, 8)
		go w.ts[0].Send(ctx, 1, h, nil)
		if err := w.ts[1].RecvPayload(ctx, 0, h, 0, func(int, []byte) { t.Error("fn called") }); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		var called atomic.Bool
		go w.ts[0].Send(ctx, 1, p2p(0, 9), make([]byte, 10))
		err := w.ts[1].RecvPayload(ctx, 0, p2p(0, 9), 11, func(int, []byte) { called.Store(true) })
		var me *wire.MismatchError
		if !errors.As(err, &me) || called.Load() {
			t.Fatalf("wrong length: %v (fn called: %v)", err, called.Load())
		}
	})
	if err := w.ts[1].RecvPayload(ctx, 0, p2p(0, 9), -1, func(int, []byte) {}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("negative length: %v", err)
	}
	if err := w.ts[1].RecvPayload(ctx, 0, p2p(0, 9), 1, nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("nil fn: %v", err)
	}
	if err := w.ts[1].Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRecvPayloadCancelNeverCallsLate: a RecvPayload cancelled while a
// message streams in never calls fn after it returned, and the link stays
// usable.
func TestRecvPayloadCancelNeverCallsLate(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 20*time.Second)
	n := 2*wire.MaxFrame + 1
	for i := range 4 {
		h := p2p(0, uint64(100+i))
		var returned, late atomic.Bool
		fn := func(int, []byte) {
			if returned.Load() {
				late.Store(true)
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			err := w.ts[1].RecvPayload(rctx, 0, h, n, fn)
			returned.Store(true)
			done <- err
		}()
		waitFor(t, "the receive to be posted", func() bool { return posted(w.ts[1], 0, h) })
		sent := make(chan error, 1)
		go func() { sent <- w.ts[0].Send(ctx, 1, h, pattern(n, 1)) }()
		time.Sleep(time.Duration(i) * 300 * time.Microsecond)
		cancel()
		<-done
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if late.Load() {
			t.Fatalf("iteration %d: fn called after RecvPayload returned", i)
		}
	}
	// The stream may hold the rest of a cancelled message; a fresh
	// stream still works.
	h := p2p(0, 200)
	go w.ts[0].Send(ctx, 1, h, pattern(1000, 3))
	buf, fn := collect(t, 1000)
	if err := w.ts[1].RecvPayload(ctx, 0, h, 1000, fn); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, pattern(1000, 3)) {
		t.Fatal("wrong data")
	}
	if err := w.ts[1].Err(); err != nil {
		t.Fatal(err)
	}
}

// TestBufPool: buffers come back with the asked length and the capacity of
// their class, and foreign buffers are not pooled.
func TestBufPool(t *testing.T) {
	for _, n := range []int{1, 4095, 4096, 4097, 100 << 10, wire.MaxFrame} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b := getBuf(n)
			if len(b) != n || cap(b) < n || cap(b)&(cap(b)-1) != 0 {
				t.Fatalf("getBuf(%d): len %d cap %d", n, len(b), cap(b))
			}
			putBuf(b)
			putBuf(make([]byte, n+1))
			if b := getBuf(n); len(b) != n {
				t.Fatalf("getBuf(%d) again: len %d", n, len(b))
			}
		})
	}
	if getBuf(0) != nil {
		t.Fatal("getBuf(0) not nil")
	}
}
