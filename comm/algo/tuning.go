package algo

import (
	"fmt"
	"math"
	"os"
	"strconv"
)

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
//
// Alpha and Beta are the costs of the links inside a host. A group whose
// ranks span several hosts (its Layout) pays InterAlpha and InterBeta on
// the links between hosts: the flat algorithms above, which do not know
// where the ranks are, are costed with them throughout (a ring or a round
// of exchanges goes at the pace of its slowest link), and the hierarchical
// all-reduce (allreduce_hierarchical.go) adds up its phases, each costed
// on the links it uses:
//
//	all-reduce      hier      m ranks on each of H hosts, the cheapest of
//	                 rs:      reduce-scatter(n, m) + all-reduce(n/m, H) + all-gather(n, m)
//	                 ar:      all-reduce(n, m) + all-reduce(n, H)
//	                 leader:  reduce(n, m) + all-reduce(n, H) + broadcast(n, m)
//	                          (uneven hosts: leader only, m the largest host)
//
// where each phase is the cheapest algorithm of its collective, inside a
// host at Alpha, Beta, across hosts at InterAlpha and at InterBeta times
// the number of the host's ranks whose messages share its link at once
// (m in rs and ar, 1 in leader).
type Tuning struct {
	// ChunkBytes is the pipelining unit of the ring, chain and
	// halving/doubling algorithms.
	ChunkBytes int
	// Alpha, Beta, Gamma: the cost model's constants, in picoseconds.
	Alpha, Beta, Gamma int64
	// InterAlpha, InterBeta: the cost of a message and of a byte between
	// ranks on different hosts, in picoseconds.
	InterAlpha, InterBeta int64
	// Force maps an op name ("all_reduce", "reduce_scatter", "all_gather",
	// "broadcast", "reduce", "gather", "scatter", "all_to_all") to an
	// algorithm id that overrides the cost model.
	Force map[string]uint8

	// ZeroCopyMin is the smallest all-reduce (bytes) that tries the
	// zero-copy path over a SharedMemory transport (0: never);
	// ZeroCopyChunk its unit of work (allreduce_zerocopy.go).
	ZeroCopyMin, ZeroCopyChunk int

	// StagedMin is the smallest all-reduce (bytes) of ordinary buffers
	// that runs staged over a SharedMemory transport (0: never) in groups
	// of more than 2 ranks, StagedMinPair in groups of 2; StagedBytes its
	// piece, the size of each rank's two staging regions
	// (allreduce_staged.go).
	StagedMin, StagedMinPair, StagedBytes int

	// Serial runs the ring's and the pairwise exchanges' sends and
	// receives on the calling goroutine, in chunks of the transport's
	// eager size, where every peer takes eager sends and shares the
	// memory (shm, auto on one host; see serialChunk in pipeline.go);
	// false keeps a sender goroutine beside the receiver.
	Serial bool

	hierPlan hierKind // tests: the hierarchical all-reduce's plan, if not hierNone
}

// DefaultTuning is the built-in choice. The costs: about 15 us a message
// (in-process ranks measure 10-20 us, loopback TCP more), 3 GB/s moved, and
// 10 GB/s reduced (the SIMD kernels on float32 at L3 sizes; they run at
// 30 GB/s in L2 and 6 GB/s from DRAM; the plain-Go loops managed 3). With
// these, 2 ranks switch from recursive doubling to the ring at about
// 256 KiB, which is where the measured curves cross. The chunk of 512 KiB
// measured best or level with 256 KiB for 1-64 MiB all-reduce on 2 and 4
// in-process ranks and on loopback TCP (fewer messages per op; a chunk and
// its staging copy still fit in L2). The tcp backend has since moved to
// 4 MiB (tcp.ChunkBytes), once its receives stopped copying early chunks.
//
// Between hosts: 50 us a message and 1 GB/s (8 Gbit/s, a 10 Gbit/s NIC
// with TCP's overheads) per host.
func DefaultTuning() Tuning {
	return Tuning{ChunkBytes: 512 << 10, Alpha: 15_000_000, Beta: 300, Gamma: 100,
		InterAlpha: 50_000_000, InterBeta: 1000, ZeroCopyMin: 128 << 10, ZeroCopyChunk: 64 << 10,
		StagedMin: 128 << 10, StagedMinPair: 1, StagedBytes: 1 << 20, Serial: true}
}

