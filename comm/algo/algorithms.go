package algo

import (
	"fmt"
	"sort"
	"strings"
)

// An Algorithm is one way to run one collective: a row of the table below.
// Its code lives in a file of its own, named collective_algorithm.go
// (allreduce_ring.go, broadcast_tree.go, ...), with its cost function.
type Algorithm struct {
	Op   string // the collective: "all_reduce", "broadcast", ...
	Name string // what GDIST_ALGO calls it: "ring", "tree", ...
	// ID is carried in every message header, so that ranks which chose
	// differently fail with a mismatch instead of corrupting data. Rows of
	// one Name share one ID.
	ID uint8
	// Cost is the alpha-beta-gamma model's time of the collective on n
	// bytes (for the gather-like ops the whole p-block buffer) over a
	// group of ranks laid out as l, in picoseconds (see Tuning). Among the
	// rows of an Op, the cheapest runs (the first of equals). Algorithms
	// that ignore where the ranks are take their cost function of (n, p)
	// through flat.
	Cost func(t Tuning, n int, l Layout) int64
	run  func(o *op, x call) error
}

// call is what a collective was called with, as its algorithms see it
// (collectives.go fills it in).
type call struct {
	buf      []byte // all_reduce, broadcast, reduce: the data, in place
	dst, src []byte // the gather-like ops, reduce_scatter, all_to_all
	work     []byte // reduce (buf at the root), reduce_scatter: scratch of p blocks
	seg      []int  // all_gather, reduce_scatter: byte bounds of the p blocks
	root     int
}

// Algorithm ids (see Algorithm.ID).
const (
	AlgoRing     uint8 = 1  // chunked, pipelined ring
	AlgoRD       uint8 = 2  // recursive doubling (non-powers of two fold in)
	AlgoTree     uint8 = 3  // binomial tree
	AlgoChain    uint8 = 4  // chunked, pipelined chain
	AlgoDirect   uint8 = 5  // root talks to every rank directly
	AlgoPairwise uint8 = 6  // p-1 rounds of pairwise exchange
	AlgoDissem   uint8 = 7  // dissemination barrier
	AlgoP2P      uint8 = 8  // point-to-point Send/Recv (not a collective's)
	AlgoHD       uint8 = 9  // recursive halving (reduce-scatter) [+ doubling (all-gather)]
	AlgoBruck    uint8 = 10 // Bruck's all-to-all
	AlgoHier     uint8 = 11 // hierarchical: inside hosts, then across them
	// AlgoZeroCopy marks the exchange of the zero-copy all-reduce
	// (allreduce_zerocopy.go), which is not a row of the table: it runs
	// when every rank's buffer lies in shared memory, whatever the cost.
	AlgoZeroCopy uint8 = 12
	// AlgoStaged marks the set-up exchange of the staged all-reduce of
	// ordinary buffers over shared memory (allreduce_staged.go), which is
	// not a row of the table either.
	AlgoStaged uint8 = 13
)

// flat is the cost function of an algorithm that ignores the layout: f's
// cost over l.Size() ranks with the links of the slowest link l spans
// (Tuning.over).
func flat(f func(t Tuning, n, p int) int64) func(Tuning, int, Layout) int64 {
	return func(t Tuning, n int, l Layout) int64 { return f(t.over(l), n, l.Size()) }
}

