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
		b, err := staging.NewBuffer(c.Device(), comm.Float32, 1024)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { staging.FreeBuffer(b) })
		bufs[r] = b
		if ws[r], err = c.AllReduce(ctx, b, comm.Sum); err != nil {
			t.Fatal(err)
		}
	}
	if err := comm.WaitAll(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	// Then rank 1's process dies: its kernels stop and its heartbeats
	// stop; nobody gets an async error.
	cudafake.Vanish(t, lost)
	nccl.StopHeartbeat(cs[lost])
	start := time.Now()
	for r, c := range cs {
		w, err := c.AllReduce(ctx, bufs[r], comm.Sum)
		if err != nil {
			t.Fatal(err)
		}
		ws[r] = w
	}
	for r, w := range ws {
		if r == lost {
			continue
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