// over returns t with the link costs of the slowest link of l: the
// inter-host ones if l spans several hosts.
func (t Tuning) over(l Layout) Tuning {
	if l.Hosts() > 1 {
		t.Alpha, t.Beta = t.InterAlpha, t.InterBeta
	}
	return t
}

// TuningFromEnv is the one place that reads the tuning's environment
// variables (NewComm calls it; Comms made by Split inherit their parent's
// tuning): it starts from base (DefaultTuning, or a backend's own) and
// applies:
//
//	GDIST_ALGO="ring" | "all_reduce=hd,broadcast=chain,reduce=tree" ...
//	   all_reduce: ring|hd|rd|hier; reduce_scatter: ring|hd; all_gather: ring|rd;
//	   broadcast: tree|chain; reduce: tree|ring|hd; gather, scatter:
//	   direct|tree; all_to_all: pairwise|bruck. A bare name applies to
//	   every op that has that algorithm.
//	GDIST_CHUNK_BYTES=524288
//	GDIST_ZEROCOPY_MIN=131072        smallest zero-copy collective, bytes (0: none)
//	GDIST_ZEROCOPY_CHUNK=65536       its unit of work, bytes
//	GDIST_STAGED_MIN=131072          smallest staged all-reduce of ordinary buffers, bytes (0: none), 3+ ranks (and 2 unless:)
//	GDIST_STAGED_MIN_PAIR=1          the same for 2 ranks
//	GDIST_STAGED_BYTES=1048576       its piece, bytes (>= 4096)
//	GDIST_SERIAL=1                   0: a sender goroutine beside the receiver (Tuning.Serial)
//	GDIST_INTER_HOST_GBPS=8          bandwidth between hosts, in Gbit/s
//	GDIST_INTER_HOST_LATENCY_US=50   latency of a message between hosts
//
// Malformed values are reported on stderr and ignored.
func TuningFromEnv(base Tuning) Tuning {
	t := base
	if v := os.Getenv("GDIST_INTER_HOST_GBPS"); v != "" {
		// 1 Gbit/s is 8000 ps a byte.
		if g, err := strconv.ParseFloat(v, 64); err == nil && g > 0 && g < 1e6 {
			t.InterBeta = max(1, int64(math.Round(8000/g)))
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_INTER_HOST_GBPS=%q (want Gbit/s > 0)\n", v)
		}
	}
	if v := os.Getenv("GDIST_INTER_HOST_LATENCY_US"); v != "" {
		if us, err := strconv.ParseFloat(v, 64); err == nil && us >= 0 && us < 1e7 {
			t.InterAlpha = int64(math.Round(us * 1e6))
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_INTER_HOST_LATENCY_US=%q (want microseconds >= 0)\n", v)
		}
	}
	if v := os.Getenv("GDIST_CHUNK_BYTES"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1024 {
			t.ChunkBytes = n
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_CHUNK_BYTES=%q (want an integer >= 1024)\n", v)
		}
	}
	if v := os.Getenv("GDIST_ZEROCOPY_MIN"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			t.ZeroCopyMin = n
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_ZEROCOPY_MIN=%q (want bytes >= 0)\n", v)
		}
	}
	if v := os.Getenv("GDIST_ZEROCOPY_CHUNK"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1024 {
			t.ZeroCopyChunk = n
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_ZEROCOPY_CHUNK=%q (want an integer >= 1024)\n", v)
		}
	}
	if v := os.Getenv("GDIST_STAGED_MIN"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			t.StagedMin, t.StagedMinPair = n, n
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_STAGED_MIN=%q (want bytes >= 0)\n", v)
		}
	}
	if v := os.Getenv("GDIST_STAGED_MIN_PAIR"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			t.StagedMinPair = n
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_STAGED_MIN_PAIR=%q (want bytes >= 0)\n", v)
		}
	}
	if v := os.Getenv("GDIST_STAGED_BYTES"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 4096 {
			t.StagedBytes = n
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_STAGED_BYTES=%q (want an integer >= 4096)\n", v)
		}
	}
	if v := os.Getenv("GDIST_SERIAL"); v != "" {
		if b, err := strconv.ParseBool(v); err == nil {
			t.Serial = b
		} else {
			fmt.Fprintf(os.Stderr, "gdist: ignoring GDIST_SERIAL=%q (want 0 or 1)\n", v)
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
