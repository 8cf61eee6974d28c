package algo

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Algorithm ids, carried in every message header so that ranks which chose
// differently (e.g. a different GDIST_ALGO) fail with a mismatch instead of
// corrupting data.
const (
	AlgoRing     uint8 = 1  // chunked, pipelined ring
	AlgoRD       uint8 = 2  // recursive doubling (non-powers of two fold in)
	AlgoTree     uint8 = 3  // binomial tree
	AlgoChain    uint8 = 4  // chunked, pipelined chain
	AlgoDirect   uint8 = 5  // root talks to every rank directly
	AlgoPairwise uint8 = 6  // p-1 rounds of pairwise exchange
	AlgoDissem   uint8 = 7  // dissemination barrier
	AlgoP2P      uint8 = 8  // point-to-point Send/Recv
	AlgoHD       uint8 = 9  // recursive halving (reduce-scatter) [+ doubling (all-gather)]
	AlgoBruck    uint8 = 10 // Bruck's all-to-all
)

var algoNames = map[string]uint8{
	"ring": AlgoRing, "rd": AlgoRD, "hd": AlgoHD, "tree": AlgoTree, "chain": AlgoChain,
	"direct": AlgoDirect, "pairwise": AlgoPairwise, "bruck": AlgoBruck,
}

// validAlgos lists, per op, the algorithms GDIST_ALGO may force, in the
// order the cost model prefers them on a tie.
var validAlgos = map[string][]uint8{
	"all_reduce":     {AlgoRing, AlgoHD, AlgoRD},
	"reduce_scatter": {AlgoRing, AlgoHD},
	"all_gather":     {AlgoRing, AlgoRD},
	"broadcast":      {AlgoTree, AlgoChain},
	"reduce":         {AlgoTree, AlgoRing, AlgoHD},
	"gather":         {AlgoDirect, AlgoTree},
	"scatter":        {AlgoDirect, AlgoTree},
	"all_to_all":     {AlgoPairwise, AlgoBruck},
}

// Tuning holds the algorithm choices. Every rank of a Comm must use the same.
//
// Where an op has several algorithms, the choice comes from an
// alpha-beta-gamma cost model over the message size n (bytes; for the
// gather-like ops the whole p-block buffer) and the group size p: Alpha is
// the cost of one message, Beta of moving one byte, Gamma of reducing one
// byte (all in picoseconds, integers so that every rank computes the same
// choice). q is the largest power of two <= p and f = 1 if p != q (the
// extra ranks fold in and out: one more round each way), else 0; lg is
// log2 rounded up.
//
//	all-reduce      ring      2(p-1) a + 2n(p-1)/p b + n(p-1)/p g
//	                hd        2(lg q + f) a + (2n(q-1)/q + 2fn) b + (n(q-1)/q + fn) g
//	                rd        (lg q + 2f) (a + n b) + (lg q + f) n g
//	reduce-scatter  ring      (p-1) a + n(p-1)/p (b + g)
//	                hd        (lg q + 2f) a + (n(q-1)/q + fn + fn/p) b + (n(q-1)/q + fn) g
//	all-gather      ring      (p-1) a + n(p-1)/p b
//	                rd        (lg q + 2f) a + (n(q-1)/q + fn/p + fn) b
//	broadcast       tree      lg p (a + n b)
//	                chain     (p-1 + k-1) (a + n/k b), k chunks
//	reduce          tree      lg p (a + n b + n g)
//	                ring      reduce-scatter ring + (p-1) a + n(p-1)/p b   (gather at the root)
//	                hd        reduce-scatter hd + (q-1) a + n(p-1)/p b
//	gather/scatter  direct    (p-1) a + n(p-1)/p b
//	                tree      lg p a + n lg(p)/2 b   (blocks relayed lg(p)/2 hops on average)
//	all-to-all      pairwise  (p-1) (a + n/p b)
//	                bruck     lg p (a + 2n b)   (half the blocks sent, and packed and unpacked, per round)
//	barrier         dissemination only: lg p a, which no other barrier beats
//
// The relayed and packed bytes count in the tree and Bruck costs because
// every backend here shares one host's memory bandwidth: a byte relayed is
// a byte copied again.
type Tuning struct {
	// ChunkBytes is the pipelining unit of the ring, chain and
	// halving/doubling algorithms.
	ChunkBytes int
	// Alpha, Beta, Gamma: the cost model's constants, in picoseconds.
	Alpha, Beta, Gamma int64
	// Force maps an op name ("all_reduce", "reduce_scatter", "all_gather",
	// "broadcast", "reduce", "gather", "scatter", "all_to_all") to an
	// algorithm id that overrides the cost model.
	Force map[string]uint8
}

