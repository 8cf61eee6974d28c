// Package comm is the collective-communication layer of gdist: what
// torch.distributed's process groups are to PyTorch, for Go.
//
// A Comm is a fixed group of ranks that run collectives together:
// AllReduce, Broadcast, Reduce, AllGather, Gather, Scatter, ReduceScatter,
// AllToAll, Barrier, tagged Send/Recv, and Split into sub-groups (NewGroup
// from a rank list). Reductions are Sum, Avg, Prod, Min, Max and, on integer
// types only, BAnd, BOr and BXor. Element types are float32, float64, int32,
// int64, uint8, bfloat16 and float16 (the 16-bit floats are stored as 16 bits
// and reduced in float32).
//
// Memory is described by a Buffer, a view (never a copy) of a Go slice
// (FromSlice), of raw bytes (FromBytes), or of device memory (DeviceBuffer,
// for GPU backends); flat.FromDense views a gorgonia *tensor.Dense (comm
// itself imports no gorgonia, so a program that only runs collectives does
// not build it).
// BroadcastObject and AllGatherObject move small Go values (gob-encoded)
// for metadata; CheckSame fails every rank, naming the ranks that differ,
// where what must be identical on every rank (a vocabulary, a dataset, a
// model's shapes) is not. Alloc (AllocSlice) returns memory for collectives on a
// Comm: on a backend that is an Allocator (shm; auto between the ranks of
// one host) it lies in the job's shared memory, and all-reduce,
// reduce-scatter and all-gather of such buffers on every rank are
// zero-copy (each rank reads its peers' buffers where they lie); on the
// others it is ordinary memory. Ordinary buffers work everywhere.
//
// # Contract
//
//   - Every call checks its arguments and returns an error wrapping
//     ErrInvalidArgument at once if they are bad; otherwise it returns a
//     Work without blocking. Work.Wait blocks until the op is done or the
//     wait's ctx ends; Done and Err never block.
//   - Collectives on one Comm run and complete in the order issued; many
//     may be in flight. Send/Recv are ordered per (peer, tag) and run beside
//     the collectives. Sub-groups are independent of their parent.
//   - The ctx given when an op is issued bounds the op, with the Comm's
//     default timeout (Options.Timeout, 30 minutes). Process backends also
//     detect a lost peer (connection cut, process died, heartbeats stopped
//     for Options.PeerTimeout, 30 s): every pending and later op then fails
//     with a *PeerError naming the rank. A collective that times out on a
//     host backend names the rank it waited for and whether that rank ever
//     arrived at it ("waiting for rank 3, which never arrived at
//     all_reduce #12"), like a stall inspector.
//   - Ranks that issue different collectives (another op, count, dtype,
//     reduction or root), or a send and a recv of one tag that differ in
//     dtype or count, get an error wrapping ErrMismatch that names both
//     sides ("rank 0 called send(tag 3, float32 x 10) but rank 1 (this
//     rank) called recv(tag 3, int32 x 10)"). After any failure the Comm stays failed; Close never hangs.
//   - A Buffer belongs to its op until the Work is done. AllReduce, Reduce
//     and Broadcast work in place; the others state their in-place alias.
//   - Once Wait has returned an op's outcome, its Work is finished with:
//     the Comm may reuse it for a later op (so that ops allocate nothing),
//     and a later call of its methods reports ErrWorkReleased (see Work).
//
// # Backends
//
// Backends live in sub-packages and register by name (Register, New):
// "inproc" (comm/inproc: ranks are goroutines of one process, no
// serialization), "tcp" (comm/tcp: processes on one or many hosts, a
// full mesh of authenticated connections), "shm" (comm/shm: processes on
// one host, lock-free rings in a shared-memory segment) and "auto"
// (comm/auto: shm between the ranks of each host, tcp across hosts). The
// collective algorithms are written once in comm/algo over a point-to-point
// Transport, so a new transport gets every collective. comm/rendezvous
// holds the key-value store ranks meet through and the env init that reads
// the variables of torchrun, Open MPI and Slurm.
package comm
