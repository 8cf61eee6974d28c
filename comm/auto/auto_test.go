package auto

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/internal/wire"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/comm/shm"
)

var token = []byte("test-token")

// build builds the auto transports of a world of n ranks in this process,
// rank r claiming to run on host hostOf(r).
func build(t testing.TB, n int, opts comm.Options, hostOf func(r int) string) []*Transport {
	t.Helper()
	store := rendezvous.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts := make([]*Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			ts[r], errs[r] = NewWithOptions(ctx, comm.Config{
				Rank: r, Size: n, Store: store, Token: token, Job: t.Name(), Options: opts,
				Logf: func(string, ...any) {},
			}, Options{HostID: hostOf(r)})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, tr := range ts {
			if tr != nil {
				tr.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return ts
}

// pairs puts ranks 0 and 1 on one host, 2 and 3 on another, and so on.
func pairs(r int) string { return fmt.Sprintf("host%d", r/2) }

func comms(ts []*Transport) []comm.Comm {
	out := make([]comm.Comm, len(ts))
	for i, tr := range ts {
		out[i] = algo.NewComm(tr, comm.Options{})
	}
	return out
}

// TestConformanceOneHost runs the suite through the registered "auto"
// backend, every rank on this host: shared memory only.
func TestConformanceOneHost(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	cfg := commtest.Config{Sizes: []int{1, 3}}
	if testing.Short() {
		cfg.Sizes = []int{1}
	}
	world := commtest.RegistryWorld("auto", commtest.OneStore(func() comm.Store { return rendezvous.NewMemStore() }),
		comm.Config{Token: token, Logf: func(string, ...any) {}})
	commtest.Suite(t, world, cfg)
}

// TestConformanceMixed runs the suite on jobs spread over fake hosts (two
// ranks per host): with three ranks, a pair shares memory and one rank is
// alone on its host; with four, two pairs; TCP links the hosts.
func TestConformanceMixed(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	cfg := commtest.Config{Sizes: []int{3, 4}}
	commtest.Suite(t, func(t testing.TB, n int) []comm.Comm {
		return comms(build(t, n, comm.Options{}, pairs))
	}, cfg)
}

// TestConformanceHier runs the suite with the hierarchical all-reduce
// forced (GDIST_ALGO=all_reduce=hier) on two fake hosts of two ranks each
// (shared memory inside a host, TCP across), and, without -short, on hosts
// of two ranks and one (its leader plan). The Comms know the layout.
func TestConformanceHier(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	t.Setenv("GDIST_ALGO", "all_reduce=hier")
	cfg := commtest.Config{Sizes: []int{4, 3}}
	if testing.Short() {
		cfg.Sizes = []int{4}
	}
	commtest.Suite(t, func(t testing.TB, n int) []comm.Comm {
		cs := comms(build(t, n, comm.Options{}, pairs))
		for r, c := range cs {
			l := c.(*algo.Comm).Layout()
			if l.Hosts() != (n+1)/2 || l.Host(r) != r/2 {
				t.Fatalf("rank %d of %d: layout of %d hosts, this rank on host %d", r, n, l.Hosts(), l.Host(r))
			}
		}
		return cs
	}, cfg)
}

func TestRouting(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	ts := build(t, 5, comm.Options{}, pairs)
	for r, tr := range ts {
		var wantLocal, wantRemote []int
		for q := range 5 {
			if q/2 == r/2 {
				wantLocal = append(wantLocal, q)
			} else {
				wantRemote = append(wantRemote, q)
			}
		}
		if !slices.Equal(tr.Local(), wantLocal) || !slices.Equal(tr.Remote(), wantRemote) {
			t.Errorf("rank %d: local %v remote %v, want %v and %v", r, tr.Local(), tr.Remote(), wantLocal, wantRemote)
		}
		if tr.tcp == nil || !slices.Equal(tr.shm.Ranks(), wantLocal) {
			t.Errorf("rank %d: parts shm %v tcp %v", r, tr.shm.Ranks(), tr.tcp)
		}
		if h := tr.Hosts(); h[4] != "host2" || h[r] != pairs(r) {
			t.Errorf("rank %d: hosts %v", r, h)
		}
	}
	// All on one host: no TCP mesh at all.
	one := build(t, 3, comm.Options{}, func(int) string { return "here" })
	for r, tr := range one {
		if tr.tcp != nil || len(tr.Remote()) != 0 || len(tr.shm.Ranks()) != 3 {
			t.Errorf("rank %d: one host, but tcp %v remote %v", r, tr.tcp, tr.Remote())
		}
	}
	// The host id defaults to shm.HostID, which GDIST_HOST_ID overrides.
	t.Setenv("GDIST_HOST_ID", "pretend")
	if got := shm.HostID(); got != "pretend" {
		t.Errorf("HostID() = %q with GDIST_HOST_ID set", got)
	}
}

func coll(group, seq uint64) wire.Header {
	return wire.Header{Kind: wire.KindColl, Op: wire.OpAllReduce, DType: 1, Red: 1, Group: group, Seq: seq, Count: 5}
}

// When the shared-memory part fails (a local peer lost), the whole
// transport fails: a pending receive from a remote rank (TCP) ends with
// the same error, naming the lost rank, and so do later ops.
func TestPartsFailTogether(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	ts := build(t, 3, comm.Options{PeerTimeout: 400 * time.Millisecond}, pairs) // 0, 1 | 2
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pending := make(chan error, 1)
	go func() { pending <- ts[0].Recv(ctx, 2, coll(0, 1), make([]byte, 4)) }()
	time.Sleep(20 * time.Millisecond)
	lost := &comm.PeerError{Rank: 1, Err: fmt.Errorf("%w: test", comm.ErrPeerLost)}
	ts[0].shm.Fail(lost)
	select {
	case err := <-pending:
		if !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), "rank 1") {
			t.Fatalf("pending TCP receive: %v, want the shm part's failure", err)
		}
	case <-ctx.Done():
		t.Fatal("the pending TCP receive hung after the shm part failed")
	}
	if err := ts[0].Send(ctx, 2, coll(0, 2), nil); !errors.Is(err, comm.ErrPeerLost) {
		t.Fatalf("later send: %v", err)
	}
	if err := ts[0].Err(); !errors.Is(err, comm.ErrPeerLost) {
		t.Fatalf("Err() = %v", err)
	}
	// Rank 1 (the local peer) got rank 0's goodbye carrying the reason.
	err := ts[1].Recv(ctx, 0, coll(0, 1), make([]byte, 4))
	if !errors.Is(err, comm.ErrClosed) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("rank 1: %v", err)
	}
}

