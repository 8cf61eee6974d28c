//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/algo/transporttest"
	"github.com/gdist/gdist/comm/commtest"
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
	dir   string
	ts    []*Transport
	logs  []*logBuf
}

func newWorld(t *testing.T, size int) *world {
	t.Helper()
	w := &world{store: rendezvous.NewMemStore(), job: t.Name(), dir: t.TempDir(), ts: make([]*Transport, size)}
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

func (w *world) config(rank, size int, opts comm.Options) comm.Config {
	return comm.Config{
		Rank: rank, Size: size, Store: w.store, Token: token, Job: w.job,
		Options: opts, Logf: w.logs[rank].Logf,
	}
}

// build builds the transports of the listed ranks concurrently.
func (w *world) build(ctx context.Context, size int, opts comm.Options, o Options, ranks ...int) []error {
	errs := make([]error, size)
	if o.Dir == "" {
		o.Dir = w.dir
	}
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() {
			tr, err := NewWithOptions(ctx, w.config(r, size, opts), o)
			w.ts[r], errs[r] = tr, err
		})
	}
	wg.Wait()
	return errs
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// mkWorld builds a complete world of size ranks.
func mkWorld(t *testing.T, size int, opts comm.Options, o Options) *world {
	t.Helper()
	w := newWorld(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r, err := range w.build(ctx, size, opts, o, all(size)...) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return w
}

func posted(tr *Transport, from int, h wire.Header) bool {
	l := tr.links[from]
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.box.HasPosted(h)
}

func queued(tr *Transport, from int) int64 {
	l := tr.links[from]
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.box.Queued
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, namePrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSendRecvSizes sends messages of many sizes both ways, through a small
// ring, so that records wrap around its end and large messages are split
// into frames that the sender writes while the receiver copies.
func TestSendRecvSizes(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{RingBytes: 64 << 10, FrameBytes: 4 << 10})
	ctx := ctxT(t, 20*time.Second)
	sizes := []int{0, 1, 63, 64, 65, 4095, 4096, 4097, 20000, 1<<20 + 3}
	for i, n := range sizes {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for r, tr := range w.ts {
			for _, p := range []int{1 - r, r} { // the peer and the rank itself
				h := coll(3, uint64(i))
				h.Count = uint64(n)
				wg.Go(func() { errs <- tr.Send(ctx, p, h, pattern(n, byte(r))) })
				wg.Go(func() {
					got := make([]byte, n)
					if err := tr.Recv(ctx, p, h, got); err != nil {
						errs <- err
					} else if !bytes.Equal(got, pattern(n, byte(p))) {
						errs <- fmt.Errorf("size %d: rank %d from %d: wrong data", n, r, p)
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
	}
}

// A sender whose ring is full of messages nobody receives yet is not stuck:
// the receiver's control goroutine drains them into queues.
func TestSendWithoutReceiver(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{RingBytes: 64 << 10})
	ctx := ctxT(t, 10*time.Second)
	n := 300 << 10
	if err := w.ts[0].Send(ctx, 1, p2p(0, 1), pattern(n, 3)); err != nil {
		t.Fatal(err)
	}
	if q := queued(w.ts[1], 0); q < int64(n-64<<10) {
		t.Fatalf("only %d bytes queued", q)
	}
	got := make([]byte, n)
	if err := w.ts[1].Recv(ctx, 0, p2p(0, 1), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(n, 3)) {
		t.Fatal("wrong data")
	}
}

func TestBadArguments(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{})
	ctx := ctxT(t, time.Second)
	tr := w.ts[0]
	bad := coll(0, 1)
	bad.Op = 0
	for name, err := range map[string]error{
		"rank":      tr.Send(ctx, 2, coll(0, 1), nil),
		"neg rank":  tr.Recv(ctx, -1, coll(0, 1), nil),
		"kind":      tr.Send(ctx, 1, wire.Header{Kind: wire.KindAbort}, nil),
		"op":        tr.Recv(ctx, 0, bad, nil),
		"heartbeat": tr.Recv(ctx, 1, wire.Header{Kind: wire.KindHeartbeat}, nil),
	} {
		if !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, o := range map[string]Options{
		"ring not a power of two": {RingBytes: 100 << 10},
		"ring too small":          {RingBytes: 4 << 10},
		"frame too small":         {FrameBytes: 10},
		"ranks without self":      {Ranks: []int{1}},
		"rank out of range":       {Ranks: []int{0, 5}},
		"rank twice":              {Ranks: []int{0, 0}},
	} {
		_, err := NewWithOptions(ctx, w.config(0, 2, comm.Options{}), o)
		if !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A subset of the world can share a segment; the other ranks are not
// reachable through it.
func TestSubset(t *testing.T) {
	w := newWorld(t, 4)
	ctx := ctxT(t, 10*time.Second)
	errs := w.build(ctx, 4, comm.Options{}, Options{Ranks: []int{3, 1}}, 1, 3)
	for _, r := range []int{1, 3} {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	if got := w.ts[1].Ranks(); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("Ranks() = %v", got)
	}
	if err := w.ts[1].Send(ctx, 3, coll(0, 1), []byte{9}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1)
	if err := w.ts[3].Recv(ctx, 1, coll(0, 1), got); err != nil || got[0] != 9 {
		t.Fatal(got, err)
	}
	if err := w.ts[1].Send(ctx, 2, coll(0, 1), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("send to a rank outside the segment: %v", err)
	}
}

func TestRebuildOnOneStore(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{})
	ctx := ctxT(t, 10*time.Second)
	for _, tr := range w.ts {
		tr.Close()
	}
	for r, err := range w.build(ctx, 2, comm.Options{}, Options{}, 0, 1) {
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

func TestMissingPeers(t *testing.T) {
	w := newWorld(t, 3)
	ctx := ctxT(t, 500*time.Millisecond)
	errs := w.build(ctx, 3, comm.Options{}, Options{}, 0, 1)
	// Each rank either times out itself or first sees the other give up
	// (its slot closed with the reason); either way the error names rank 2.
	for r, err := range errs[:2] {
		if err == nil || !strings.Contains(err.Error(), "rank(s) [2]") ||
			!(errors.Is(err, comm.ErrTimeout) || errors.Is(err, comm.ErrAborted)) {
			t.Errorf("rank %d: got %v, want a timeout naming rank 2", r, err)
		}
	}
	if f := segFiles(t, w.dir); len(f) != 0 {
		t.Errorf("segment files left after a failed setup: %v", f)
	}
}

// TestWrongTokenRefused: a rank with another token cannot find the segment
// or join it; the file is private to this user, named from the token, and
// a process that opens it anyway (listing the directory) and claims a slot
// without the token is refused by the others.
func TestWrongTokenRefused(t *testing.T) {
	w := newWorld(t, 2)
	ctx := ctxT(t, 10*time.Second)
	errs := make(chan error, 1)
	go func() { errs <- w.build(ctx, 2, comm.Options{}, Options{}, 0)[0] }()
	var path string
	waitFor(t, "the segment file", func() bool {
		f := segFiles(t, w.dir)
		if len(f) == 1 {
			path = f[0]
		}
		return path != ""
	})
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("segment mode %v, want 0600", st.Mode())
	}

	// A rank holding another token is refused before it touches the file.
	cfg := w.config(1, 2, comm.Options{})
	cfg.Token = []byte("wrong")
	_, err = NewWithOptions(ctx, cfg, Options{Dir: w.dir})
	if !errors.Is(err, comm.ErrAuth) {
		t.Fatalf("rank with the wrong token: %v", err)
	}
	var si segInfo
	b, err := w.store.Get(ctx, "shm/"+w.job+"/1/0/seg")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &si); err != nil {
		t.Fatal(err)
	}
	if filepath.Join(w.dir, segName([]byte("wrong"), si.Nonce, si.PID)) == path {
		t.Fatal("the segment name does not depend on the token")
	}

	// A process of this user that opens the file by listing the directory
	// and claims rank 1's slot without the token is refused.
	g := geometry{n: 2, ringBytes: si.Ring, ctrlBytes: si.Ctrl, areaBytes: si.Area}
	seg, err := openSegment(path, g, 2, si.Nonce, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	off := g.slotOff(1)
	atomic.StoreUint64(seg.u64(off+slotPid), uint64(os.Getpid()))
	copy(seg.mem[off+slotProof:], bytes.Repeat([]byte{1}, 32))
	atomic.StoreUint32(seg.u32(off+slotState), stateAttached)
	atomic.AddUint32(seg.u32(hdrAttached), 1)
	seg.unmap()
	err = <-errs
	wantPeerErr(t, err, 1, comm.ErrAuth)
	if f := segFiles(t, w.dir); len(f) != 0 {
		t.Errorf("segment files left: %v", f)
	}
}

func TestHostMismatch(t *testing.T) {
	w := newWorld(t, 2)
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() {
			_, errs[r] = NewWithOptions(ctx, w.config(r, 2, comm.Options{}), Options{Dir: w.dir, HostID: fmt.Sprintf("host%d", r)})
		})
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), `"host1"`) || !strings.Contains(errs[1].Error(), `"host0"`) {
		t.Errorf("rank 1: %v, want an error naming both hosts", errs[1])
	}
	// Rank 0 hears of it at once instead of waiting for its timeout.
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1") {
		t.Errorf("rank 0: %v", errs[0])
	}
	if ctx.Err() != nil {
		t.Error("setup waited for the deadline")
	}
}

// crash stops tr's control goroutine without a goodbye, as a hung or dead
// process in this same pid would: its heartbeats stop.
func crash(tr *Transport) {
	tr.stopCtrl.Store(true)
	ring(tr.ctrlBell)
	<-tr.ctrlDone
}

func TestHeartbeat(t *testing.T) {
	opts := comm.Options{PeerTimeout: 300 * time.Millisecond}
	w := mkWorld(t, 3, opts, Options{})
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
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, from := range []int{1, 2} {
		wg.Go(func() { errs[i] = w.ts[0].Recv(ctx, from, coll(0, 2), make([]byte, 4)) })
	}
	waitFor(t, "the receives to be posted", func() bool {
		return posted(w.ts[0], 1, coll(0, 2)) && posted(w.ts[0], 2, coll(0, 2))
	})
	start := time.Now()
	crash(w.ts[1])
	wg.Wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to notice", d)
	}
	wantPeerErr(t, errs[0], 1, comm.ErrPeerLost)
	// Rank 2 noticed too, and its goodbye names rank 1; or rank 0 failed
	// first. Either way the error names rank 1, the root cause.
	if !strings.Contains(errs[1].Error(), "rank 1") {
		t.Errorf("receive from rank 2: %v", errs[1])
	}
	for _, r := range []int{0, 2} {
		waitFor(t, "the transport to fail", func() bool { return w.ts[r].Err() != nil })
		wantPeerErr(t, w.ts[r].Err(), 1, comm.ErrPeerLost)
	}
	wantPeerErr(t, w.ts[0].Send(ctx, 2, coll(0, 3), nil), 1, comm.ErrPeerLost)
}

// A sender blocked on a full ring (the receiver hung: nothing drains it)
// fails once the receiver says goodbye, with the receiver's reason.
func TestGoodbyeReleasesBlockedSender(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{RingBytes: 64 << 10})
	ctx := ctxT(t, 10*time.Second)
	crash(w.ts[1])
	done := make(chan error, 1)
	go func() { done <- w.ts[0].Send(ctx, 1, p2p(0, 1), make([]byte, 1<<20)) }()
	select {
	case err := <-done:
		t.Fatalf("send into a full ring returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	w.ts[1].goodbye("going away")
	select {
	case err := <-done:
		wantPeerErr(t, err, 1, comm.ErrClosed)
		if !strings.Contains(err.Error(), "going away") {
			t.Errorf("error lacks the reason: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("sender hung after the receiver said goodbye")
	}
}

// TestBadRecords: a peer (holding the token) that writes malformed records
// into its ring makes the receiver fail that peer with a protocol error
// naming it; nothing is written out of bounds and nothing hangs.
func TestBadRecords(t *testing.T) {
	corrupt := map[string]func(rec []byte){
		"record length":    func(rec []byte) { binary.LittleEndian.PutUint32(rec, 7) },
		"longer than ring": func(rec []byte) { binary.LittleEndian.PutUint32(rec, 1<<30) },
		"record type":      func(rec []byte) { rec[4] = 99 },
		"header magic":     func(rec []byte) { rec[64] ^= 0xff },
		"frame length": func(rec []byte) {
			h, _ := wire.Decode(rec[64:128])
			h.Len, h.Total = 1<<20, 1<<20
			h.Encode(rec[64:128])
		},
	}
	for name, f := range corrupt {
		t.Run(name, func(t *testing.T) {
			w := mkWorld(t, 2, comm.Options{}, Options{})
			ctx := ctxT(t, 10*time.Second)
			// Rank 1 writes a good record, then corrupts it before
			// publishing it (by hand, as a bad peer would).
			l := w.ts[1].links[0]
			h := coll(0, 1)
			h.Total, h.Len = 20, 20
			rec := l.out.data[:dataRecHdr+64]
			binary.LittleEndian.PutUint32(rec, uint32(len(rec)))
			rec[4] = recData
			h.Encode(rec[64:128])
			f(rec)
			atomic.StoreUint64(l.out.tail, uint64(len(rec)))
			ring(l.peerDoorbell)
			guard := make([]byte, 64)
			err := w.ts[0].Recv(ctx, 1, coll(0, 1), guard[:20])
			wantPeerErr(t, err, 1, comm.ErrProtocol)
			for i, b := range guard {
				if b != 0 {
					t.Fatalf("byte %d of the receive buffer was written", i)
				}
			}
		})
	}
}

// Without an explicit size, rings shrink as the ranks sharing a segment
// grow, so that the segment stays bounded.
func TestRingSizing(t *testing.T) {
	t.Setenv("GDIST_SHM_RING_BYTES", "")
	for _, c := range []struct{ n, want int }{{2, 256 << 10}, {32, 256 << 10}, {64, 64 << 10}, {256, 64 << 10}} {
		o, err := Options{}.withDefaults(comm.Config{Rank: 0, Size: c.n})
		if err != nil {
			t.Fatal(err)
		}
		if o.RingBytes != c.want {
			t.Errorf("%d ranks: ring of %d bytes, want %d", c.n, o.RingBytes, c.want)
		}
	}
	t.Setenv("GDIST_SHM_RING_BYTES", "131072")
	if o, err := (Options{}).withDefaults(comm.Config{Rank: 0, Size: 2}); err != nil || o.RingBytes != 128<<10 {
		t.Errorf("GDIST_SHM_RING_BYTES ignored: %d, %v", o.RingBytes, err)
	}
	t.Setenv("GDIST_SHM_RING_BYTES", "lots")
	if _, err := (Options{}).withDefaults(comm.Config{Rank: 0, Size: 2}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("bad GDIST_SHM_RING_BYTES: %v", err)
	}
	if _, err := (Options{}).withDefaults(comm.Config{Rank: 0, Size: maxLocal + 1}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("%d ranks accepted", maxLocal+1)
	}
}

// collect returns an fn for RecvPayload that assembles the pieces into a
// buffer and checks that they come in order.
func collect(t *testing.T, n int) (buf []byte, fn func(off int, p []byte), pieces *int) {
	buf = make([]byte, n)
	next, count := 0, 0
	return buf, func(off int, p []byte) {
		if off != next {
			t.Errorf("piece at %d, want %d", off, next)
		}
		next = off + copy(buf[off:], p)
		count++
	}, &count
}

// TestRecvPayload: RecvPayload hands over every byte in order, in pieces
// of at most a frame, whether the receive was posted before the message
// arrived (pieces straight from the ring), after (queued copies), or from
// the rank itself; a message of another length is a mismatch, and fn is
// never called for it.
func TestRecvPayload(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{RingBytes: 64 << 10, FrameBytes: 4 << 10})
	ctx := ctxT(t, 10*time.Second)
	n := 100<<10 + 3
	for i, mode := range []string{"posted", "queued", "self"} {
		t.Run(mode, func(t *testing.T) {
			h := p2p(0, uint64(i))
			from, to := 0, 1
			if mode == "self" {
				from = 1
			}
			buf, fn, pieces := collect(t, n)
			done := make(chan error, 1)
			recv := func() { done <- w.ts[1].RecvPayload(ctx, from, h, n, fn) }
			if mode == "posted" {
				go recv()
				waitFor(t, "the receive to be posted", func() bool { return posted(w.ts[1], from, h) })
			}
			sent := make(chan error, 1)
			go func() { sent <- w.ts[from].Send(ctx, to, h, pattern(n, byte(i))) }()
			if mode != "posted" {
				// The whole message is sent (what did not fit in the
				// ring is queued) before the receive is posted.
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
				if mode == "queued" && queued(w.ts[1], 0) == 0 {
					t.Fatal("nothing queued")
				}
				sent <- nil
				go recv()
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, pattern(n, byte(i))) {
				t.Fatal("wrong data")
			}
			if mode != "self" && *pieces < n/(4<<10) {
				t.Errorf("%d pieces for %d bytes in 4 KiB frames", *pieces, n)
			}
		})
	}
	called := false
	go w.ts[0].Send(ctx, 1, p2p(0, 9), make([]byte, 10))
	err := w.ts[1].RecvPayload(ctx, 0, p2p(0, 9), 11, func(int, []byte) { called = true })
	var me *wire.MismatchError
	if !errors.As(err, &me) || called {
		t.Fatalf("wrong length: %v (fn called: %v)", err, called)
	}
	if err := w.ts[1].RecvPayload(ctx, 0, p2p(0, 9), -1, func(int, []byte) {}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("negative length: %v", err)
	}
}

// A RecvPayload whose ctx ends while fn runs returns only after fn has
// returned.
func TestRecvPayloadCancelWaitsForFn(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{})
	ctx := ctxT(t, 10*time.Second)
	rctx, cancel := context.WithCancel(ctx)
	var inFn, returned atomic.Bool
	h := p2p(0, 1)
	done := make(chan error, 1)
	go func() {
		done <- w.ts[1].RecvPayload(rctx, 0, h, 2<<20, func(off int, p []byte) {
			inFn.Store(true)
			if off == 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if returned.Load() {
				t.Error("fn running after RecvPayload returned")
			}
			inFn.Store(false)
		})
	}()
	waitFor(t, "the receive to be posted", func() bool { return posted(w.ts[1], 0, h) })
	go w.ts[0].Send(ctx, 1, h, make([]byte, 2<<20))
	waitFor(t, "fn to run", inFn.Load)
	cancel()
	err := <-done
	returned.Store(true)
	if inFn.Load() {
		t.Fatal("RecvPayload returned while fn ran")
	}
	if err == nil {
		return // it finished before the cancel took effect
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestTransportKit runs the transport test kit (algo/transporttest) over
// small rings, so that its messages take many frames and more than a ring
// holds; setting up leaves no segment file behind.
func TestTransportKit(t *testing.T) {
	transporttest.Run(t, transporttest.World{
		New: func(t *testing.T, n int, opts comm.Options) []algo.Transport {
			w := mkWorld(t, n, opts, Options{RingBytes: 64 << 10, FrameBytes: 8 << 10})
			if f := segFiles(t, w.dir); len(f) != 0 {
				t.Errorf("segment files left after setup: %v", f)
			}
			ts := make([]algo.Transport, n)
			for i, tr := range w.ts {
				ts[i] = tr
			}
			return ts
		},
		Box:  func(tr algo.Transport, from int) *mailbox.Box { return tr.(*Transport).links[from].box },
		Big:  100<<10 + 5,
		Lazy: true,
		Fail: func(tr algo.Transport, err error) { tr.(*Transport).Fail(err) },
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
