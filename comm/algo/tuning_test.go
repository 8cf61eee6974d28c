package algo

import "testing"

// testLayouts are the layouts the chooser tests cover: one host of 1..64
// ranks, and groups spread over hosts (m ranks on each of H hosts, and
// hosts of different sizes).
func testLayouts() []Layout {
	var ls []Layout
	for p := 1; p <= 64; p++ {
		ls = append(ls, OneHost(p))
	}
	for _, hm := range [][2]int{{2, 1}, {2, 2}, {2, 4}, {3, 2}, {4, 8}, {8, 2}, {8, 8}} {
		ls = append(ls, hostsOf(hm[0], hm[1]))
	}
	for _, ids := range [][]string{{"a", "a", "b"}, {"a", "b", "b", "b", "c"}, {"a", "b", "a", "b"}} {
		ls = append(ls, NewLayout(ids))
	}
	return ls
}

// hostsOf is the layout of m ranks on each of h hosts, a host's ranks
// consecutive.
func hostsOf(h, m int) Layout {
	ids := make([]string, h*m)
	for r := range ids {
		ids[r] = string(rune('A' + r/m))
	}
	return NewLayout(ids)
}

// TestChooserFollowsModel checks, for every collective with a choice, that
// the chosen algorithm is the cheapest by the model (the first of equals),
// over sizes from 0 to 1 GiB and the test layouts; that every algorithm
// wins somewhere (or it would be dead code); and that forcing overrides the
// model.
func TestChooserFollowsModel(t *testing.T) {
	tu := DefaultTuning()
	for opName, rows := range byOp {
		seen := map[uint8]bool{}
		for _, l := range testLayouts() {
			for n := 0; n <= 1<<30; n = max(1, n*2) {
				best := rows[0]
				bestCost := best.Cost(tu, n, l)
				for _, a := range rows {
					c := a.Cost(tu, n, l)
					if c < 0 {
						t.Fatalf("%s/%s n=%d p=%d: negative cost (overflow?) %d", opName, a.Name, n, l.Size(), c)
					}
					if c < bestCost {
						best, bestCost = a, c
					}
				}
				if got := tu.choose(opName, n, l); got != best {
					t.Errorf("%s n=%d layout %v: chose %s, model says %s", opName, n, l, got.Name, best.Name)
				}
				seen[best.ID] = true
			}
		}
		for _, a := range rows {
			if !seen[a.ID] {
				t.Errorf("%s: algorithm %s never chosen", opName, a.Name)
			}
			f := tu
			f.Force = map[string]uint8{opName: a.ID}
			for _, np := range [][2]int{{0, 1}, {4, 4}, {1 << 26, 3}} {
				if got := f.choose(opName, np[0], OneHost(np[1])); got != a {
					t.Errorf("%s forced to %s: got %s", opName, a.Name, got.Name)
				}
			}
		}
	}
}

// TestCostModelChoices pins the choices the model makes with the default
// constants, as a readable summary (update it with the constants).
func TestCostModelChoices(t *testing.T) {
	tu := DefaultTuning()
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
		got := tu.choose(w.op, w.n, OneHost(w.p)).Name
		if got != w.algo {
			t.Errorf("%s %d bytes p=%d: %s, want %s", w.op, w.n, w.p, got, w.algo)
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
