package closewait

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// work is a comm.Work done when its channel is closed.
type work chan struct{}

func (w work) Wait(ctx context.Context) error { <-w; return nil }
func (w work) Done() <-chan struct{}          { return w }
func (w work) Err() error                     { return nil }

type op struct {
	name string
	w    work
}

func (o op) work() comm.Work { return o.w }

// TestWorks: the ops not done by the deadline come back in order, the
// done ones (before or after one not done) do not; all done: none.
func TestWorks(t *testing.T) {
	done := make(work)
	close(done)
	ops := []op{{"a", done}, {"b", make(work)}, {"c", done}, {"d", make(work)}}
	left := Works(ops, op.work, 10*time.Millisecond)
	var names []string
	for _, o := range left {
		names = append(names, o.name)
	}
	if !slices.Equal(names, []string{"b", "d"}) {
		t.Fatalf("left %v, want [b d]", names)
	}
	close(ops[1].w)
	close(ops[3].w)
	if left := Works(ops, op.work, time.Hour); left != nil {
		t.Fatalf("all done: left %v", left)
	}
}
