// Package nccl is the GPU backend of comm: a comm.Comm over NCCL for buffers
// in device memory, registered as "nccl".
//
// # Loading
//
// Nothing links against NCCL or CUDA: libnccl is loaded with dlopen at run
// time ($GDIST_NCCL_PATH, else libnccl.so.2, libnccl.so), and the CUDA
// runtime through package gpu/cuda. The NCCL prototypes and enum values used
// are re-declared in shim.h. Usable and UsableFor say whether the backend
// can run here and, if not, what is missing; comm.New(ctx, "nccl", cfg) then
// fails with an error wrapping ErrUnavailable that says the same. An "auto"
// backend picks nccl when UsableFor(localSize) holds on every rank.
//
// # Setup
//
// Rank 0 creates the unique id (ncclGetUniqueId) and publishes it through
// cfg.Store under nccl/<job>/<generation>/id; every rank joins with
// ncclCommInitRank on GPU cfg.LocalRank, or on the only GPU the process
// sees (Slurm's --gpus-per-task=1, a one-GPU pod), after cudaSetDevice and
// cudaFree(NULL) (with CUDA 11 the latter makes the device's context
// current, which NCCL needs). NCCL's ABI facts are one table (abi.go) with
// the nccl.h.in line of each. NCCL refuses two ranks on one GPU,
// so a host needs a GPU per rank (host backends, with package comm/staging,
// let several ranks share one). At world size 1 no store is needed.
//
// comm.New returns the Comm wrapped by staging.WrapDevice, so it takes host
// buffers too (copied through memory on the rank's GPU); New returns the
// bare *Comm, which takes device buffers (comm.DeviceBuffer, cuda.NewBuffer)
// on its GPU only.
//
// # Operations
//
// AllReduce, Broadcast, Reduce, AllGather and ReduceScatter are NCCL's, in
// NCCL's in-place forms (which are comm's). Gather, Scatter and AllToAll,
// which NCCL lacks, are one group of ncclSend/ncclRecv (this rank's own part
// is a device copy). Barrier all-reduces one element. Sum, Prod, Min, Max
// and Avg (ncclAvg, NCCL 2.10 or later; older versions give
// comm.ErrUnsupported) are native; Avg on floats is NCCL's: each input times
// fl(1/n), then summed, which differs from the host backends' fl(sum)/n in
// the last bits. BAnd, BOr and BXor, which NCCL lacks, are
// exact: the inputs are all-gathered, combined by a host function queued on
// the stream (cudaLaunchHostFunc) and copied back, in stream order; this
// costs Size() times a native reduction's memory and traffic.
//
// Send and Recv keep comm's per-tag ordering and their independence from
// the collectives by giving each (sender, receiver, tag) its own two-rank
// communicator, made on first use (which costs one NCCL initialization).
// Messages a rank sends itself are matched per tag and copied on the device.
// Split exchanges colors and keys through the store and makes new
// communicators on the same GPUs.
//
// # Streams, Work and failures
//
// Each communicator enqueues its operations on its own non-blocking stream,
// which first waits for the work queued so far on the legacy default stream
// (so buffers written there, e.g. by cudaMemcpy, are ready). A Work is a CUDA
// event recorded after the operation; a watcher goroutine per stream polls
// the events in order (spinning briefly, then sleeping up to 1 ms) and also
// polls ncclCommGetAsyncError, whose errors fail the Comm. Done means the
// device memory holds the result.
//
// NCCL cannot cancel one operation: when an operation's ctx or the Comm's
// timeout ends first, the communicator is aborted (ncclCommAbort) and every
// pending and later operation fails, with an error wrapping the ctx's error
// or comm.ErrTimeout. Close aborts too (NCCL's orderly destruction waits for
// the peers and could hang) and frees device memory in the background once
// the streams are idle. NCCL does not detect ranks that issue mismatched
// collectives: they hang until the timeout, or corrupt data; the host
// backends detect them.
//
// # Tests
//
// The tests run on a real GPU when there is one (conformance at world size
// 1, more with more GPUs) and otherwise against the fake CUDA runtime and
// NCCL of package gpu/cudafake, at world sizes 1 to 4 with the ranks as
// goroutines.
package nccl
