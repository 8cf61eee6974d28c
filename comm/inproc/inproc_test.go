package inproc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
)

func world(t testing.TB, n int) []comm.Comm {
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func TestConformance(t *testing.T) {
	commtest.Suite(t, world, commtest.Config{})
}

// TestForcedAlgorithms runs every algorithm of all-reduce, broadcast and
// reduce at every count (the cost model alone would never pick recursive
// doubling for large messages or the ring for tiny ones), with a small
// chunk so that the pipelines have many stages.
func TestForcedAlgorithms(t *testing.T) {
	counts := []int{0, 1, 7, 1023, 20011}
	for _, force := range []string{"all_reduce=rd,broadcast=tree,reduce=tree", "all_reduce=ring,broadcast=chain,reduce=ring"} {
		for _, n := range []int{2, 3, 5, 8} {
			t.Run(fmt.Sprintf("%s/n=%d", force, n), func(t *testing.T) {
				f, err := algo.ParseAlgo(force)
				if err != nil {
					t.Fatal(err)
				}
				cs := world(t, n)
				for _, c := range cs {
					tu := algo.DefaultTuning()
					tu.Force, tu.ChunkBytes = f, 4096
					c.(*algo.Comm).SetTuning(tu)
				}
				if err := commtest.RunRanks(context.Background(), cs, time.Minute, commtest.RootedAndReduceChecks(counts)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestRegistryJoin builds ranks through comm.New("inproc") from separate
// goroutines, as the train CLI's -backend inproc does.
func TestRegistryJoin(t *testing.T) {
	const n = 3
	cs := make([]comm.Comm, n)
	errs := make(chan error, n)
	for r := 0; r < n; r++ {
		go func(r int) {
			var err error
			cs[r], err = comm.New(context.Background(), "inproc", comm.Config{Rank: r, Size: n, Job: t.Name()})
			errs <- err
		}(r)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	err := commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		x := []int32{int32(c.Rank())}
		return comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(x), comm.Sum))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comm.New(context.Background(), "inproc", comm.Config{Rank: 3, Size: 3}); err == nil {
		t.Fatal("rank out of range accepted")
	}
}

// BenchmarkSmallOps: 8 B and 4 KiB all-reduce, broadcast and send/recv
// on 2 ranks, with allocations (-benchmem).
func BenchmarkSmallOps(b *testing.B) { commtest.BenchSmallOps(b, world, 2) }

// TestSmallOpAllocs: a small all-reduce, broadcast, or send and recv
// allocates nothing in steady state, on any rank.
func TestSmallOpAllocs(t *testing.T) { commtest.CheckSmallOpAllocs(t, world, 2) }
