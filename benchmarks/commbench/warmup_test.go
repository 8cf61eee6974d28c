package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
)

// TestWarmUpSameCount: the time-based warm-up runs the same number of
// iterations on every rank (they are collectives: one more on one rank
// would hang the run), at least -warmup of them, and goes on until the
// slowest rank has spent -warmup-time; -warmup-time 0 runs -warmup only.
func TestWarmUpSameCount(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		warmup  int
		warmFor time.Duration
	}{{3, 0}, {3, 20 * time.Millisecond}, {1, 5 * time.Millisecond}, {0, time.Second}} {
		comms, err := inproc.New(n, comm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		counts := make([]int, n)
		spent := make([]time.Duration, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Go(func() {
				buf := comm.FromSlice(make([]float32, 16))
				oc := opCase{run: func(ctx context.Context) error {
					counts[r]++
					if r == 1 {
						time.Sleep(100 * time.Microsecond) // the slow rank
					}
					return comm.Run(ctx)(c.AllReduce(ctx, buf, comm.Sum))
				}}
				start := time.Now()
				errs[r] = warmUp(ctx, c, oc, config{warmup: tc.warmup, warmFor: tc.warmFor})
				spent[r] = time.Since(start)
			})
		}
		wg.Wait()
		cancel()
		for _, c := range comms {
			c.Close()
		}
		for r := range n {
			if errs[r] != nil {
				t.Fatalf("%+v: rank %d: %v", tc, r, errs[r])
			}
			if counts[r] != counts[0] {
				t.Errorf("%+v: rank %d ran %d warm-up iterations, rank 0 %d", tc, r, counts[r], counts[0])
			}
		}
		switch {
		case tc.warmup == 0 || tc.warmFor == 0:
			if counts[0] != tc.warmup {
				t.Errorf("%+v: %d warm-up iterations, want %d", tc, counts[0], tc.warmup)
			}
		case counts[0] <= tc.warmup:
			t.Errorf("%+v: only %d warm-up iterations", tc, counts[0])
		case max(spent[0], spent[1], spent[2]) < tc.warmFor:
			t.Errorf("%+v: no rank warmed up for %v (%v)", tc, tc.warmFor, spent)
		}
	}
}