// DefaultTuning is the built-in choice. The costs: about 15 us a message
// (in-process ranks measure 10-20 us, loopback TCP more), 3 GB/s moved, and
// 10 GB/s reduced (the SIMD kernels on float32 at L3 sizes; they run at
// 30 GB/s in L2 and 6 GB/s from DRAM; the plain-Go loops managed 3). With
// these, 2 ranks switch from recursive doubling to the ring at about
// 256 KiB, which is where the measured curves cross. The chunk of 512 KiB
// measured best or level with 256 KiB for 1-64 MiB all-reduce on 2 and 4
// in-process ranks and on loopback TCP (fewer messages per op; a chunk and
// its staging copy still fit in L2).
func DefaultTuning() Tuning {
	return Tuning{ChunkBytes: 512 << 10, Alpha: 15_000_000, Beta: 300, Gamma: 100}
}

// TuningFromEnv starts from DefaultTuning and applies:
//
//	GDIST_ALGO="ring" | "all_reduce=hd,broadcast=chain,reduce=tree" ...
//	   all_reduce: ring|hd|rd; reduce_scatter: ring|hd; all_gather: ring|rd;
//	   broadcast: tree|chain; reduce: tree|ring|hd; gather, scatter:
//	   direct|tree; all_to_all: pairwise|bruck. A bare name applies to
//	   every op that has that algorithm.
//	GDIST_CHUNK_BYTES=524288
//
// Malformed values are reported on stderr and ignored.
func TuningFromEnv() Tuning {
	t := DefaultTuning()
	if v := os.Getenv("GDIST_CHUNK_BYTES"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1024 {
			t.ChunkBytes = n
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_CHUNK_BYTES=%q (want an integer >= 1024)\n", v)
		}
	}
	if v := os.Getenv("GDIST_ALGO"); v != "" {
		f, err := ParseAlgo(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_ALGO: %v\n", err)
		} else {
			t.Force = f
		}
	}
	return t
}

