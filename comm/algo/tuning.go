package algo

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Algorithm ids, carried in every message header so that ranks which chose
// differently (e.g. a different GDIST_ALGO) fail with a mismatch instead of
// corrupting data.
const (
	AlgoRing     uint8 = 1 // chunked, pipelined ring
	AlgoRD       uint8 = 2 // recursive doubling (non-powers of two fold in)
	AlgoTree     uint8 = 3 // binomial tree
	AlgoChain    uint8 = 4 // chunked, pipelined chain
	AlgoDirect   uint8 = 5 // root talks to every rank directly
	AlgoPairwise uint8 = 6 // p-1 rounds of pairwise exchange
	AlgoDissem   uint8 = 7 // dissemination barrier
	AlgoP2P      uint8 = 8
)

var algoNames = map[string]uint8{"ring": AlgoRing, "rd": AlgoRD, "tree": AlgoTree, "chain": AlgoChain}

// Tuning holds the algorithm choices. Every rank of a Comm must use the same.
type Tuning struct {
	// ChunkBytes is the pipelining unit of the ring and chain algorithms.
	ChunkBytes int
	// SmallBytes: all-reduce messages up to this size use recursive
	// doubling, larger ones the ring.
	SmallAllReduce int
	// SmallBroadcast: broadcasts up to this size use a binomial tree,
	// larger ones a pipelined chain. Likewise SmallReduce for reduce.
	SmallBroadcast int
	SmallReduce    int
	// Force maps an op name ("all_reduce", "broadcast", "reduce") to an
	// algorithm id that overrides the size rule.
	Force map[string]uint8
}

// DefaultTuning is the built-in choice.
func DefaultTuning() Tuning {
	return Tuning{ChunkBytes: 256 << 10, SmallAllReduce: 64 << 10, SmallBroadcast: 256 << 10, SmallReduce: 64 << 10}
}

// TuningFromEnv starts from DefaultTuning and applies:
//
//	GDIST_ALGO="ring" | "all_reduce=rd,broadcast=chain,reduce=tree" ...
//	   (all_reduce: ring|rd; broadcast: tree|chain; reduce: tree|ring)
//	GDIST_CHUNK_BYTES=262144
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

var validAlgos = map[string][]uint8{
	"all_reduce": {AlgoRing, AlgoRD},
	"broadcast":  {AlgoTree, AlgoChain},
	"reduce":     {AlgoTree, AlgoRing},
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
			return nil, fmt.Errorf("unknown algorithm %q (ring, rd, tree, chain)", algo)
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

func (t Tuning) pick(opName string, bytes, small int, smallAlgo, bigAlgo uint8) uint8 {
	if a, ok := t.Force[opName]; ok {
		return a
	}
	if bytes <= small {
		return smallAlgo
	}
	return bigAlgo
}
