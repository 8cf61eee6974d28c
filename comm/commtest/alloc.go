package commtest

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// AllocSuite runs all-reduce and reduce (every dtype, op and count of
// Suite, in place; reduce to a root that moves with the count),
// reduce-scatter (every dtype and op; separate and in place) and
// all-gather (every dtype; separate and in place) with buffers from
// comm.Alloc: on every rank, and mixed (only rank 0's, or every rank's but
// rank 0's). Each result must equal, bit
// for bit, the all-reduce of the same input in ordinary memory (the
// inputs make every reduction exact in any order) and what the rank
// computes itself; with cfg.ZeroCopy, the traffic proves which path ran.
// It also checks Alloc's contract: zeroed memory, a free that may be
// called twice. cfg.Timeout bounds a stall (no rank finishing an
// operation), not the whole run.
func AllocSuite(t *testing.T, world World, cfg AllocConfig) {
	cfg.fill()
	counts := append(append([]int(nil), Counts...), cfg.Large)
	for _, n := range cfg.Sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms := world(t, n)
			for _, mode := range []string{"all", "rank0", "others"} {
				t.Run(mode, func(t *testing.T) {
					err := runProgressing(comms, cfg.Timeout, func(ctx context.Context, c comm.Comm) error {
						shared := mode == "all" || (mode == "rank0") == (c.Rank() == 0)
						if err := allocAllReduce(ctx, c, counts, cfg, shared, mode == "all"); err != nil {
							return err
						}
						if err := allocReduce(ctx, c, counts, cfg, shared, mode == "all"); err != nil {
							return err
						}
						if err := allocReduceScatter(ctx, c, counts, cfg, shared, mode == "all"); err != nil {
							return err
						}
						return allocAllGather(ctx, c, counts, cfg, shared, mode == "all")
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}

// runProgressing runs fn on every rank (as RunRanks does) and fails them
// all when no rank has finished an operation (waitp) for stall: a hang is
// caught within stall, while a run that progresses slowly (ranks as
// goroutines on a machine whose cores are busy with other work) is not cut
// short by a deadline on the whole of it.
func runProgressing(comms []comm.Comm, stall time.Duration, fn func(ctx context.Context, c comm.Comm) error) error {
	var done atomic.Int64
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), progressKey{}, &done))
	defer cancel(nil)
	go func() {
		last, since := done.Load(), time.Now()
		t := time.NewTicker(stall / 20)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if d := done.Load(); d != last {
				last, since = d, time.Now()
			} else if time.Since(since) > stall {
				cancel(fmt.Errorf("no rank finished an operation for %v (%d finished before): a hang", stall, d))
				return
			}
		}
	}()
	err := RunRanks(ctx, comms, 24*time.Hour, fn)
	if c := context.Cause(ctx); err != nil && c != nil && c != context.Canceled {
		err = fmt.Errorf("%w (%v)", err, c)
	}
	return err
}

type progressKey struct{}

// waitp is wait that also counts the finished operation for
// runProgressing.
func waitp(ctx context.Context) func(comm.Work, error) error {
	run := comm.Run(ctx)
	return func(w comm.Work, err error) error {
		err = run(w, err)
		if p, ok := ctx.Value(progressKey{}).(*atomic.Int64); ok && err == nil {
			p.Add(1)
		}
		return err
	}
}

func allocAllReduce(ctx context.Context, c comm.Comm, counts []int, cfg AllocConfig, shared, zero bool) error {
	n, r := c.Size(), c.Rank()
	for _, tcase := range reduceCases(counts) {
		dt, op, count := tcase.dt, tcase.op, tcase.count
		plain := NewBuf(dt, count)
		fillInput(dt, op, r, plain)
		if err := waitp(ctx)(c.AllReduce(ctx, plain, op)); err != nil {
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
		sent0 := sentSoFar(c)
		err := waitp(ctx)(c.AllReduce(ctx, b, op))
		if err == nil {
			err = checkTraffic(c, cfg, sent0, count*dt.Size(), zero)
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

// allocReduce: Reduce to a root that moves with the count, in place, each
// result equal to the one in ordinary memory, non-root buffers
// unchanged.
func allocReduce(ctx context.Context, c comm.Comm, counts []int, cfg AllocConfig, shared, zero bool) error {
	n, r := c.Size(), c.Rank()
	for _, tcase := range reduceCases(counts) {
		dt, op, count := tcase.dt, tcase.op, tcase.count
		root := count % n
		plain := NewBuf(dt, count)
		fillInput(dt, op, r, plain)
		if err := waitp(ctx)(c.Reduce(ctx, plain, op, root)); err != nil {
			return fmt.Errorf("reduce %v %v count %d to %d in ordinary memory: %w", dt, op, count, root, err)
		}
		b, free, err := alloc(c, dt, count, shared)
		if err != nil {
			return err
		}
		fillInput(dt, op, r, b)
		in := append([]byte(nil), b.Host()...)
		sent0 := sentSoFar(c)
		err = waitp(ctx)(c.Reduce(ctx, b, op, root))
		if err == nil && zero {
			// Every rank sent the exchange only (with mixed buffers the
			// root of the ordinary reduce may send nothing at all).
			err = checkTraffic(c, cfg, sent0, count*dt.Size(), zero)
		}
		if err == nil && r == root && !bytes.Equal(b.Host(), plain.Host()) {
			err = fmt.Errorf("result differs from the reduce of ordinary memory")
		}
		if err == nil && r != root && !bytes.Equal(b.Host(), in) {
			err = fmt.Errorf("a non-root rank's buffer changed")
		}
		free()
		if err != nil {
			return fmt.Errorf("reduce %v %v count %d to %d (allocated: %v): %w", dt, op, count, root, shared, err)
		}
	}
	return nil
}

// alloc returns a Buffer of count dt elements: from comm.Alloc if shared.
func alloc(c comm.Comm, dt comm.DType, count int, shared bool) (comm.Buffer, func(), error) {
	if !shared {
		return NewBuf(dt, count), func() {}, nil
	}
	b, free, err := comm.Alloc(c, dt, count)
	if err != nil {
		return b, nil, fmt.Errorf("alloc %v x %d: %w", dt, count, err)
	}
	return b, free, nil
}

// checkTraffic checks what c sent since sent0 for a zero-copy op (zero:
// only the exchange) or an ordinary one (more), when the backend is
// zero-copy and the op moves at least 64 bytes.
func checkTraffic(c comm.Comm, cfg AllocConfig, sent0 int64, bytes int, zero bool) error {
	tc, ok := c.(comm.TrafficCounter)
	n := c.Size()
	if !ok || !cfg.ZeroCopy || n < 2 || bytes < 64 {
		return nil
	}
	sent, _ := tc.Traffic()
	if d, want := sent-sent0, int64(32*(n-1)); zero && d != want {
		return fmt.Errorf("sent %d bytes, want %d (the zero-copy exchange only)", d, want)
	} else if !zero && d <= want {
		return fmt.Errorf("sent %d bytes with mixed buffers: the data did not move", d)
	}
	return nil
}

func sentSoFar(c comm.Comm) int64 {
	if tc, ok := c.(comm.TrafficCounter); ok {
		s, _ := tc.Traffic()
		return s
	}
	return 0
}

func allocReduceScatter(ctx context.Context, c comm.Comm, counts []int, cfg AllocConfig, shared, zero bool) error {
	n, r := c.Size(), c.Rank()
	for _, tcase := range reduceCases(counts) {
		dt, op, k := tcase.dt, tcase.op, tcase.count
		if k == counts[len(counts)-1] {
			k /= n
		}
		for _, inPlace := range []bool{false, true} {
			psrc := NewBuf(dt, n*k)
			fillInput(dt, op, r, psrc)
			pdst := NewBuf(dt, k)
			if err := waitp(ctx)(c.ReduceScatter(ctx, pdst, psrc, op)); err != nil {
				return fmt.Errorf("reduce_scatter %v %v count %d in ordinary memory: %w", dt, op, k, err)
			}
			src, free, err := alloc(c, dt, n*k, shared)
			if err != nil {
				return err
			}
			fillInput(dt, op, r, src)
			dst := NewBuf(dt, k)
			if inPlace {
				dst = src.Slice(r*k, (r+1)*k)
			}
			sent0 := sentSoFar(c)
			err = waitp(ctx)(c.ReduceScatter(ctx, dst, src, op))
			if err == nil {
				err = checkTraffic(c, cfg, sent0, n*k*dt.Size(), zero)
			}
			if err == nil && !bytes.Equal(dst.Host(), pdst.Host()) {
				err = fmt.Errorf("result differs from the reduce-scatter of ordinary memory")
			}
			if err == nil && !inPlace && !bytes.Equal(src.Host(), psrc.Host()) {
				err = fmt.Errorf("src modified")
			}
			free()
			if err != nil {
				return fmt.Errorf("reduce_scatter %v %v count %d in-place %v (allocated: %v): %w", dt, op, k, inPlace, shared, err)
			}
		}
	}
	return nil
}

func allocAllGather(ctx context.Context, c comm.Comm, counts []int, cfg AllocConfig, shared, zero bool) error {
	n, r := c.Size(), c.Rank()
	for _, tcase := range blockCases(counts, n) {
		dt, k := tcase.dt, tcase.count
		for _, inPlace := range []bool{false, true} {
			dst, free, err := alloc(c, dt, n*k, shared)
			if err != nil {
				return err
			}
			src := NewBuf(dt, k)
			if inPlace {
				src = dst.Slice(r*k, (r+1)*k)
			}
			Fill(dt, src.Host(), func(i int) float64 { return Pattern(r, i) })
			sent0 := sentSoFar(c)
			err = waitp(ctx)(c.AllGather(ctx, dst, src))
			if err == nil {
				err = checkTraffic(c, cfg, sent0, n*k*dt.Size(), zero)
			}
			if err == nil {
				err = CheckElems(dt, dst.Host(), n*k, func(i int) float64 { return Pattern(i/max(k, 1), i%max(k, 1)) })
			}
			free()
			if err != nil {
				return fmt.Errorf("all_gather %v count %d in-place %v (allocated: %v): %w", dt, k, inPlace, shared, err)
			}
		}
	}
	return nil
}
