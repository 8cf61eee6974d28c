package commtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/gdist/gdist/comm"
)

// Lockstep starts one goroutine per rank of comms (a world in this
// process) and returns step, which runs op on every rank at once and
// returns the first error, and stop, which ends the goroutines. step
// itself allocates nothing, so testing.AllocsPerRun(n, step) counts the
// allocations of op on all ranks together.
func Lockstep(comms []comm.Comm, op func(r int, c comm.Comm) error) (step func() error, stop func()) {
	n := len(comms)
	start := make([]chan struct{}, n)
	done := make(chan error, n)
	for r, c := range comms {
		start[r] = make(chan struct{})
		go func() {
			for range start[r] {
				done <- op(r, c)
			}
		}()
	}
	step = func() error {
		for _, s := range start {
			s <- struct{}{}
		}
		var first error
		for range n {
			if err := <-done; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	stop = func() {
		for _, s := range start {
			close(s)
		}
	}
	return step, stop
}

// SmallOps are the operations of small messages whose per-op cost
// BenchSmallOps and SmallOpAllocs measure, each on float32 buffers of the
// given bytes made once: all_reduce (sum), broadcast (from rank 0), and
// send_recv (rank 0 sends to rank 1, which receives; the other ranks
// idle). Every op is issued and waited for under one ctx, as comm.Run
// does.
func SmallOps(ctx context.Context, bytes int) map[string]func(r int, c comm.Comm) error {
	bufs := make([]comm.Buffer, 64)
	for r := range bufs {
		bufs[r] = comm.FromSlice(make([]float32, bytes/4))
	}
	buf := func(r int) comm.Buffer { return bufs[r] }
	return map[string]func(r int, c comm.Comm) error{
		"all_reduce": func(r int, c comm.Comm) error {
			return comm.Run(ctx)(c.AllReduce(ctx, buf(r), comm.Sum))
		},
		"broadcast": func(r int, c comm.Comm) error {
			return comm.Run(ctx)(c.Broadcast(ctx, buf(r), 0))
		},
		"send_recv": func(r int, c comm.Comm) error {
			switch r {
			case 0:
				return comm.Run(ctx)(c.Send(ctx, buf(r), 1, 7))
			case 1:
				return comm.Run(ctx)(c.Recv(ctx, buf(r), 0, 7))
			}
			return nil
		},
	}
}

// SmallOpNames lists SmallOps' keys in a fixed order.
var SmallOpNames = []string{"all_reduce", "broadcast", "send_recv"}

// BenchSmallOps benchmarks SmallOps at 4 KiB (and 8 bytes) on a world of
// n ranks (at most 64): one op is the operation on every rank.
func BenchSmallOps(b *testing.B, world World, n int) {
	for _, bytes := range []int{8, 4 << 10} {
		for _, name := range SmallOpNames {
			b.Run(fmt.Sprintf("%s/%dB", name, bytes), func(b *testing.B) {
				cs := world(b, n)
				step, stop := Lockstep(cs, SmallOps(context.Background(), bytes)[name])
				defer stop()
				for range 10 { // warm up: buffers, queues, wait state
					if err := step(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(bytes))
				b.ResetTimer()
				for b.Loop() {
					if err := step(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// SmallOpAllocs returns the allocations per op of each of SmallOps at 4
// KiB on a world of n ranks, all ranks together, in steady state.
func SmallOpAllocs(t testing.TB, world World, n int) map[string]float64 {
	cs := world(t, n)
	out := map[string]float64{}
	for _, name := range SmallOpNames {
		step, stop := Lockstep(cs, SmallOps(context.Background(), 4<<10)[name])
		for range 20 {
			if err := step(); err != nil {
				stop()
				t.Fatalf("%s: %v", name, err)
			}
		}
		var err error
		out[name] = testing.AllocsPerRun(200, func() {
			if e := step(); e != nil && err == nil {
				err = e
			}
		})
		stop()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return out
}

// CheckSmallOpAllocs fails t unless a steady-state 4 KiB all-reduce,
// broadcast, and Send with its Recv on a world of n ranks allocate
// nothing at all: every record on the path (the op's Work, recycled once
// its Wait returned; messages, receives, locks, scratch) is reused, and a
// Send or Recv runs on its waiting goroutine, with no goroutine, channel,
// timer or ctx of its own.
func CheckSmallOpAllocs(t *testing.T, world World, n int) {
	if Race {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	got := SmallOpAllocs(t, world, n)
	for _, name := range SmallOpNames {
		t.Logf("%s, 4 KiB, %d ranks: %v allocations per op (all ranks)", name, n, got[name])
		if got[name] > 0 {
			t.Errorf("%s of 4 KiB on %d ranks: %v allocations per op (all ranks), want 0", name, n, got[name])
		}
	}
}
