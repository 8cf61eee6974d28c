// Package algo implements comm.Comm once, over any point-to-point
// Transport: argument checks, per-Comm ordering and sequence numbers,
// sub-groups (Split), failure handling (the first error poisons the Comm and
// aborts the group on every member), and the collective algorithms, one file
// per collective and algorithm, in the manner of gloo's allreduce_ring.h:
//
//   - algorithms.go: the table of every algorithm of every collective (its
//     name, header id, cost function and run function); the cost model
//     picks the cheapest row of a collective for the message and group
//     size, GDIST_ALGO forces one.
//   - collectives.go: what each collective does before its algorithm runs
//     (its own block copied, scratch taken, a group of one handled).
//   - allreduce_ring.go (the chunked, pipelined ring: reduce-scatter then
//     all-gather, each step's chunks leaving as soon as the previous step
//     delivered them: pipeline.go), allreduce_halving_doubling.go
//     (Rabenseifner's), allreduce_recursive_doubling.go (small messages;
//     non-powers of two fold the extra ranks in and out),
//     allreduce_hierarchical.go (groups that span hosts: inside each
//     host, then across, then inside again; its phases run the other
//     algorithms on views of the Comm, Comm.view).
//   - allreduce_zerocopy.go: all-reduce, reduce-scatter and all-gather
//     of buffers that every rank has in shared memory (a SharedMemory
//     transport, comm.Alloc): no row of the table, since it depends on
//     where the buffers lie: a 32-byte exchange of where they are, then
//     each rank reduces its block reading the peers' buffers directly and
//     writes the result into its own buffer and theirs, behind two
//     handshakes (armed, fin) in shared counters; if any rank's buffer is
//     ordinary memory, every rank runs the staged all-reduce below (or,
//     for reduce-scatter and all-gather, the table's algorithm).
//     Tuning.ZeroCopyMin (GDIST_ZEROCOPY_MIN) bounds it from below.
//   - allreduce_staged.go: all-reduce of ordinary buffers over a
//     SharedMemory transport (shm, auto on one host), from
//     Tuning.StagedMin (GDIST_STAGED_MIN: 128 KiB; 2 ranks every size,
//     StagedMinPair) up, no row of the
//     table either: copy-in, reduce, copy-out through a staging area each
//     rank keeps in its shared memory for the Comm's life, in pieces of
//     Tuning.StagedBytes (GDIST_STAGED_BYTES, 1 MiB), on the calling
//     goroutine, with two waits on shared counters a piece and no
//     message after the first op's set-up; the staging written with
//     streaming stores (vecmath.CopyNT); the working rank pulses
//     (Pulser) so that a waiting peer keeps its processor.
//   - layout.go: which ranks of a group share a host (Layout), from a
//     Transport that is a HostMap (comm/auto); the cost model costs the
//     links between hosts apart from those inside one.
//   - reducescatter_ring.go, reducescatter_halving.go;
//     allgather_ring.go, allgather_recursive_doubling.go;
//     broadcast_tree.go (binomial), broadcast_chain.go (pipelined);
//     reduce_tree.go, reduce_ring.go, reduce_halving.go (a reduce-scatter,
//     then a gather at the root); gather_direct.go, gather_tree.go,
//     scatter_direct.go, scatter_tree.go; alltoall_pairwise.go,
//     alltoall_bruck.go; barrier_dissemination.go.
//   - halving.go: recursive halving (reduce-scatter) and doubling
//     (all-gather) for any group size, shared by the hd and rd algorithms;
//     pipeline.go: the ring and chain pipelines.
//   - the element-wise reductions for every dtype (bfloat16 and float16
//     reduced in float32) are internal/reduce's (reduce.Into, reduce.To,
//     reduce.Divide): AVX-512 or AVX2 assembly where the CPU has it,
//     unrolled Go elsewhere or with the purego build tag, all equal bit for
//     bit to a scalar reference; flat adds gradients with them too, without
//     importing this package.
//   - tuning.go: the alpha-beta-gamma cost model's constants (inside a
//     host and between hosts), and the GDIST_ALGO / GDIST_CHUNK_BYTES /
//     GDIST_INTER_HOST_GBPS / GDIST_INTER_HOST_LATENCY_US overrides.
//
// # Adding an algorithm
//
// One file plus one row. Say a tree all-reduce: write
// allreduce_tree.go with its cost and its run function,
//
//	// cost: 2 lg p (a + n b) + lg p n g
//	func allReduceTreeCost(t Tuning, n, p int) int64 { ... }
//
//	func (o *op) allReduceTree(x call) error { ... } // x.buf, in place
//
// and add its row to the table in algorithms.go (flat: its cost ignores
// where the ranks are, and is taken at the slowest link's constants; a
// cost function of (t, n, Layout) goes in as it is):
//
//	{"all_reduce", "tree", AlgoTree, flat(allReduceTreeCost), (*op).allReduceTree},
//
// (a new name also takes a new Algo id constant there). The cost model now
// weighs it against the other all-reduce algorithms, GDIST_ALGO=
// all_reduce=tree forces it, TestEveryForcedAlgorithm runs it on every
// transport, group size and count, and TestTable fails if an algorithm
// function has no row.
//
// Collectives of a Comm run one at a time in issue order (comm.go): an
// issued collective is queued, and the Wait of its Work runs it on the
// caller's goroutine when nothing else is running the queue (a runner
// goroutine takes over when nobody waits), so a small collective costs no
// goroutine hand-off. One ctx per user ctx and one timer per Comm bound
// them (Options.Timeout). Over a Transport that is an EagerSender (shm),
// short exchanges send and then receive on one goroutine; over one whose
// ranks also share the memory (shm, auto on one host) the ring and the
// pairwise exchanges of every size do (Tuning.Serial, pipeline.go's
// serial): chunks of the eager size (shm's 64 KiB frame), the sends at
// most two chunks ahead of the receives, so a rank pinned to one core
// needs no second thread; elsewhere a sender goroutine runs beside the
// receiver.
//
// Each Comm counts what this rank moved per peer (traffic.go, Moved):
// messages sent and received, and the zero-copy collectives' reads of
// and writes into peers' shared buffers (the staged all-reduce's reads of
// the peers' staging), named by transport (Router: auto
// says shm or tcp per peer).
//
// Reductions are fused: a received chunk is reduced into place as
// out = in op received in one pass (ReduceTo), so reduce-scatter and
// reduce never copy their input first, and a Transport that is also a
// PayloadReceiver (memory the receiver can read: in-process ranks, shared
// memory, or TCP frames as they are read, a cache-sized piece at a time) is
// reduced from directly, without the staging copy. Scratch
// buffers come from pools (scratch.go) rather than fresh zeroed memory.
//
// An operation's record is its Work. Once a Wait has returned its outcome
// the record goes to a per-Comm recycler and a later operation reuses it
// (comm.Work states the rule; a Work used after its Wait returned reports
// comm.ErrWorkReleased, and is held back for several later Waits before
// reuse so that misuse shows as that error); a Work watched only through
// Done and Err is never reused. A collective's arguments are fields of
// the record and it runs through a plain function, not a closure; its
// done channel is made only if somebody asks for it; receive-and-reduce
// state and kernel tails come from pools; a fan-out of one message runs
// on the calling goroutine. Send and Recv (p2p.go) have no goroutine of
// their own either: a small Send (one the transport delivers eagerly)
// runs when issued, a small Recv on its Wait's goroutine (or a runner
// goroutine started by Done, a Wait under another ctx, or the kick timer),
// and a larger message gets a runner at once. With shm or inproc a small
// all-reduce, broadcast, Send or Recv thus allocates nothing in steady
// state (commtest.CheckSmallOpAllocs).
//
// Every message carries a header with the op, sequence number, dtype,
// count, reduction, root, algorithm and step, which the transport checks
// before it writes a byte, so ranks that disagree get an error naming both
// sides rather than wrong data. Transports: comm/inproc, comm/tcp,
// comm/shm. A new transport gets every collective, and proves itself with
// the transport test kit (algo/transporttest) and, through the Comm, the
// conformance suite (comm/commtest).
package algo
