package comm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
)

// hidden hides the Comm's Abort method, to exercise comm.Abort's fallback.
type hidden struct{ comm.Comm }

// TestAbort: comm.Abort fails a peer's pending receive at once, quoting the
// cause (or, through the fallback, at least failing it), and fails this
// rank's later operations.
func TestAbort(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		cs, err := inproc.New(2, comm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		buf := make([]float32, 4)
		w, err := cs[1].Recv(ctx, comm.FromSlice(buf), 0, 7)
		if err != nil {
			t.Fatal(err)
		}
		var c0 comm.Comm = cs[0]
		if wrap {
			c0 = hidden{cs[0]}
		}
		comm.Abort(c0, errors.New("boom in compute"))
		err = w.Wait(ctx)
		if !errors.Is(err, comm.ErrAborted) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("wrap=%v: peer's receive: %v, want ErrAborted", wrap, err)
		}
		if !wrap && !strings.Contains(err.Error(), "boom in compute") {
			t.Errorf("peer's error does not quote the cause: %v", err)
		}
		if err := comm.Run(ctx)(cs[0].Barrier(ctx)); err == nil {
			t.Errorf("wrap=%v: the aborted Comm still works", wrap)
		}
		cancel()
		cs[0].Close()
		cs[1].Close()
	}
}
