package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Issue 17, item 3: send/recv with the pipeline's pattern (two tags per
// micro-batch, M micro-batches, activations one way and gradients the
// other, receives posted ahead, tags reused every step) makes a bounded
// number of NCCL communicators: one per Comm for the collectives, and two
// per pair of ranks that exchange messages (one per direction), not one per
// (sender, receiver, tag), which made 2M per stage boundary.
func TestP2PCommunicators(t *testing.T) {
	cudafake.RequireFake(t)
	const n, M, steps = 3, 6, 2
	cudafake.ResetCommInits(t)
	cs := newWorld(t, n, comm.Options{})
	if got := cudafake.CommInits(t); got != n {
		t.Fatalf("the world Comm of %d ranks made %d communicators, want %d (one per rank)", n, got, n)
	}
	cudafake.ResetCommInits(t)
	tagF := func(i int) int { return 2 * i }
	tagB := func(i int) int { return 2*i + 1 }
	val := func(step, stage, i, kind int) float32 { return float32(step*10000 + stage*1000 + i*10 + kind) }
	err := commtest.RunRanks(context.Background(), cs, 30*time.Second, func(ctx context.Context, c comm.Comm) error {
		s := c.Rank() // stage s of a pipeline of n stages
		for step := 0; step < steps; step++ {
			var ws []comm.Work
			fwd := make([][]float32, M)
			bwd := make([][]float32, M)
			var rf, rb []comm.Work
			for i := 0; i < M; i++ { // receives posted ahead
				fwd[i], bwd[i] = []float32{-1, -1}, []float32{-1, -1}
				if s > 0 {
					w, err := c.Recv(ctx, comm.FromSlice(fwd[i]), s-1, tagF(i))
					if err != nil {
						return err
					}
					rf = append(rf, w)
				}
				if s < n-1 {
					w, err := c.Recv(ctx, comm.FromSlice(bwd[i]), s+1, tagB(i))
					if err != nil {
						return err
					}
					rb = append(rb, w)
				}
			}
			for i := 0; i < M; i++ {
				if s > 0 {
					if err := rf[i].Wait(ctx); err != nil {
						return err
					}
					if want := val(step, s-1, i, 0); fwd[i][0] != want || fwd[i][1] != want {
						return fmt.Errorf("step %d: activation %d from stage %d: got %v, want %v", step, i, s-1, fwd[i], want)
					}
				}
				if s < n-1 {
					v := val(step, s, i, 0)
					w, err := c.Send(ctx, comm.FromSlice([]float32{v, v}), s+1, tagF(i))
					if err != nil {
						return err
					}
					ws = append(ws, w)
				}
			}
			for i := M - 1; i >= 0; i-- {
				if s < n-1 {
					if err := rb[i].Wait(ctx); err != nil {
						return err
					}
					if want := val(step, s+1, i, 1); bwd[i][0] != want || bwd[i][1] != want {
						return fmt.Errorf("step %d: gradient %d from stage %d: got %v, want %v", step, i, s+1, bwd[i], want)
					}
				}
				if s > 0 {
					v := val(step, s, i, 1)
					w, err := c.Send(ctx, comm.FromSlice([]float32{v, v}), s-1, tagB(i))
					if err != nil {
						return err
					}
					ws = append(ws, w)
				}
			}
			if err := comm.WaitAll(ctx, ws...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// n-1 stage boundaries, two directions each, two ranks per communicator.
	if got, want := cudafake.CommInits(t), (n-1)*2*2; got > want {
		t.Errorf("send/recv of %d tags over %d stage boundaries made %d communicators, want at most %d (one per direction and pair of ranks)", 2*M, n-1, got, want)
	}
}

// ConnectPeers (comm.PeerConnector, which pipeline.New calls for a stage's
// neighbours) makes the send/recv communicators at setup, before any
// operation is in flight, pair by pair in one order all ranks share; the
// messages then make none.
func TestConnectPeers(t *testing.T) {
	cudafake.RequireFake(t)
	const n = 4
	cs := newWorld(t, n, comm.Options{})
	cudafake.ResetCommInits(t)
	err := commtest.RunRanks(context.Background(), cs, 30*time.Second, func(ctx context.Context, c comm.Comm) error {
		pc, ok := c.(comm.PeerConnector)
		if !ok {
			return fmt.Errorf("%T is not a comm.PeerConnector", c)
		}
		s := c.Rank()
		var peers []int
		if s < n-1 {
			peers = append(peers, s+1) // out of order on purpose
		}
		if s > 0 {
			peers = append(peers, s-1)
		}
		return pc.ConnectPeers(ctx, append(peers, s))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cudafake.CommInits(t), (n-1)*2*2; got != want {
		t.Fatalf("ConnectPeers of %d stages made %d communicators, want %d", n, got, want)
	}
	err = commtest.RunRanks(context.Background(), cs, 30*time.Second, func(ctx context.Context, c comm.Comm) error {
		s := c.Rank()
		var ws []comm.Work
		for _, p := range []int{s - 1, s + 1} {
			if p < 0 || p >= n {
				continue
			}
			w, err := c.Send(ctx, comm.FromSlice([]int32{int32(s)}), p, 5)
			if err != nil {
				return err
			}
			ws = append(ws, w)
			got := []int32{-1}
			if err := comm.Run(ctx)(c.Recv(ctx, comm.FromSlice(got), p, 5)); err != nil {
				return err
			}
			if got[0] != int32(p) {
				return fmt.Errorf("rank %d from rank %d: %d", s, p, got[0])
			}
		}
		return comm.WaitAll(ctx, ws...)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cudafake.CommInits(t), (n-1)*2*2; got != want {
		t.Errorf("messages after ConnectPeers made %d more communicators", got-want)
	}
	if err := cs[0].(comm.PeerConnector).ConnectPeers(context.Background(), []int{n}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("ConnectPeers to rank %d of %d: %v", n, n, err)
	}
}
