package algo

import "testing"

func TestCostModelChoices(t *testing.T) {
	tu := DefaultTuning()
	// Small messages take the latency-optimal algorithm, large ones the
	// bandwidth-optimal one, at every group size; the crossover moves with p.
	for _, p := range []int{2, 3, 4, 5, 8, 16} {
		if a := tu.allReduceAlgo(4<<10, p); a != AlgoRD {
			t.Errorf("all_reduce 4 KiB p=%d: algo %d, want rd", p, a)
		}
		if a := tu.allReduceAlgo(16<<20, p); a != AlgoRing {
			t.Errorf("all_reduce 16 MiB p=%d: algo %d, want ring", p, a)
		}
		if a := tu.broadcastAlgo(4<<10, p); a != AlgoTree {
			t.Errorf("broadcast 4 KiB p=%d: algo %d, want tree", p, a)
		}
		if a := tu.reduceAlgo(4<<10, p); a != AlgoTree {
			t.Errorf("reduce 4 KiB p=%d: algo %d, want tree", p, a)
		}
		if a := tu.reduceAlgo(16<<20, p); a != AlgoRing {
			t.Errorf("reduce 16 MiB p=%d: algo %d, want ring", p, a)
		}
	}
	if a := tu.broadcastAlgo(64<<20, 8); a != AlgoChain {
		t.Errorf("broadcast 64 MiB p=8: algo %d, want chain", a)
	}
	tu.Force = map[string]uint8{"all_reduce": AlgoRing}
	if a := tu.allReduceAlgo(4, 4); a != AlgoRing {
		t.Errorf("forced ring ignored")
	}
}

func TestParseAlgo(t *testing.T) {
	f, err := ParseAlgo("all_reduce=rd, broadcast=chain")
	if err != nil || f["all_reduce"] != AlgoRD || f["broadcast"] != AlgoChain {
		t.Fatalf("got %v %v", f, err)
	}
	f, err = ParseAlgo("ring")
	if err != nil || f["all_reduce"] != AlgoRing || f["reduce"] != AlgoRing || f["broadcast"] != 0 {
		t.Fatalf("bare ring: %v %v", f, err)
	}
	for _, bad := range []string{"warp", "broadcast=rd", "all_reduce=tree"} {
		if _, err := ParseAlgo(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
