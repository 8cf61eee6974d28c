package commtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
)

// AllocSuite's bound is on a stall, not on the whole run: ranks that
// keep finishing operations run past it, ranks that stop are failed
// within it, saying it was a hang.
func TestRunProgressing(t *testing.T) {
	comms, err := inproc.New(2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	const stall = 300 * time.Millisecond
	start := time.Now()
	err = runProgressing(comms, stall, func(ctx context.Context, c comm.Comm) error {
		for time.Since(start) < 3*stall { // slow, but progressing
			time.Sleep(stall / 4)
			if err := waitp(ctx)(c.Barrier(ctx)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a progressing run failed: %v", err)
	}
	start = time.Now()
	err = runProgressing(comms, stall, func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 1 {
			<-ctx.Done() // never joins the barrier
			return ctx.Err()
		}
		return waitp(ctx)(c.Barrier(ctx))
	})
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "a hang") || took > 10*stall {
		t.Fatalf("a stalled run: %v after %v, want a hang reported within about %v", err, took, stall)
	}
}
