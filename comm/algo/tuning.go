package algo

import (
	"fmt"
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
