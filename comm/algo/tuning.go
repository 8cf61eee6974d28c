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
//
// Where an op has two algorithms, the choice comes from an alpha-beta-gamma
// cost model over the message size n and the group size p: Alpha is the cost
// of one message, Beta of moving one byte, Gamma of reducing one byte (all
// in picoseconds, integers so that every rank computes the same choice).
//
//	all-reduce  recursive doubling  (lg p [+2 if p is not a power of two]) (a + n b + n g)
//	            ring                2(p-1) a + 2 n (p-1)/p b + n (p-1)/p g
//	broadcast   binomial tree       lg p (a + n b)
//	            pipelined chain     (p-1 + k-1) (a + n/k b), k chunks
//	reduce      binomial tree       lg p (a + n b + n g)
//	            ring + gather       p a + n (p-1)/p (2b + g)
type Tuning struct {
	// ChunkBytes is the pipelining unit of the ring and chain algorithms.
	ChunkBytes int
	// Alpha, Beta, Gamma: the cost model's constants, in picoseconds.
	Alpha, Beta, Gamma int64
	// Force maps an op name ("all_reduce", "broadcast", "reduce") to an
	// algorithm id that overrides the cost model.
	Force map[string]uint8
}

// DefaultTuning is the built-in choice: costs measured on loopback TCP with
// one core per rank (about 15 us a message, 3 GB/s copy and reduce).
func DefaultTuning() Tuning {
	return Tuning{ChunkBytes: 256 << 10, Alpha: 15_000_000, Beta: 300, Gamma: 300}
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

func lg(p int) int64 {
	l := int64(0)
	for 1<<l < p {
		l++
	}
	return l
}

func (t Tuning) choose(opName string, costA, costB int64, a, b uint8) uint8 {
	if f, ok := t.Force[opName]; ok {
		return f
	}
	if costA <= costB {
		return a
	}
	return b
}

func (t Tuning) allReduceAlgo(n, p int) uint8 {
	nn, pp := int64(n), int64(p)
	steps := lg(p)
	if p&(p-1) != 0 {
		steps += 1 // fold in and out: about one more exchange round
	}
	rd := steps * (t.Alpha + nn*t.Beta + nn*t.Gamma)
	ring := 2*(pp-1)*t.Alpha + (2*nn*(pp-1)/pp)*t.Beta + (nn*(pp-1)/pp)*t.Gamma
	return t.choose("all_reduce", rd, ring, AlgoRD, AlgoRing)
}

func (t Tuning) broadcastAlgo(n, p int) uint8 {
	nn, pp := int64(n), int64(p)
	k := max(1, (nn+int64(t.ChunkBytes)-1)/int64(t.ChunkBytes))
	tree := lg(p) * (t.Alpha + nn*t.Beta)
	chain := (pp - 1 + k - 1) * (t.Alpha + nn/k*t.Beta)
	return t.choose("broadcast", tree, chain, AlgoTree, AlgoChain)
}

func (t Tuning) reduceAlgo(n, p int) uint8 {
	nn, pp := int64(n), int64(p)
	tree := lg(p) * (t.Alpha + nn*t.Beta + nn*t.Gamma)
	ring := pp*t.Alpha + (nn*(pp-1)/pp)*(2*t.Beta+t.Gamma)
	return t.choose("reduce", tree, ring, AlgoTree, AlgoRing)
}