// table holds every algorithm of every collective, each collective's rows
// in the order the cost model prefers them on a tie. TestTable checks that
// every algorithm function of the package has its row.
var table = []Algorithm{
	{"all_reduce", "ring", AlgoRing, flat(allReduceRingCost), (*op).allReduceRing},
	{"all_reduce", "hd", AlgoHD, flat(allReduceHDCost), (*op).allReduceHD},
	{"all_reduce", "rd", AlgoRD, flat(allReduceRDCost), (*op).allReduceRD},
	{"all_reduce", "hier", AlgoHier, allReduceHierCost, (*op).allReduceHier},
	{"reduce_scatter", "ring", AlgoRing, flat(reduceScatterRingCost), (*op).reduceScatterRing},
	{"reduce_scatter", "hd", AlgoHD, flat(reduceScatterHDCost), (*op).reduceScatterHD},
	{"all_gather", "ring", AlgoRing, flat(allGatherRingCost), (*op).allGatherRing},
	{"all_gather", "rd", AlgoRD, flat(allGatherRDCost), (*op).allGatherRD},
	{"broadcast", "tree", AlgoTree, flat(broadcastTreeCost), (*op).broadcastTree},
	{"broadcast", "chain", AlgoChain, flat(broadcastChainCost), (*op).broadcastChain},
	{"reduce", "tree", AlgoTree, flat(reduceTreeCost), (*op).reduceTree},
	{"reduce", "ring", AlgoRing, flat(reduceRingCost), (*op).reduceRing},
	{"reduce", "hd", AlgoHD, flat(reduceHDCost), (*op).reduceHD},
	{"gather", "direct", AlgoDirect, flat(directCost), (*op).gatherDirect},
	{"gather", "tree", AlgoTree, flat(treeGatherCost), (*op).gatherTree},
	{"scatter", "direct", AlgoDirect, flat(directCost), (*op).scatterDirect},
	{"scatter", "tree", AlgoTree, flat(treeGatherCost), (*op).scatterTree},
	{"all_to_all", "pairwise", AlgoPairwise, flat(pairwiseCost), (*op).allToAllPairwise},
	{"all_to_all", "bruck", AlgoBruck, flat(bruckCost), (*op).allToAllBruck},
	{"barrier", "dissemination", AlgoDissem, flat(barrierCost), (*op).barrierDissemination},
}

// byOp indexes table by collective. (It is filled in by init: cost
// functions that weigh other rows, like the hierarchical all-reduce's,
// read it, and table refers to them.)
var byOp map[string][]*Algorithm

func init() {
	byOp = map[string][]*Algorithm{}
	for i := range table {
		a := &table[i]
		byOp[a.Op] = append(byOp[a.Op], a)
	}
}

// Algorithms returns the table: every algorithm of every collective.
func Algorithms() []Algorithm { return append([]Algorithm(nil), table...) }

// choose returns the algorithm of collective opName for n bytes over the
// group l: the forced one (Force), else the cheapest by the cost model.
func (t Tuning) choose(opName string, n int, l Layout) *Algorithm {
	if f, ok := t.Force[opName]; ok {
		for _, a := range byOp[opName] {
			if a.ID == f {
				return a
			}
		}
	}
	a, _ := t.cheapest(opName, n, l, 0)
	return a
}

// cheapest returns the algorithm of collective opName that the cost model
// prefers for n bytes over l, ignoring Force and the row with ID skip, and
// its cost.
func (t Tuning) cheapest(opName string, n int, l Layout, skip uint8) (*Algorithm, int64) {
	var best *Algorithm
	var cost int64
	for _, a := range byOp[opName] {
		if a.ID == skip && skip != 0 {
			continue
		}
		if best == nil && len(byOp[opName]) == 1 {
			return a, 0
		}
		if c := a.Cost(t, n, l); best == nil || c < cost {
			best, cost = a, c
		}
	}
	return best, cost
}

// run runs collective opName on n bytes with the algorithm chosen for it,
// which every message of the op names.
func (o *op) run(opName string, n int, x call) error {
	a := o.tun.choose(opName, n, o.c.layout)
	o.hdr.Algo = a.ID
	return a.run(o, x)
}

// ParseAlgo parses a GDIST_ALGO value ("ring", or
// "all_reduce=hd,broadcast=chain"): it maps each collective to the ID of
// the algorithm forced on it. A bare name applies to every collective that
// has an algorithm of that name.
func ParseAlgo(v string) (map[string]uint8, error) {
	out := map[string]uint8{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		opName, name, hasOp := strings.Cut(part, "=")
		if !hasOp {
			name, opName = opName, ""
		}
		known := false
		for _, a := range table {
			known = known || a.Name == name
		}
		if !known {
			return nil, fmt.Errorf("unknown algorithm %q (%s)", name, strings.Join(algorithmNames(), ", "))
		}
		if _, ok := byOp[opName]; opName != "" && !ok {
			return nil, fmt.Errorf("unknown op %q in %q", opName, part)
		}
		matched := false
		for _, a := range table {
			if a.Name == name && (opName == "" || a.Op == opName) {
				out[a.Op] = a.ID
				matched = true
			}
		}
		if !matched {
			return nil, fmt.Errorf("algorithm %q does not apply to %q", name, opName)
		}
	}
	return out, nil
}

func algorithmNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, a := range table {
		if !seen[a.Name] {
			seen[a.Name] = true
			names = append(names, a.Name)
		}
	}
	sort.Strings(names)
	return names
}
