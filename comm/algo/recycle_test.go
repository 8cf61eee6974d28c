package algo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// onRanks runs fn on every rank of cs at once and fails t with the first
// error.
func onRanks(t *testing.T, cs []comm.Comm, fn func(r int, c comm.Comm) error) {
	t.Helper()
	errs := make(chan error, len(cs))
	for r, c := range cs {
		go func() { errs <- fn(r, c) }()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// checkReleased fails unless w, whose Wait returned, reports
// comm.ErrWorkReleased from Wait and Err (naming the op and the rank) and
// a closed Done channel.
func checkReleased(t *testing.T, w comm.Work, op string, rank int) {
	t.Helper()
	for what, err := range map[string]error{"Err": w.Err(), "Wait": w.Wait(context.Background())} {
		if !errors.Is(err, comm.ErrWorkReleased) {
			t.Errorf("rank %d: %s after Wait returned: got %v, want comm.ErrWorkReleased", rank, what, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, op) || !strings.Contains(msg, "rank ") || !strings.Contains(msg, "keep the error") {
			t.Errorf("rank %d: %s after Wait returned: %q should name the op, the rank and the fix", rank, what, msg)
		}
	}
	select {
	case <-w.Done():
	default:
		t.Errorf("rank %d: Done of a Work whose Wait returned is not closed", rank)
	}
}

// TestWorkReleased: once Wait returned, a Work's methods report
// comm.ErrWorkReleased rather than another op's outcome, for at least as
// long as the recycler holds it back (several later Waits).
func TestWorkReleased(t *testing.T) {
	cs := algo.NewMemEagerWorld(2, comm.Options{})
	defer closeAll(cs)
	ctx := context.Background()
	onRanks(t, cs, func(r int, c comm.Comm) error {
		buf := comm.FromSlice([]float32{1, 2})
		w, err := c.AllReduce(ctx, buf, comm.Sum)
		if err != nil {
			return err
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
		checkReleased(t, w, "all_reduce", r)
		var s, v comm.Work
		if r == 0 {
			s, err = c.Send(ctx, buf, 1, 3)
		} else {
			s, err = c.Recv(ctx, buf, 0, 3)
		}
		if err != nil {
			return err
		}
		if err := s.Wait(ctx); err != nil {
			return err
		}
		if r == 0 {
			checkReleased(t, s, "send", r)
		} else {
			checkReleased(t, s, "recv", r)
		}
		// Later ops that reuse nothing yet: w and s still report misuse.
		for i := 0; i < 4; i++ {
			if v, err = c.AllReduce(ctx, buf, comm.Sum); err == nil {
				err = v.Wait(ctx)
			}
			if err != nil {
				return err
			}
		}
		checkReleased(t, w, "all_reduce", r)
		return nil
	})
}

// TestWatchedWorkNotReused: a Work that is only watched through Done and
// Err is never recycled, so it keeps its outcome however many ops follow.
func TestWatchedWorkNotReused(t *testing.T) {
	cs := algo.NewMemEagerWorld(2, comm.Options{})
	defer closeAll(cs)
	ctx := context.Background()
	onRanks(t, cs, func(r int, c comm.Comm) error {
		w, err := c.AllReduce(ctx, comm.FromSlice([]float32{1}), comm.Sum)
		if err != nil {
			return err
		}
		<-w.Done()
		if err := w.Err(); err != nil {
			return err
		}
		for i := 0; i < 50; i++ {
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice([]float32{1}), comm.Sum)); err != nil {
				return err
			}
			if err := comm.Run(ctx)(c.Barrier(ctx)); err != nil {
				return err
			}
		}
		if err := w.Err(); err != nil {
			t.Errorf("rank %d: Err of a watched Work after 100 later ops: %v, want nil", r, err)
		}
		return nil
	})
}

// TestSendRecvThenWaitBothRanks: over a transport whose Send waits for its
// Recv (no eager sends), two ranks that each Send, then Recv, then Wait
// for the Send and then the Recv still finish: nobody waits for the Recvs
// while the Sends block, so the Comm must start them itself.
func TestSendRecvThenWaitBothRanks(t *testing.T) {
	cs := algo.NewMemWorld(2, false)
	defer closeAll(cs)
	// A deadlock fails the ops (and the test) rather than hang it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := 0; round < 20; round++ {
		onRanks(t, cs, func(r int, c comm.Comm) error {
			out := []int32{int32(100*r + round)}
			in := []int32{-1}
			s, err := c.Send(ctx, comm.FromSlice(out), 1-r, 5)
			if err != nil {
				return err
			}
			v, err := c.Recv(ctx, comm.FromSlice(in), 1-r, 5)
			if err != nil {
				return err
			}
			if err := s.Wait(ctx); err != nil {
				return err
			}
			if err := v.Wait(ctx); err != nil {
				return err
			}
			if want := int32(100*(1-r) + round); in[0] != want {
				t.Errorf("rank %d round %d: got %d, want %d", r, round, in[0], want)
			}
			return nil
		})
	}
}

// TestP2PSameKeyOrderWaitLast: several Sends on one tag, waited for only
// at the end and in reverse order, deliver in issue order (a Wait runs
// the earlier unstarted ops of its key first).
func TestP2PSameKeyOrderWaitLast(t *testing.T) {
	cs := algo.NewMemWorld(2, false)
	defer closeAll(cs)
	ctx := context.Background()
	const m = 6
	onRanks(t, cs, func(r int, c comm.Comm) error {
		ws := make([]comm.Work, m)
		got := make([][]int32, m)
		for j := range m {
			var err error
			if r == 0 {
				ws[j], err = c.Send(ctx, comm.FromSlice([]int32{int32(j)}), 1, 9)
			} else {
				got[j] = []int32{-1}
				ws[j], err = c.Recv(ctx, comm.FromSlice(got[j]), 0, 9)
			}
			if err != nil {
				return err
			}
		}
		for j := m - 1; j >= 0; j-- {
			if err := ws[j].Wait(ctx); err != nil {
				return err
			}
		}
		if r == 1 {
			for j := range m {
				if got[j][0] != int32(j) {
					t.Errorf("recv %d on one tag: got %d, want %d", j, got[j][0], j)
				}
			}
		}
		return nil
	})
}