// ParseAlgo parses a GDIST_ALGO value.
func ParseAlgo(v string) (map[string]uint8, error) {
	out := map[string]uint8{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		opName, algo, hasOp := strings.Cut(part, "=")
		if !hasOp {
			algo, opName = opName, ""
		}
		id, ok := algoNames[algo]
		if !ok {
			names := make([]string, 0, len(algoNames))
			for n := range algoNames {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("unknown algorithm %q (%s)", algo, strings.Join(names, ", "))
		}
		if _, ok := validAlgos[opName]; opName != "" && !ok {
			return nil, fmt.Errorf("unknown op %q in %q", opName, part)
		}
		matched := false
		for o, ids := range validAlgos {
			if opName != "" && o != opName {
				continue
			}
			for _, x := range ids {
				if x == id {
					out[o] = id
					matched = true
				}
			}
		}
		if !matched {
			return nil, fmt.Errorf("algorithm %q does not apply to %q", algo, opName)
		}
	}
	return out, nil
}

// lg is log2(p) rounded up.
func lg(p int) int64 {
	l := int64(0)
	for 1<<l < p {
		l++
	}
	return l
}

// pof2 returns the largest power of two q <= p, lg q, and f = 1 if p != q.
func pof2(p int) (q, lgq, f int64) {
	q = 1
	for q*2 <= int64(p) {
		q *= 2
		lgq++
	}
	if q != int64(p) {
		f = 1
	}
	return q, lgq, f
}

type cand struct {
	algo uint8
	cost int64
}

// pick returns the forced algorithm for opName, or the cheapest candidate
// (the first of equals).
func (t Tuning) pick(opName string, cs ...cand) uint8 {
	if f, ok := t.Force[opName]; ok {
		return f
	}
	best := cs[0]
	for _, c := range cs[1:] {
		if c.cost < best.cost {
			best = c
		}
	}
	return best.algo
}

// The costs, one function per op, in the order of the table above.

func (t Tuning) allReduceCosts(n, p int) []cand {
	nn, pp := int64(n), int64(p)
	q, lgq, f := pof2(p)
	a, b, g := t.Alpha, t.Beta, t.Gamma
	ring := 2*(pp-1)*a + (2*nn*(pp-1)/pp)*b + (nn*(pp-1)/pp)*g
	hd := 2*(lgq+f)*a + (2*nn*(q-1)/q+2*f*nn)*b + (nn*(q-1)/q+f*nn)*g
	rd := (lgq+2*f)*(a+nn*b) + (lgq+f)*nn*g
	return []cand{{AlgoRing, ring}, {AlgoHD, hd}, {AlgoRD, rd}}
}

func (t Tuning) reduceScatterCosts(n, p int) []cand {
	nn, pp := int64(n), int64(p)
	q, lgq, f := pof2(p)
	a, b, g := t.Alpha, t.Beta, t.Gamma
	ring := (pp-1)*a + (nn*(pp-1)/pp)*(b+g)
	hd := (lgq+2*f)*a + (nn*(q-1)/q+f*nn+f*nn/pp)*b + (nn*(q-1)/q+f*nn)*g
	return []cand{{AlgoRing, ring}, {AlgoHD, hd}}
}

func (t Tuning) allGatherCosts(n, p int) []cand {
	nn, pp := int64(n), int64(p)
	q, lgq, f := pof2(p)
	a, b := t.Alpha, t.Beta
	ring := (pp-1)*a + (nn*(pp-1)/pp)*b
	rd := (lgq+2*f)*a + (nn*(q-1)/q+f*nn/pp+f*nn)*b
	return []cand{{AlgoRing, ring}, {AlgoRD, rd}}
}

func (t Tuning) broadcastCosts(n, p int) []cand {
	nn, pp := int64(n), int64(p)
	k := max(1, (nn+int64(t.ChunkBytes)-1)/int64(t.ChunkBytes))
	tree := lg(p) * (t.Alpha + nn*t.Beta)
	chain := (pp - 1 + k - 1) * (t.Alpha + nn/k*t.Beta)
	return []cand{{AlgoTree, tree}, {AlgoChain, chain}}
}

func (t Tuning) reduceCosts(n, p int) []cand {
	nn, pp := int64(n), int64(p)
	q, _, _ := pof2(p)
	rs := t.reduceScatterCosts(n, p)
	gather := (nn * (pp - 1) / pp) * t.Beta
	tree := lg(p) * (t.Alpha + nn*t.Beta + nn*t.Gamma)
	ring := rs[0].cost + (pp-1)*t.Alpha + gather
	hd := rs[1].cost + (q-1)*t.Alpha + gather
	return []cand{{AlgoTree, tree}, {AlgoRing, ring}, {AlgoHD, hd}}
}

func (t Tuning) gatherCosts(n, p int) []cand {
	nn, pp := int64(n), int64(p)
	direct := (pp-1)*t.Alpha + (nn*(pp-1)/pp)*t.Beta
	tree := lg(p)*t.Alpha + nn*lg(p)/2*t.Beta
	return []cand{{AlgoDirect, direct}, {AlgoTree, tree}}
}

func (t Tuning) allToAllCosts(n, p int) []cand {
	nn, pp := int64(n), int64(p)
	pairwise := (pp - 1) * (t.Alpha + nn/pp*t.Beta)
	bruck := lg(p) * (t.Alpha + 2*nn*t.Beta)
	return []cand{{AlgoPairwise, pairwise}, {AlgoBruck, bruck}}
}

func (t Tuning) allReduceAlgo(n, p int) uint8 {
	return t.pick("all_reduce", t.allReduceCosts(n, p)...)
}

func (t Tuning) reduceScatterAlgo(n, p int) uint8 {
	return t.pick("reduce_scatter", t.reduceScatterCosts(n, p)...)
}

func (t Tuning) allGatherAlgo(n, p int) uint8 {
	return t.pick("all_gather", t.allGatherCosts(n, p)...)
}

func (t Tuning) broadcastAlgo(n, p int) uint8 {
	return t.pick("broadcast", t.broadcastCosts(n, p)...)
}

func (t Tuning) reduceAlgo(n, p int) uint8 {
	return t.pick("reduce", t.reduceCosts(n, p)...)
}

func (t Tuning) gatherAlgo(n, p int) uint8 {
	return t.pick("gather", t.gatherCosts(n, p)...)
}

func (t Tuning) scatterAlgo(n, p int) uint8 {
	return t.pick("scatter", t.gatherCosts(n, p)...)
}

func (t Tuning) allToAllAlgo(n, p int) uint8 {
	return t.pick("all_to_all", t.allToAllCosts(n, p)...)
}
