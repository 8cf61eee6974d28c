package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/algo/transporttest"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/internal/auth"
	"github.com/gdist/gdist/comm/internal/mailbox"
	"github.com/gdist/gdist/comm/internal/wire"
	"github.com/gdist/gdist/comm/rendezvous"
)

var token = []byte("test-token")

// logBuf collects a rank's diagnostics; the test prints them if it fails.
type logBuf = commtest.Log

type world struct {
	store *rendezvous.MemStore
	job   string
	ts    []*Transport
	logs  []*logBuf
}

func config(w *world, rank, size int, opts comm.Options) comm.Config {
	return comm.Config{
		Rank: rank, Size: size, Store: w.store, Token: token, Job: w.job,
		Options: opts, Logf: w.logs[rank].Logf,
	}
}

func newWorld(t *testing.T, size int) *world {
	t.Helper()
	w := &world{store: rendezvous.NewMemStore(), job: t.Name(), ts: make([]*Transport, size)}
	for range size {
		w.logs = append(w.logs, &logBuf{})
	}
	t.Cleanup(func() {
		for _, tr := range w.ts {
			if tr != nil {
				tr.Close()
			}
		}
		if t.Failed() {
			for r, l := range w.logs {
				t.Logf("rank %d log:\n%s", r, l)
			}
		}
	})
	return w
}

// build builds the transports of the listed ranks concurrently.
func (w *world) build(ctx context.Context, size int, opts comm.Options, ranks ...int) []error {
	errs := make([]error, size)
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() {
			tr, err := New(ctx, config(w, r, size, opts))
			w.ts[r], errs[r] = tr, err
		})
	}
	wg.Wait()
	return errs
}

