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

func closeAll(cs []comm.Comm) {
	for _, c := range cs {
		c.Close()
	}
}

func waitDone(t *testing.T, w comm.Work, what string) error {
	t.Helper()
	select {
	case <-w.Done():
		return w.Err()
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not done after 10 s", what)
		return nil
	}
}

// TestUnwaitedCollectivesProgress: collectives that nobody Waits for
// (only Done is watched) still run, in order, and complete.
func TestUnwaitedCollectivesProgress(t *testing.T) {
	cs := algo.NewMemEagerWorld(2, comm.Options{})
	defer closeAll(cs)
	ctx := context.Background()
	bufs := make([][][]float32, 2)
	works := make([][]comm.Work, 2)
	for r, c := range cs {
		for i := range 3 {
			b := []float32{float32(r + i), 1}
			bufs[r] = append(bufs[r], b)
			w, err := c.AllReduce(ctx, comm.FromSlice(b), comm.Sum)
			if err != nil {
				t.Fatal(err)
			}
			works[r] = append(works[r], w)
		}
	}
	for r := range cs {
		for i, w := range works[r] {
			if err := waitDone(t, w, "all_reduce"); err != nil {
				t.Fatalf("rank %d op %d: %v", r, i, err)
			}
			if want := float32(2*i + 1); bufs[r][i][0] != want || bufs[r][i][1] != 2 {
				t.Fatalf("rank %d op %d: got %v, want [%v 2]", r, i, bufs[r][i], want)
			}
		}
	}
}

// TestWaitWithOtherCtx: a Wait whose ctx ends returns ctx's error and
// leaves the collective running; it completes once the peer joins.
func TestWaitWithOtherCtx(t *testing.T) {
	cs := algo.NewMemEagerWorld(2, comm.Options{})
	defer closeAll(cs)
	b0 := []float32{1}
	w0, err := cs[0].AllReduce(context.Background(), comm.FromSlice(b0), comm.Sum)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := w0.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait(short ctx) = %v, want a deadline error", err)
	}
	b1 := []float32{2}
	if err := comm.Run(context.Background())(cs[1].AllReduce(context.Background(), comm.FromSlice(b1), comm.Sum)); err != nil {
		t.Fatal(err)
	}
	if err := w0.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b0[0] != 3 || b1[0] != 3 {
		t.Fatalf("got %v and %v, want 3", b0, b1)
	}
}

// TestQueuedCtxEnds: a collective queued behind one that cannot finish
// fails the Comm as soon as its own ctx ends, which ends the one ahead.
func TestQueuedCtxEnds(t *testing.T) {
	cs := algo.NewMemEagerWorld(2, comm.Options{})
	defer closeAll(cs)
	wa, err := cs[0].AllReduce(context.Background(), comm.FromSlice([]float32{1}), comm.Sum)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	wb, err := cs[0].Barrier(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, wb, "barrier"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued barrier: %v, want a deadline error", err)
	}
	if err := waitDone(t, wa, "all_reduce"); err == nil {
		t.Fatal("all_reduce ahead of the failed barrier succeeded alone")
	}
}

// TestOpTimeout: Options.Timeout fails a collective that overruns it with
// comm.ErrTimeout naming it, not much later, and poisons the Comm.
func TestOpTimeout(t *testing.T) {
	const d = 100 * time.Millisecond
	cs := algo.NewMemEagerWorld(2, comm.Options{Timeout: d})
	defer closeAll(cs)
	// Collectives that finish in time do not trip it, however long the
	// Comm lives.
	for range 3 {
		for r := range 2 {
			go comm.Run(context.Background())(cs[1-r].Barrier(context.Background()))
			if err := comm.Run(context.Background())(cs[r].Barrier(context.Background())); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(d / 2)
	}
	start := time.Now()
	err := comm.Run(context.Background())(cs[0].AllReduce(context.Background(), comm.FromSlice([]float32{1}), comm.Sum))
	took := time.Since(start)
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "all_reduce") {
		t.Fatalf("got %v, want a timeout of all_reduce", err)
	}
	if took < d || took > 5*time.Second {
		t.Fatalf("timed out after %v with a timeout of %v", took, d)
	}
	if _, err := cs[0].Barrier(context.Background()); err == nil {
		t.Fatal("Comm not poisoned after a timeout")
	}
}
