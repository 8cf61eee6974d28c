//go:build cgo

package nccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/internal/hangtest"
)

// Issue 26: NCCL connects on demand, inside the launch: the first
// send/recv between two ranks blocks in ncclGroupEnd until the peer
// launches its side (the fake does the same). The operation's timeout and
// the failure watch must therefore cover the launch, and an abort must end
// it, or a peer that never comes hangs the call.

// connectedPair is a world of two bare Comms whose send/recv channels
// exist (ConnectPeers) but have never carried a message: the next send or
// receive launch connects.
func connectedPair(t *testing.T, opts comm.Options) ([]*nccl.Comm, comm.Buffer) {
	t.Helper()
	cudafake.RequireFake(t)
	cs := bareWorld(t, 2, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for r, c := range cs {
		go func() { errs <- c.ConnectPeers(ctx, []int{1 - r}) }()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	b := devBuffer(t, cs[0].Device(), comm.Float32, 8)
	return cs, b
}

// A send whose receiver never posts a receive times out (the timeout
// started before the launch, which was blocked connecting), naming the
// receiver.
func TestSendTimesOutConnecting(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cs, b := connectedPair(t, comm.Options{Timeout: timeout, PeerTimeout: time.Minute})
	start := time.Now()
	err := hangtest.Within(t, 20*timeout, "a send to a rank that never receives", func() error {
		return comm.Run(context.Background())(cs[0].Send(context.Background(), b, 1, 0))
	})
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "rank 1 never launched") {
		t.Fatalf("after %v: %v, want a timeout naming rank 1", time.Since(start), err)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// A peer that dies before it receives: the heartbeats name it within the
// peer timeout, and the abort ends the sender's blocked launch.
func TestLostPeerEndsBlockedLaunch(t *testing.T) {
	const peerTimeout = 300 * time.Millisecond
	cs, b := connectedPair(t, comm.Options{Timeout: time.Minute, PeerTimeout: peerTimeout})
	nccl.StopHeartbeat(cs[1])
	start := time.Now()
	err := hangtest.Within(t, 20*peerTimeout, "a send to a lost rank", func() error {
		return comm.Run(context.Background())(cs[0].Send(context.Background(), b, 1, 0))
	})
	var pe *comm.PeerError
	if !errors.As(err, &pe) || pe.Rank != 1 {
		t.Fatalf("after %v: %v, want a *comm.PeerError naming rank 1", time.Since(start), err)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// Close while a collective's launch is blocked connecting (a gather whose
// peer never calls it) ends the launch: the call returns, its Work fails
// with comm.ErrClosed, and Close returns.
func TestCloseEndsBlockedLaunch(t *testing.T) {
	cs, b := connectedPair(t, comm.Options{Timeout: time.Minute, PeerTimeout: time.Minute})
	dst := devBuffer(t, cs[0].Device(), comm.Float32, 16)
	time.AfterFunc(200*time.Millisecond, func() { cs[0].Close() })
	err := hangtest.Within(t, 10*time.Second, "a gather whose peer never calls it, after Close", func() error {
		return comm.Run(context.Background())(cs[0].Gather(context.Background(), dst, b, 0))
	})
	if !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("gather after Close: %v, want comm.ErrClosed", err)
	}
	if err := hangtest.Within(t, 10*time.Second, "Close", cs[0].Close); err != nil {
		t.Fatal(err)
	}
}
