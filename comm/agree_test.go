package comm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
)

// TestAgree: every rank learns the lowest failed rank and its message, or
// nil when no rank failed.
func TestAgree(t *testing.T) {
	cs, err := inproc.New(3, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([][2]error, 3)
	err = commtest.RunRanks(context.Background(), cs, 10*time.Second, func(ctx context.Context, c comm.Comm) error {
		got[c.Rank()][0] = comm.Agree(ctx, c, nil)
		var mine error
		if c.Rank() >= 1 {
			mine = errors.New("disk full")
		}
		got[c.Rank()][1] = comm.Agree(ctx, c, mine)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, g := range got {
		if g[0] != nil {
			t.Errorf("rank %d: no failure, got %v", r, g[0])
		}
		var re *comm.RankError
		if !errors.As(g[1], &re) || re.Rank != 1 || re.Msg != "disk full" || g[1].Error() != "rank 1: disk full" {
			t.Errorf("rank %d: %v, want rank 1's failure", r, g[1])
		}
	}
}