// Abort reaches local and remote peers.
func TestAbortMixed(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	ts := build(t, 3, comm.Options{}, pairs) // 0, 1 | 2
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- ts[1].Recv(ctx, 2, coll(7, 1), nil) }()
	go func() { errs <- ts[2].Recv(ctx, 1, coll(7, 1), nil) }()
	time.Sleep(20 * time.Millisecond)
	ts[0].Abort(7, []int{1, 2}, errors.New("boom"))
	for range 2 {
		if err := <-errs; !errors.Is(err, comm.ErrAborted) || !strings.Contains(err.Error(), "rank 0 aborted: boom") {
			t.Errorf("pending receive: %v", err)
		}
	}
	if err := ts[0].Recv(ctx, 2, coll(7, 2), nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("local receive of the aborted group: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	ts := build(t, 2, comm.Options{}, pairs)
	ctx := context.Background()
	if err := ts[0].Send(ctx, 2, coll(0, 1), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("send out of range: %v", err)
	}
	if err := ts[0].Recv(ctx, -1, coll(0, 1), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("recv out of range: %v", err)
	}
	if _, err := New(ctx, comm.Config{Rank: 0, Size: 2}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("no store: %v", err)
	}
}

// RecvPayload hands over the message from a rank on this host (in place)
// and from one elsewhere (through a buffer) alike.
func TestRecvPayload(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	ts := build(t, 3, comm.Options{}, pairs) // 0, 1 | 2
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 300<<10 + 1
	for _, from := range []int{1, 2, 0} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(i*7 + from)
		}
		h := coll(3, uint64(from))
		go ts[from].Send(ctx, 0, h, msg)
		got := make([]byte, n)
		next := 0
		err := ts[0].RecvPayload(ctx, from, h, n, func(off int, p []byte) {
			if off != next {
				t.Errorf("from %d: piece at %d, want %d", from, off, next)
			}
			next = off + copy(got[off:], p)
		})
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		if string(got) != string(msg) {
			t.Fatalf("from %d: wrong data", from)
		}
	}
	if err := ts[0].RecvPayload(ctx, 5, coll(3, 9), 1, func(int, []byte) {}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("rank out of range: %v", err)
	}
}

// TestAllocOneHost: comm.Alloc'd buffers on the "auto" backend with every
// rank on this host: the shared-memory part's zero-copy all-reduce.
func TestAllocOneHost(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	t.Setenv("GDIST_ZEROCOPY_MIN", "1")
	cfg := commtest.AllocConfig{Config: commtest.Config{Sizes: []int{2, 3}}, ZeroCopy: true}
	if testing.Short() {
		cfg.Sizes = []int{2}
	}
	world := commtest.RegistryWorld("auto", commtest.OneStore(func() comm.Store { return rendezvous.NewMemStore() }),
		comm.Config{Token: token, Logf: func(string, ...any) {}})
	commtest.AllocSuite(t, world, cfg)
}

// TestAllocMixedHosts: on a Comm spanning hosts, comm.Alloc gives ordinary
// memory and all-reduce takes the ordinary path.
func TestAllocMixedHosts(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	t.Setenv("GDIST_ZEROCOPY_MIN", "1")
	cfg := commtest.AllocConfig{Config: commtest.Config{Sizes: []int{3}}}
	commtest.AllocSuite(t, func(t testing.TB, n int) []comm.Comm {
		return comms(build(t, n, comm.Options{}, pairs))
	}, cfg)
}