// mesh builds a complete world of size ranks.
func mkMesh(t *testing.T, size int, opts comm.Options) *world {
	t.Helper()
	w := newWorld(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all := make([]int, size)
	for i := range all {
		all[i] = i
	}
	for r, err := range w.build(ctx, size, opts, all...) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return w
}

func TestSendRecvSizes(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 20*time.Second)
	for _, n := range []int{0, 1, 4<<20 + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for r, tr := range w.ts {
				for _, p := range []int{1 - r, r} { // the peer and the rank itself
					h := coll(3, uint64(n))
					h.Count = uint64(n)
					wg.Go(func() { errs <- tr.Send(ctx, p, h, pattern(n, byte(r))) })
					wg.Go(func() {
						got := make([]byte, n)
						if err := tr.Recv(ctx, p, h, got); err != nil {
							errs <- err
						} else if !bytes.Equal(got, pattern(n, byte(p))) {
							errs <- fmt.Errorf("rank %d from %d: wrong data", r, p)
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

func posted(tr *Transport, from int, h wire.Header) bool {
	c := tr.conns[from]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.box.HasPosted(h)
}

func queued(tr *Transport, from int) int64 {
	c := tr.conns[from]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.box.Queued
}

func TestPostedAndUnexpected(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 20*time.Second)
	a, b := w.ts[0], w.ts[1]
	n := wire.MaxFrame + 100
	for _, self := range []bool{false, true} {
		from, to := 0, 1
		if self {
			from, to = 1, 1
		}
		src := w.ts[from]
		t.Run(fmt.Sprintf("posted-first/self=%v", self), func(t *testing.T) {
			h := p2p(0, 5)
			got := make([]byte, n)
			done := make(chan error, 1)
			go func() { done <- b.Recv(ctx, from, h, got) }()
			waitFor(t, "the receive to be posted", func() bool { return posted(b, from, h) })
			if err := src.Send(ctx, to, h, pattern(n, 1)); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, pattern(n, 1)) {
				t.Fatal("wrong data")
			}
		})
		t.Run(fmt.Sprintf("arrived-first/self=%v", self), func(t *testing.T) {
			h := p2p(0, 6)
			if err := src.Send(ctx, to, h, pattern(n, 2)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the message to be queued", func() bool { return queued(b, from) == int64(n) })
			got := make([]byte, n)
			if err := b.Recv(ctx, from, h, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, pattern(n, 2)) {
				t.Fatal("wrong data")
			}
			if q := queued(b, from); q != 0 {
				t.Fatalf("%d bytes still queued", q)
			}
		})
	}
	_ = a
}

// rogue dials addr and runs the client handshake as rank from of the
// given world, with tok.
func rogue(t *testing.T, addr string, tok []byte, m mesh, size, from, to int) (net.Conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	tr := &Transport{size: size}
	hs, err := auth.Client(nc, tok, []byte(tr.clientHello(m, from, to)))
	if err != nil {
		nc.Close()
		return nil, err
	}
	if string(hs) != tr.serverHello(m, to) {
		t.Fatalf("server hello %q", hs)
	}
	nc.Write([]byte{verdictAccept})
	var v [1]byte
	if _, err := nc.Read(v[:]); err != nil || v[0] != verdictAccept {
		t.Fatalf("verdict %v %v", v, err)
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

func TestWrongTokenRefused(t *testing.T) {
	w := newWorld(t, 2)
	ctx := ctxT(t, 10*time.Second)
	errs := make(chan error, 2)
	go func() { errs <- w.build(ctx, 2, comm.Options{}, 0)[0] }()
	m := newMesh("tcp", w.job, 1)
	addr, err := w.store.Get(ctx, m.addrKey(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = rogue(t, string(addr), []byte("wrong"), m, 2, 1, 0)
	if err == nil || !errors.Is(err, comm.ErrAuth) {
		t.Fatalf("rogue handshake: %v", err)
	}
	// A rogue with the token but from another job is refused too.
	bad := newMesh("tcp", "another job", 1)
	raw, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := auth.Client(raw, token, []byte((&Transport{size: 2}).clientHello(bad, 1, 0))); err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte{verdictAccept})
	var v [1]byte
	if _, err := raw.Read(v[:]); err == nil && v[0] == verdictAccept {
		t.Fatal("a connection from another job was accepted")
	}
	raw.Close()
	waitFor(t, "the refusals to be logged", func() bool {
		return w.logs[0].Contains("refused connection from "+raw.LocalAddr().String()) &&
			strings.Count(w.logs[0].String(), "refused connection from") == 2
	})
	// The right peer still gets in.
	go func() { errs <- w.build(ctx, 2, comm.Options{}, 1)[1] }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := w.ts[1].Send(ctx, 0, coll(0, 1), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := w.ts[0].Recv(ctx, 1, coll(0, 1), make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
}

func TestMissingPeers(t *testing.T) {
	w := newWorld(t, 3)
	ctx := ctxT(t, 500*time.Millisecond)
	errs := w.build(ctx, 3, comm.Options{}, 0, 1)
	for r, err := range errs[:2] {
		if err == nil || !strings.Contains(err.Error(), "rank(s) [2]") || !errors.Is(err, comm.ErrTimeout) {
			t.Errorf("rank %d: got %v, want an error naming rank 2", r, err)
		}
	}
}

func TestRebuildOnOneStore(t *testing.T) {
	w := mkMesh(t, 2, comm.Options{})
	ctx := ctxT(t, 10*time.Second)
	for _, tr := range w.ts {
		tr.Close()
	}
	for r, err := range w.build(ctx, 2, comm.Options{}, 0, 1) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := w.ts[0].Send(ctx, 1, coll(0, 1), []byte{7}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1)
	if err := w.ts[1].Recv(ctx, 0, coll(0, 1), got); err != nil || got[0] != 7 {
		t.Fatal(got, err)
	}
}

func TestGarbageAfterHandshake(t *testing.T) {
	w := newWorld(t, 2)
	ctx := ctxT(t, 10*time.Second)
	errs := make(chan error, 1)
	go func() { errs <- w.build(ctx, 2, comm.Options{}, 0)[0] }()
	m := newMesh("tcp", w.job, 1)
	addr, err := w.store.Get(ctx, m.addrKey(0))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := rogue(t, string(addr), token, m, 2, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	tr := w.ts[0]
	done := make(chan error, 1)
	go func() { done <- tr.Recv(ctx, 1, coll(0, 1), make([]byte, 4)) }()
	nc.Write(bytes.Repeat([]byte("garbage!"), 8))
	wantPeerErr(t, <-done, 1, comm.ErrProtocol)
	wantPeerErr(t, tr.Send(ctx, 1, coll(0, 1), nil), 1, comm.ErrProtocol)
}

func TestUnexpectedCap(t *testing.T) {
	w := newWorld(t, 2)
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			tr, err := NewWithOptions(ctx, config(w, r, 2, comm.Options{}), Options{MaxUnexpected: 1000})
			if err != nil {
				t.Error(err)
			}
			w.ts[r] = tr
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if err := w.ts[0].Send(ctx, 1, coll(0, 1), make([]byte, 600)); err != nil {
		t.Fatal(err)
	}
	w.ts[0].Send(ctx, 1, coll(0, 2), make([]byte, 600))
	err := w.ts[1].Recv(ctx, 0, coll(5, 1), make([]byte, 1))
	wantPeerErr(t, err, 0, comm.ErrProtocol)
}

// crash cuts tr's connections without a goodbye, as a dying process would.
func crash(tr *Transport) {
	// Hold the write locks while cutting, so that the failure this causes
	// in tr itself cannot send a goodbye on a link not yet cut.
	for _, c := range tr.conns {
		c.wsem <- struct{}{}
	}
	for _, c := range tr.conns {
		if c.nc != nil {
			c.nc.Close()
		}
	}
	for _, c := range tr.conns {
		<-c.wsem
	}
}

func TestPeerCrash(t *testing.T) {
	w := mkMesh(t, 3, comm.Options{})
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, from := range []int{1, 2} {
		wg.Go(func() { errs[i] = w.ts[0].Recv(ctx, from, coll(0, 1), make([]byte, 4)) })
	}
	waitFor(t, "the receives to be posted", func() bool {
		return posted(w.ts[0], 1, coll(0, 1)) && posted(w.ts[0], 2, coll(0, 1))
	})
	start := time.Now()
	crash(w.ts[1])
	wg.Wait()
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v to notice", d)
	}
	wantPeerErr(t, errs[0], 1, comm.ErrPeerLost)
	// Rank 2 noticed the crash too and said goodbye to rank 0, giving the
	// crash as its reason, so the receive from rank 2 fails either way and
	// its error names rank 1, the root cause.
	var pe *comm.PeerError
	if !errors.As(errs[1], &pe) || !(pe.Rank == 1 && errors.Is(errs[1], comm.ErrPeerLost) ||
		pe.Rank == 2 && errors.Is(errs[1], comm.ErrClosed) && strings.Contains(errs[1].Error(), "rank 1")) {
		t.Errorf("receive from rank 2: %v", errs[1])
	}
	for _, r := range []int{0, 2} {
		waitFor(t, "the transport to fail", func() bool { return w.ts[r].Err() != nil })
		wantPeerErr(t, w.ts[r].Err(), 1, comm.ErrPeerLost)
	}
	wantPeerErr(t, w.ts[0].Send(ctx, 2, coll(0, 1), nil), 1, comm.ErrPeerLost)
}

func TestHeartbeat(t *testing.T) {
	opts := comm.Options{PeerTimeout: 300 * time.Millisecond}
	w := mkMesh(t, 2, opts)
	ctx := ctxT(t, 10*time.Second)
	time.Sleep(time.Second)
	for _, tr := range w.ts {
		if err := tr.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.ts[0].Send(ctx, 1, coll(0, 1), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := w.ts[1].Recv(ctx, 0, coll(0, 1), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	// Without heartbeats (a hung peer) the link is lost after the deadline.
	c := w.ts[1].conns[0]
	c.wsem <- struct{}{} // rank 1 can no longer write to rank 0
	defer func() { <-c.wsem }()
	start := time.Now()
	err := w.ts[0].Recv(ctx, 1, coll(0, 2), make([]byte, 1))
	wantPeerErr(t, err, 1, comm.ErrPeerLost)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to notice", d)
	}
}

func TestBadArguments(t *testing.T) {
	w := mkMesh(t, 1, comm.Options{})
	ctx := ctxT(t, time.Second)
	tr := w.ts[0]
	bad := coll(0, 1)
	bad.Op = 0
	for name, err := range map[string]error{
		"rank":      tr.Send(ctx, 1, coll(0, 1), nil),
		"neg rank":  tr.Recv(ctx, -1, coll(0, 1), nil),
		"kind":      tr.Send(ctx, 0, wire.Header{Kind: wire.KindAbort}, nil),
		"op":        tr.Recv(ctx, 0, bad, nil),
		"heartbeat": tr.Recv(ctx, 0, wire.Header{Kind: wire.KindHeartbeat}, nil),
	} {
		if !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestBadFrames: a peer (holding the token) that sends a truncated frame, a
// frame over the size limit, or a frame bigger than the receive it lands in
// makes the receiver fail that peer with an error naming it; nothing is
// written out of bounds and nothing hangs.
func TestBadFrames(t *testing.T) {
	frame := func(h wire.Header) []byte {
		b := make([]byte, wire.HeaderSize)
		h.Encode(b)
		return b
	}
	huge := coll(0, 1)
	huge.Len, huge.Total = wire.MaxFrame+1, wire.MaxFrame+1
	trunc := coll(0, 1)
	trunc.Len, trunc.Total = 20, 20
	cases := []struct {
		name     string
		bytes    []byte
		sentinel error
	}{
		{"truncated payload", append(frame(trunc), 1, 2, 3), comm.ErrPeerLost},
		{"truncated header", frame(coll(0, 1))[:10], comm.ErrPeerLost},
		{"oversized frame", frame(huge), comm.ErrProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 2)
			ctx := ctxT(t, 10*time.Second)
			errs := make(chan error, 1)
			go func() { errs <- w.build(ctx, 2, comm.Options{}, 0)[0] }()
			m := newMesh("tcp", w.job, 1)
			addr, err := w.store.Get(ctx, m.addrKey(0))
			if err != nil {
				t.Fatal(err)
			}
			nc, err := rogue(t, string(addr), token, m, 2, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 20)
			done := make(chan error, 1)
			go func() { done <- w.ts[0].Recv(ctx, 1, coll(0, 1), dst) }()
			nc.Write(tc.bytes)
			nc.Close() // the rogue goes away mid-frame
			select {
			case err := <-done:
				wantPeerErr(t, err, 1, tc.sentinel)
			case <-ctx.Done():
				t.Fatal("receiver hung on a bad frame")
			}
		})
	}
	// A well-formed frame whose message is longer than the posted receive
	// is a mismatch, not an overflow.
	t.Run("longer than receive", func(t *testing.T) {
		w := mkMesh(t, 2, comm.Options{})
		ctx := ctxT(t, 10*time.Second)
		go w.ts[1].Send(ctx, 0, coll(0, 1), make([]byte, 64))
		guard := make([]byte, 32)
		err := w.ts[0].Recv(ctx, 1, coll(0, 1), guard[:16])
		var me *wire.MismatchError
		if !errors.As(err, &me) {
			t.Fatalf("got %v, want a mismatch", err)
		}
		for i, b := range guard {
			if b != 0 {
				t.Fatalf("byte %d beyond the receive was written", i)
			}
		}
	})
}

// TestPartialMesh: with Options.Peers each rank links only with the listed
// ranks; the mesh completes without the others, and they are not
// reachable through it.
func TestPartialMesh(t *testing.T) {
	w := newWorld(t, 4)
	ctx := ctxT(t, 10*time.Second)
	peers := map[int][]int{0: {2, 3}, 1: {1}, 2: {0}, 3: {0, 3}}
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			w.ts[r], errs[r] = NewWithOptions(ctx, config(w, r, 4, comm.Options{}), Options{Peers: peers[r]})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for _, pair := range [][2]int{{0, 2}, {3, 0}, {0, 3}, {1, 1}} {
		from, to := pair[0], pair[1]
		if err := w.ts[from].Send(ctx, to, coll(0, 1), []byte{byte(from)}); err != nil {
			t.Fatalf("%d -> %d: %v", from, to, err)
		}
		got := make([]byte, 1)
		if err := w.ts[to].Recv(ctx, from, coll(0, 1), got); err != nil || got[0] != byte(from) {
			t.Fatalf("%d -> %d: got %v, %v", from, to, got, err)
		}
	}
	for _, pair := range [][2]int{{0, 1}, {2, 3}, {1, 0}} {
		if err := w.ts[pair[0]].Send(ctx, pair[1], coll(0, 2), nil); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%d -> %d (not linked): %v", pair[0], pair[1], err)
		}
	}
	if err := w.ts[2].Recv(ctx, 3, coll(0, 2), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("recv from an unlinked rank: %v", err)
	}
	for _, bad := range [][]int{{5}, {2, 2}} {
		if _, err := NewWithOptions(ctx, config(w, 0, 4, comm.Options{}), Options{Peers: bad}); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("Peers %v: %v", bad, err)
		}
	}
}

// A rank that lists a peer which does not list it back never completes
// its mesh, and says which rank is missing.
func TestPartialMeshAsymmetric(t *testing.T) {
	w := newWorld(t, 3)
	ctx := ctxT(t, 500*time.Millisecond)
	peers := map[int][]int{0: {1, 2}, 1: {0}, 2: {}}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			w.ts[r], errs[r] = NewWithOptions(ctx, config(w, r, 3, comm.Options{}), Options{Peers: peers[r]})
		})
	}
	wg.Wait()
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank(s) [2]") {
		t.Errorf("rank 0: %v, want an error naming rank 2", errs[0])
	}
	if errs[1] != nil || errs[2] != nil {
		t.Errorf("ranks 1, 2: %v, %v", errs[1], errs[2])
	}
}

// TestTransportKit runs the transport test kit (algo/transporttest).
func TestTransportKit(t *testing.T) {
	transporttest.Run(t, transporttest.World{
		New: func(t *testing.T, n int, opts comm.Options) []algo.Transport {
			w := mkMesh(t, n, opts)
			ts := make([]algo.Transport, n)
			for i, tr := range w.ts {
				ts[i] = tr
			}
			return ts
		},
		Box:  func(tr algo.Transport, from int) *mailbox.Box { return tr.(*Transport).conns[from].box },
		Big:  2*wire.MaxFrame + 5,
		Fail: func(tr algo.Transport, err error) { tr.(*Transport).fail(err) },
	})
}

// Helpers of the transport test kit.
var (
	coll        = transporttest.Coll
	p2p         = transporttest.P2P
	pattern     = transporttest.Pattern
	ctxT        = transporttest.Ctx
	waitFor     = transporttest.WaitFor
	wantPeerErr = transporttest.WantPeerErr
)
