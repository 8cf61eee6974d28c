package algo

import "testing"

// TestChooserFollowsModel checks, for every op with a choice, that the
// chosen algorithm is the cheapest by the model (the first of equals), over
// sizes from 0 to 1 GiB and group sizes 1..64.
func TestChooserFollowsModel(t *testing.T) {
	tu := DefaultTuning()
	type chooser struct {
		op     string
		costs  func(n, p int) []cand
		choose func(n, p int) uint8
	}
	ops := []chooser{
		{"all_reduce", tu.allReduceCosts, tu.allReduceAlgo},
		{"reduce_scatter", tu.reduceScatterCosts, tu.reduceScatterAlgo},
		{"all_gather", tu.allGatherCosts, tu.allGatherAlgo},
		{"broadcast", tu.broadcastCosts, tu.broadcastAlgo},
		{"reduce", tu.reduceCosts, tu.reduceAlgo},
		{"gather", tu.gatherCosts, tu.gatherAlgo},
		{"scatter", tu.gatherCosts, tu.scatterAlgo},
		{"all_to_all", tu.allToAllCosts, tu.allToAllAlgo},
	}
	for _, o := range ops {
		seen := map[uint8]bool{}
		for p := 1; p <= 64; p++ {
			for n := 0; n <= 1<<30; n = max(1, n*2) {
				cs := o.costs(n, p)
				if len(cs) != len(validAlgos[o.op]) {
					t.Fatalf("%s: %d candidates, %d valid algorithms", o.op, len(cs), len(validAlgos[o.op]))
				}
				best := cs[0]
				for i, c := range cs {
					if c.algo != validAlgos[o.op][i] {
						t.Fatalf("%s: candidate %d is algo %d, validAlgos says %d", o.op, i, c.algo, validAlgos[o.op][i])
					}
					if c.cost < 0 {
						t.Fatalf("%s n=%d p=%d: negative cost (overflow?) %v", o.op, n, p, cs)
					}
					if c.cost < best.cost {
						best = c
					}
				}
				if got := o.choose(n, p); got != best.algo {
					t.Errorf("%s n=%d p=%d: chose %d, model says %d (%v)", o.op, n, p, got, best.algo, cs)
				}
				seen[best.algo] = true
			}
		}
		// Every algorithm wins somewhere, or it would be dead code.
		for _, a := range validAlgos[o.op] {
			if !seen[a] {
				t.Errorf("%s: algorithm %d never chosen", o.op, a)
			}
		}
		// Forcing overrides the model.
		for _, a := range validAlgos[o.op] {
			f := tu
			f.Force = map[string]uint8{o.op: a}
			fo := map[string]func(n, p int) uint8{
				"all_reduce": f.allReduceAlgo, "reduce_scatter": f.reduceScatterAlgo, "all_gather": f.allGatherAlgo,
				"broadcast": f.broadcastAlgo, "reduce": f.reduceAlgo, "gather": f.gatherAlgo, "scatter": f.scatterAlgo,
				"all_to_all": f.allToAllAlgo,
			}[o.op]
			for _, np := range [][2]int{{0, 1}, {4, 4}, {1 << 26, 3}} {
				if got := fo(np[0], np[1]); got != a {
					t.Errorf("%s forced to %d: got %d", o.op, a, got)
				}
			}
		}
	}
}

// TestCostModelChoices pins the choices the model makes with the default
// constants, as a readable summary (update it with the constants).
func TestCostModelChoices(t *testing.T) {
	tu := DefaultTuning()
	name := map[uint8]string{}
	for k, v := range algoNames {
		name[v] = k
	}
	want := []struct {
		op   string
		n, p int
		algo string
	}{
		// Small messages: latency-optimal everywhere.
		{"all_reduce", 4 << 10, 2, "rd"}, {"all_reduce", 4 << 10, 3, "rd"}, {"all_reduce", 4 << 10, 8, "rd"}, {"all_reduce", 4 << 10, 16, "rd"},
		// Mid-size: halving/doubling at powers of two.
		{"all_reduce", 1 << 20, 8, "hd"}, {"all_reduce", 256 << 10, 16, "hd"},
		// Large: the ring at 2 ranks (same cost as hd, and pipelined
		// across steps) and where folding costs a whole extra message.
		{"all_reduce", 16 << 20, 2, "ring"}, {"all_reduce", 16 << 20, 3, "ring"}, {"all_reduce", 16 << 20, 5, "ring"},
		{"reduce_scatter", 4 << 10, 8, "hd"}, {"reduce_scatter", 16 << 20, 2, "ring"}, {"reduce_scatter", 16 << 20, 3, "ring"},
		{"all_gather", 4 << 10, 8, "rd"}, {"all_gather", 16 << 20, 3, "ring"},
		{"broadcast", 4 << 10, 4, "tree"}, {"broadcast", 64 << 20, 8, "chain"},
		{"reduce", 4 << 10, 4, "tree"}, {"reduce", 16 << 20, 3, "ring"},
		{"gather", 4 << 10, 8, "tree"}, {"gather", 16 << 20, 8, "direct"}, {"scatter", 4 << 10, 2, "direct"},
		{"all_to_all", 1 << 10, 8, "bruck"}, {"all_to_all", 16 << 20, 8, "pairwise"}, {"all_to_all", 1 << 10, 2, "pairwise"},
	}
	for _, w := range want {
		var got uint8
		switch w.op {
		case "all_reduce":
			got = tu.allReduceAlgo(w.n, w.p)
		case "reduce_scatter":
			got = tu.reduceScatterAlgo(w.n, w.p)
		case "all_gather":
			got = tu.allGatherAlgo(w.n, w.p)
		case "broadcast":
			got = tu.broadcastAlgo(w.n, w.p)
		case "reduce":
			got = tu.reduceAlgo(w.n, w.p)
		case "gather":
			got = tu.gatherAlgo(w.n, w.p)
		case "scatter":
			got = tu.scatterAlgo(w.n, w.p)
		case "all_to_all":
			got = tu.allToAllAlgo(w.n, w.p)
		}
		if name[got] != w.algo {
			t.Errorf("%s %d bytes p=%d: %s, want %s", w.op, w.n, w.p, name[got], w.algo)
		}
	}
}

func TestParseAlgo(t *testing.T) {
	f, err := ParseAlgo("all_reduce=rd, broadcast=chain")
	if err != nil || f["all_reduce"] != AlgoRD || f["broadcast"] != AlgoChain {
		t.Fatalf("got %v %v", f, err)
	}
	f, err = ParseAlgo("ring")
	if err != nil || f["all_reduce"] != AlgoRing || f["reduce"] != AlgoRing || f["reduce_scatter"] != AlgoRing ||
		f["all_gather"] != AlgoRing || f["broadcast"] != 0 {
		t.Fatalf("bare ring: %v %v", f, err)
	}
	f, err = ParseAlgo("tree")
	if err != nil || f["gather"] != AlgoTree || f["scatter"] != AlgoTree || f["broadcast"] != AlgoTree || f["reduce"] != AlgoTree || f["all_reduce"] != 0 {
		t.Fatalf("bare tree: %v %v", f, err)
	}
	f, err = ParseAlgo("all_reduce=hd,all_to_all=bruck,gather=direct")
	if err != nil || f["all_reduce"] != AlgoHD || f["all_to_all"] != AlgoBruck || f["gather"] != AlgoDirect {
		t.Fatalf("got %v %v", f, err)
	}
	for _, bad := range []string{"warp", "broadcast=rd", "all_reduce=tree", "all_to_all=ring", "alll_reduce=ring", "barrier=tree"} {
		if _, err := ParseAlgo(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
