//go:build linux

package shm

import (
	"fmt"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// TestAllReduceNoSecondGoroutine: an all-reduce of ordinary buffers (the
// ring, many chunks) starts no more goroutines than one of 4 bytes: its
// sends and receives run on the goroutine that runs the op (algo's
// serial ring), so a rank with one core (pinned, GOMAXPROCS 1) does not
// depend on a second thread taking turns with it. With Tuning.Serial off
// (a sender goroutine per ring) it does start more.
func TestAllReduceNoSecondGoroutine(t *testing.T) {
	if goroutinesCreated() == 0 {
		t.Skip("runtime/metrics has no goroutines-created count")
	}
	for _, serial := range []bool{true, false} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			w := mkWorld(t, 2, comm.Options{}, Options{})
			ctx := ctxT(t, 60*time.Second)
			tun := algo.DefaultTuning()
			tun.Serial = serial
			tun.ZeroCopyMin = 0
			tun.Force = map[string]uint8{"all_reduce": algo.AlgoRing}
			cs := []*algo.Comm{algo.NewTunedComm(w.ts[0], comm.Options{}, tun), algo.NewTunedComm(w.ts[1], comm.Options{}, tun)}
			const reps = 20
			measure := func(n int) float64 {
				bufs := [][]float32{make([]float32, n), make([]float32, n)}
				loop := func(r, k int) error {
					for range k {
						if err := comm.Run(ctx)(cs[r].AllReduce(ctx, comm.FromSlice(bufs[r]), comm.Sum)); err != nil {
							return err
						}
					}
					return nil
				}
				both := func(k int) {
					errc := make(chan error, 1)
					go func() { errc <- loop(1, k) }()
					if err := loop(0, k); err != nil {
						t.Fatal(err)
					}
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
				}
				both(2) // warm up
				g0 := goroutinesCreated()
				both(reps)
				return float64(goroutinesCreated()-g0-1) / reps // less the helper goroutine
			}
			small, large := measure(1), measure(1<<18)
			t.Logf("goroutines started per all-reduce (both ranks): 4 B %.2f, 1 MiB %.2f", small, large)
			if serial && large > small+0.5 {
				t.Errorf("a 1 MiB all-reduce starts %.2f goroutines per op, one of 4 B %.2f: its ring runs a sender goroutine", large, small)
			}
			if !serial && large < small+0.5 {
				t.Errorf("with Serial off, a 1 MiB all-reduce starts %.2f goroutines per op, one of 4 B %.2f: want a sender goroutine", large, small)
			}
		})
	}
}
