package commtest

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/gdist/gdist/comm"
)

// AllocConfig selects what AllocSuite covers.
type AllocConfig struct {
	Config
	// ZeroCopy: the backend's all-reduce of buffers that every rank got
	// from comm.Alloc moves no data through messages (only a 32-byte
	// exchange with each peer), which the suite checks with the Comm's
	// traffic counter; buffers mixed with ordinary ones move data as
	// before. The backend must be set to try the zero-copy path at every
	// count the suite uses (GDIST_ZEROCOPY_MIN=1).
	ZeroCopy bool
}

// AllocSuite runs all-reduce (every dtype, op and count of Suite, in
// place) with buffers from comm.Alloc: on every rank, and mixed (only
// rank 0's, or every rank's but rank 0's). Each result must equal, bit
// for bit, the all-reduce of the same input in ordinary memory (the
// inputs make every reduction exact in any order) and what the rank
// computes itself; with cfg.ZeroCopy, the traffic proves which path ran.
// It also checks Alloc's contract: zeroed memory, a free that may be
// called twice.
func AllocSuite(t *testing.T, world World, cfg AllocConfig) {
	cfg.fill()
	counts := append(append([]int(nil), Counts...), cfg.Large)
	for _, n := range cfg.Sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms := world(t, n)
			for _, mode := range []string{"all", "rank0", "others"} {
				t.Run(mode, func(t *testing.T) {
					err := RunRanks(context.Background(), comms, cfg.Timeout, func(ctx context.Context, c comm.Comm) error {
						shared := mode == "all" || (mode == "rank0") == (c.Rank() == 0)
						return allocAllReduce(ctx, c, counts, cfg, shared, mode == "all")
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}

func allocAllReduce(ctx context.Context, c comm.Comm, counts []int, cfg AllocConfig, shared, zero bool) error {
	n, r := c.Size(), c.Rank()
	tc, _ := c.(comm.TrafficCounter)
	for _, tcase := range reduceCases(counts) {
		dt, op, count := tcase.dt, tcase.op, tcase.count
		plain := NewBuf(dt, count)
		fillInput(dt, op, r, plain)
		if err := wait(ctx)(c.AllReduce(ctx, plain, op)); err != nil {
			return fmt.Errorf("all_reduce %v %v count %d in ordinary memory: %w", dt, op, count, err)
		}
		b, free := NewBuf(dt, count), func() {}
		if shared {
			var err error
			if b, free, err = comm.Alloc(c, dt, count); err != nil {
				return fmt.Errorf("alloc %v x %d: %w", dt, count, err)
			}
			if b.Len() != count || b.DType() != dt {
				free()
				return fmt.Errorf("alloc %v x %d gave %v", dt, count, b)
			}
			for i, x := range b.Host() {
				if x != 0 {
					free()
					return fmt.Errorf("alloc %v x %d: byte %d is %d, not zero", dt, count, i, x)
				}
			}
		}
		fillInput(dt, op, r, b)
		var sent0 int64
		if tc != nil {
			sent0, _ = tc.Traffic()
		}
		err := wait(ctx)(c.AllReduce(ctx, b, op))
		if err == nil && cfg.ZeroCopy && tc != nil && n > 1 && count*dt.Size() >= 64 {
			sent, _ := tc.Traffic()
			if d, want := sent-sent0, int64(32*(n-1)); zero && d != want {
				err = fmt.Errorf("sent %d bytes, want %d (the zero-copy exchange only)", d, want)
			} else if !zero && d <= want {
				err = fmt.Errorf("sent %d bytes with mixed buffers: the data did not move", d)
			}
		}
		if err == nil {
			err = CheckReduced(dt, op, n, cfg.Avg, b.Host(), count, ExpectedFuncRule(dt, op, n, cfg.Avg))
		}
		if err == nil && !bytes.Equal(b.Host(), plain.Host()) {
			err = fmt.Errorf("result differs from the all-reduce of ordinary memory")
		}
		free()
		free() // twice: a no-op
		if err != nil {
			return fmt.Errorf("all_reduce %v %v count %d (allocated: %v): %w", dt, op, count, shared, err)
		}
	}
	return nil
}
