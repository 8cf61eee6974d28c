package nccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// devBuffer is staging.NewBuffer(device, dt, n) for t: it fails t if the
// buffer cannot be made and frees it when t ends.
func devBuffer(t testing.TB, device int, dt comm.DType, n int) comm.Buffer {
	t.Helper()
	b, err := staging.NewBuffer(device, dt, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { staging.FreeBuffer(b) })
	return b
}

// bareWorld builds n bare NCCL Comms (device buffers only), rank r on GPU r.
func bareWorld(t *testing.T, n int, opts comm.Options) []*nccl.Comm {
	t.Helper()
	if n > cuda.DeviceCount() {
		t.Skipf("world size %d needs %d GPUs", n, n)
	}
	st := stores(t, n)
	cs := make([]*nccl.Comm, n)
	errs := make(chan error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for r := range cs {
		go func() {
			var err error
			cs[r], err = nccl.New(ctx, comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Store: st[r],
				Job: t.Name(), Options: opts})
			errs <- err
		}()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// Issue 17, item 9: a rank that vanishes (its process dies) over NVLink,
// P2P or shared memory gives the others no NCCL asynchronous error: their
// kernels wait for it forever. The host-side heartbeat notices within the
// peer timeout, aborts the communicators, and the pending operations fail
// naming the lost rank, long before the operation timeout.
func TestVanishedPeer(t *testing.T) {
	cudafake.RequireFake(t)
	const n, lost = 3, 1
	const peerTimeout = 300 * time.Millisecond
	cs := bareWorld(t, n, comm.Options{PeerTimeout: peerTimeout, Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	bufs := make([]comm.Buffer, n)
	ws := make([]comm.Work, n)
	for r, c := range cs {
		bufs[r] = devBuffer(t, c.Device(), comm.Float32, 1024)
		var err error
		if ws[r], err = c.AllReduce(ctx, bufs[r], comm.Sum); err != nil {
			t.Fatal(err)
		}
	}
	if err := comm.WaitAll(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	// A sub-group of all the ranks, split off the world.
	subs := make([]comm.Comm, n)
	errs := make(chan error, n)
	for r, c := range cs {
		go func() {
			var err error
			subs[r], err = c.Split(ctx, 0, r)
			errs <- err
		}()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Then rank 1's process dies: its kernels stop and its heartbeats
	// stop; nobody gets an async error.
	cudafake.Vanish(t, lost)
	nccl.StopHeartbeat(cs[lost])
	start := time.Now()
	subWork := make([]comm.Work, n)
	for r, c := range cs {
		w, err := c.AllReduce(ctx, bufs[r], comm.Sum)
		if err != nil {
			t.Fatal(err)
		}
		ws[r] = w
		sb := devBuffer(t, c.Device(), comm.Float32, 16)
		if subWork[r], err = subs[r].AllReduce(ctx, sb, comm.Max); err != nil {
			t.Fatal(err)
		}
	}
	for r, w := range ws {
		if r == lost {
			continue
		}
		if err := subWork[r].Wait(ctx); !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("rank %d: sub-group all_reduce: %v, want an error wrapping comm.ErrPeerLost naming rank %d", r, err, lost)
		}
		err := w.Wait(ctx)
		took := time.Since(start)
		var pe *comm.PeerError
		if !errors.Is(err, comm.ErrPeerLost) || !errors.As(err, &pe) || pe.Rank != lost || !strings.Contains(err.Error(), "rank 1") {
			t.Fatalf("rank %d after %v: %v, want an error wrapping comm.ErrPeerLost naming rank %d", r, took.Round(time.Millisecond), err, lost)
		}
		if took > 10*peerTimeout {
			t.Errorf("rank %d noticed the lost rank after %v (peer timeout %v)", r, took, peerTimeout)
		}
		t.Logf("rank %d: after %v: %v", r, took.Round(time.Millisecond), err)
	}
}

// NCCL never tells the other ranks that one aborted its communicator: the
// failure is published through the store, so a peer's pending operation
// fails at once with comm.ErrAborted quoting the cause, not at its timeout.
func TestAbortReachesPeers(t *testing.T) {
	cudafake.RequireFake(t)
	cs := bareWorld(t, 2, comm.Options{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b := devBuffer(t, cs[1].Device(), comm.Float32, 8)
	w, err := cs[1].AllReduce(ctx, b, comm.Sum) // rank 0 never joins it
	if err != nil {
		t.Fatal(err)
	}
	comm.Abort(cs[0], errors.New("rank 0's loss is NaN"))
	err = w.Wait(ctx)
	if !errors.Is(err, comm.ErrAborted) || !strings.Contains(err.Error(), "rank 0's loss is NaN") || ctx.Err() != nil {
		t.Fatalf("rank 1 after rank 0 aborted: %v, want comm.ErrAborted quoting the cause", err)
	}
}
