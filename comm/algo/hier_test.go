package algo_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/commtest"
)

// hierLayouts: two hosts of two, hosts of three and of two, uneven hosts,
// ranks of a host not consecutive, and one rank per host (flat).
var hierLayouts = []string{"aabb", "aabbcc", "aaabbb", "aab", "abbbc", "abab", "abc"}

func hostIDs(s string) []string { return strings.Split(s, "") }

func hierWorld(t *testing.T, layout, kind, plan string, force bool) []comm.Comm {
	cs := algo.NewMemHostWorld(hostIDs(layout), kind)
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	for _, c := range cs {
		tu := algo.DefaultTuning()
		tu.ChunkBytes = 1024
		if force {
			tu.Force = map[string]uint8{"all_reduce": algo.AlgoHier}
		}
		algo.ForceHierPlan(&tu, plan)
		c.(*algo.Comm).SetTuning(tu)
	}
	return cs
}

// TestHierarchical runs the all-reduce, broadcast and reduce checks of the
// conformance suite (every dtype and op, Avg included) with the
// hierarchical all-reduce forced, each of its plans in turn, over fake
// multi-host layouts; and once with the cost model choosing.
func TestHierarchical(t *testing.T) {
	counts := []int{0, 1, 7, 1023, 20011}
	layouts := hierLayouts
	if testing.Short() {
		counts = []int{0, 1, 7, 1023}
		layouts = []string{"aabb", "aab", "abc"}
	}
	for _, layout := range layouts {
		even := algo.NewLayout(hostIDs(layout)).Local() > 1
		for _, plan := range append(algo.HierPlans, "model") {
			if !even && plan != "leader" && plan != "model" {
				continue // uneven hosts, or one rank per host: rs and ar run as leader
			}
			for _, kind := range []string{"eager", "staged"} {
				if kind == "staged" && (testing.Short() || plan == "model") {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", layout, plan, kind), func(t *testing.T) {
					cs := hierWorld(t, layout, kind, plan, plan != "model")
					err := commtest.RunRanks(context.Background(), cs, 2*time.Minute, commtest.RootedAndReduceChecks(counts))
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// TestHierMatchesFlat: on random float inputs the hierarchical all-reduce
// gives the flat ring's results within float rounding (Sum and Avg), and
// every rank the same bits.
func TestHierMatchesFlat(t *testing.T) {
	const count = 30011
	for _, layout := range []string{"aabb", "aaabbb", "aab"} {
		for _, plan := range algo.HierPlans {
			for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg} {
				p := len(layout)
				in := make([][]float32, p)
				for r := range in {
					rng := rand.New(rand.NewPCG(uint64(r), 1))
					in[r] = make([]float32, count)
					for i := range in[r] {
						in[r][i] = float32(rng.NormFloat64())
					}
				}
				run := func(force string, plan string) [][]float32 {
					cs := hierWorld(t, layout, "eager", plan, false)
					f, err := algo.ParseAlgo(force)
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range cs {
						tu := algo.DefaultTuning()
						tu.Force = f
						algo.ForceHierPlan(&tu, plan)
						c.(*algo.Comm).SetTuning(tu)
					}
					out := make([][]float32, p)
					err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
						b := append([]float32(nil), in[c.Rank()]...)
						out[c.Rank()] = b
						return comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(b), op))
					})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				flat := run("all_reduce=ring", "")
				hier := run("all_reduce=hier", plan)
				for r := range hier {
					for i := range hier[r] {
						if hier[r][i] != hier[0][i] {
							t.Fatalf("%s %s %v: rank %d element %d: %v, rank 0 has %v", layout, plan, op, r, i, hier[r][i], hier[0][i])
						}
						if d := math.Abs(float64(hier[r][i] - flat[r][i])); d > 1e-5*(1+math.Abs(float64(flat[r][i]))) {
							t.Fatalf("%s %s %v: element %d: hier %v, flat %v", layout, plan, op, i, hier[r][i], flat[r][i])
						}
					}
				}
			}
		}
	}
}

// TestHierChoice pins what the cost model picks for an all-reduce, a pure
// function of the size, the layout and the link costs: across hosts the
// hierarchical algorithm (the reduce-scatter plan for large messages, the
// two all-reduces for small ones); flat where the group is on one host,
// has one rank per host, or where hosts are uneven and large messages go
// better by the ring; and flat (hd) where the links between hosts are as
// fast as those inside (the hosts' ranks then gain nothing from taking
// turns on their link).
func TestHierChoice(t *testing.T) {
	def := algo.DefaultTuning()
	fast := def
	fast.InterAlpha, fast.InterBeta = def.Alpha, def.Beta
	slow := def
	slow.InterBeta = 8000 // 1 Gbit/s
	for _, w := range []struct {
		tu     algo.Tuning
		layout string
		n      int
		algo   string
		plan   string
	}{
		{def, "aabb", 64 << 20, "hier", "rs"},
		{def, "aabb", 1 << 20, "hier", "rs"},
		{def, "aabb", 4 << 10, "hier", "ar"},
		{def, "aaaabbbb", 64 << 20, "hier", "rs"},
		{slow, "aabb", 64 << 20, "hier", "rs"},
		{fast, "aabb", 64 << 20, "hd", "rs"},
		{def, "aaaa", 64 << 20, "hd", ""},
		{def, "aaaa", 4 << 10, "rd", ""},
		{def, "abcd", 64 << 20, "hd", ""},
		{def, "aab", 64 << 20, "ring", "leader"},
		{def, "aab", 4 << 10, "hier", "leader"},
	} {
		l := algo.NewLayout(hostIDs(w.layout))
		var got string
		best := int64(math.MaxInt64)
		for _, a := range algo.Algorithms() {
			if a.Op != "all_reduce" {
				continue
			}
			if c := a.Cost(w.tu, w.n, l); c < best {
				got, best = a.Name, c
			}
		}
		plan := algo.HierPlan(w.tu, w.n, l)
		if got != w.algo || plan != w.plan {
			t.Errorf("%d bytes on %s (inter %d/%d ps): %s (hier plan %q), want %s (%q)", w.n, w.layout, w.tu.InterAlpha, w.tu.InterBeta, got, plan, w.algo, w.plan)
		}
	}
}

// TestHierStall: a rank that never arrives at a hierarchical all-reduce
// fails the others (each through its ctx, or the abort of a rank whose ctx
// ended) rather than leaving them waiting inside a phase.
func TestHierStall(t *testing.T) {
	for _, plan := range algo.HierPlans {
		cs := hierWorld(t, "aabb", "eager", plan, true)
		errs := make(chan error, 3)
		for r := range 3 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				errs <- comm.Run(ctx)(cs[r].AllReduce(ctx, comm.FromSlice(make([]float32, 5000)), comm.Avg))
			}()
		}
		for range 3 {
			if err := <-errs; err == nil {
				t.Errorf("%s: an all-reduce without rank 3 succeeded", plan)
			}
		}
	}
}
