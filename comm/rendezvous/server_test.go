package rendezvous

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/internal/auth"
)

var testToken = []byte("test-token")

// logBuf collects a rank's diagnostics; the test prints them if it fails.
type logBuf = commtest.Log

func newTestServer(t *testing.T) (*Server, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	s, err := NewServer("127.0.0.1:0", testToken, lb.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, lb
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dialTest(t *testing.T, ctx context.Context, addr string) comm.Store {
	t.Helper()
	st, err := Dial(ctx, addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestStore runs the store test kit against clients of a server and
// against MemStore.
func TestStore(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		commtest.StoreSuite(t, func(t *testing.T) (comm.Store, comm.Store) {
			s, _ := newTestServer(t)
			ctx := testCtx(t)
			return dialTest(t, ctx, s.Addr()), dialTest(t, ctx, s.Addr())
		})
	})
	t.Run("mem", func(t *testing.T) {
		commtest.StoreSuite(t, func(t *testing.T) (comm.Store, comm.Store) {
			m := NewMemStore()
			return m, m
		})
	})
}

// Keys longer than MaxKeyLen are refused by the client.
func TestKeyBound(t *testing.T) {
	s, _ := newTestServer(t)
	ctx := testCtx(t)
	a := dialTest(t, ctx, s.Addr())
	if err := a.Set(ctx, strings.Repeat("x", MaxKeyLen+1), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("long key: %v", err)
	}
}

func TestBlockedGet(t *testing.T) {
	s, _ := newTestServer(t)
	ctx := testCtx(t)
	a := dialTest(t, ctx, s.Addr())
	b := dialTest(t, ctx, s.Addr())

	got := make(chan string, 1)
	go func() {
		v, err := a.Get(ctx, "later")
		if err != nil {
			t.Error(err)
		}
		got <- string(v)
	}()
	// A blocked Get must not hold up other requests on the same client.
	if n, err := a.Add(ctx, "other", 1); err != nil || n != 1 {
		t.Fatalf("add while a get is blocked: %d, %v", n, err)
	}
	if err := b.Set(ctx, "later", []byte("here")); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "here" {
		t.Fatalf("got %q", v)
	}
}

// A cancelled Get leaves no waiter behind on the server (the store kit
// checks the client side of cancellation).
func TestGetCancel(t *testing.T) {
	s, _ := newTestServer(t)
	ctx := testCtx(t)
	a := dialTest(t, ctx, s.Addr())
	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := a.Get(tctx, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get: %v", err)
	}
	if err := a.Set(ctx, "x", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pendingOnServer(s) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters still pending on the server", pendingOnServer(s))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pendingOnServer(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sc := range s.conns {
		if sc != nil {
			sc.mu.Lock()
			n += len(sc.pending)
			sc.mu.Unlock()
		}
	}
	return n
}

func TestWrongToken(t *testing.T) {
	s, lb := newTestServer(t)
	ctx := testCtx(t)
	_, err := Dial(ctx, s.Addr(), []byte("wrong"))
	if !errors.Is(err, comm.ErrAuth) {
		t.Fatalf("dial with a wrong token: %v", err)
	}
	lb.WaitFor(t, "refused connection from 127.0.0.1:")
	good := dialTest(t, ctx, s.Addr())
	if err := good.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

func TestCloseFailsPending(t *testing.T) {
	s, _ := newTestServer(t)
	ctx := testCtx(t)
	a := dialTest(t, ctx, s.Addr())
	errc := make(chan error, 1)
	go func() {
		_, err := a.Get(ctx, "never")
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	s.Close()
	if err := <-errc; !errors.Is(err, comm.ErrPeerLost) {
		t.Fatalf("get after server close: %v", err)
	}
	a.Close()
	if err := a.Set(ctx, "k", nil); !errors.Is(err, comm.ErrPeerLost) && !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("set after close: %v", err)
	}
}

func TestDialRetries(t *testing.T) {
	// Reserve a port, free it, and start the server there a little later.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx := testCtx(t)
	started := make(chan *Server, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		s, err := NewServer(addr, testToken, t.Logf)
		if err != nil {
			t.Error(err)
		}
		started <- s
	}()
	st, err := Dial(ctx, addr, testToken)
	s := <-started
	if s != nil {
		defer s.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := Dial(cctx, "127.0.0.1:1", testToken); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial to nothing: %v", err)
	}
}

// rawConn opens an authenticated connection that speaks raw bytes.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := auth.Client(c, testToken, []byte(clientHello)); err != nil {
		t.Fatal(err)
	}
	return c
}

func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [64]byte
	for {
		_, err := c.Read(b[:])
		if err == io.EOF || errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "reset")) {
			return
		}
		if err != nil {
			t.Fatalf("connection not closed by the server: %v", err)
		}
	}
}

func TestMalformedFrames(t *testing.T) {
	s, lb := newTestServer(t)
	ctx := testCtx(t)
	good := dialTest(t, ctx, s.Addr())

	cases := map[string][]byte{
		// A frame of plausible length whose body is garbage.
		"garbage": append(binary.LittleEndian.AppendUint32(nil, 12), "\xffgarbage!!!!"...),
		// A length far beyond the bound.
		"oversized": binary.LittleEndian.AppendUint32(nil, 0xFFFFFFF0),
		// A set whose value length exceeds MaxValueLen inside a small frame.
		"bad value length": func() []byte {
			b := []byte{opSet}
			b = binary.LittleEndian.AppendUint64(b, 1)
			b = appendKey(b, "k")
			b = binary.LittleEndian.AppendUint32(b, MaxValueLen+1)
			return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
		}(),
		// Text that is not a frame at all: its "length" is huge.
		"text": []byte("GET / HTTP/1.1\r\n\r\n"),
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			c := rawConn(t, s.Addr())
			if _, err := c.Write(frame); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, c)
			lb.WaitFor(t, "closing connection from "+c.LocalAddr().String())
			if err := good.Set(ctx, "still", []byte("up")); err != nil {
				t.Fatalf("server stopped serving good clients: %v", err)
			}
		})
	}
	// A valid request on a raw connection works, which shows the raw
	// framing above was right apart from the corruption.
	c := rawConn(t, s.Addr())
	c.Write(encodeRequest(request{op: opGet, id: 7, key: "still"}))
	body, err := readFrame(c, maxReplyFrame)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeReply(body)
	if err != nil || r.id != 7 || r.status != statusOK || string(r.payload) != "up" {
		t.Fatalf("reply %+v, %v", r, err)
	}
}

func TestNotAStoreClient(t *testing.T) {
	s, lb := newTestServer(t)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	auth.Client(c, testToken, []byte("tcp rank 3")) // right token, wrong hello
	expectClosed(t, c)
	lb.WaitFor(t, "refused connection from", "not a store client")
}
