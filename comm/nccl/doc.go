// Package nccl is the GPU backend of comm: a comm.Comm over NCCL for buffers
// in device memory, registered as "nccl".
//
// # Loading
//
// Nothing links against NCCL or CUDA: libnccl is loaded with dlopen at run
// time, and the CUDA runtime through package gpu/cuda. If $GDIST_NCCL_PATH
// is set, that file alone is tried; otherwise the libnccl.so.2 of NVIDIA's
// NCCL pip wheels (nvidia-nccl-cu12, nvidia-nccl-cu13:
// site-packages/nvidia/nccl/lib; WheelLibraries) in $VIRTUAL_ENV, then
// $CONDA_PREFIX, then the environment of each python3 on $PATH (activated
// or not), the same environments gpu/cuda searches (internal/dl's
// WheelLibraries), then libnccl.so.2 and libnccl.so from the usual library
// path; the first that loads is used. The NCCL prototypes and enum values used
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
// the nccl.h.in line of each. At world size 1 no store is needed.
//
// NCCL refuses two ranks of one host on one GPU ("Duplicate GPU detected",
// every rank of the communicator), so a host needs a GPU per local rank: a
// rank whose local rank has none fails at once, saying so, unless the
// process was given its one GPU (CUDA_VISIBLE_DEVICES or
// NVIDIA_VISIBLE_DEVICES naming one device). That variable may be every
// process's, not one process's own (a container that shows its one GPU to
// all of them sets NVIDIA_VISIBLE_DEVICES=0): the "auto" backend therefore
// compares the ranks' GPUs by GPUOf (host and PCI bus id) and stays on the
// host backends when two ranks would share one. Host backends wrapped by
// package comm/staging let several ranks share a GPU. So does NCCL when
// each rank's process poses as its own host: with EnvShareGPU
// (GDIST_NCCL_SHARE_GPU=1) local rank k uses GPU k mod n, and each process
// must have an NCCL_HOSTID of its own (and NCCL_SOCKET_IFNAME=lo, since the
// "hosts" then talk over NCCL's network transport). gdist's launcher sets
// both for each worker when GDIST_NCCL_SHARE_GPU=1 is set:
//
//	GDIST_NCCL_SHARE_GPU=1 train -backend nccl -nproc 2
//
// That is for testing multi-rank NCCL on a machine with one GPU, not for
// speed.
//
// comm.New returns the Comm wrapped by staging.WrapDevice, so it takes host
// buffers too (copied through memory on the rank's GPU); New returns the
// bare *Comm, which takes device buffers (comm.DeviceBuffer, staging.NewBuffer)
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
// the collectives with one two-rank communicator per direction and pair of
// ranks that exchange messages (whatever the tags: a pipeline stage
// boundary costs two NCCL initializations, not one per tag and
// micro-batch). Both channels of a pair are made at the pair's first
// message, in the same order on both ranks (the lower rank's sending
// channel first), or earlier by ConnectPeers (comm.PeerConnector, which
// pipeline.New calls for a stage's neighbours): at setup, before any
// operation is in flight, pair by pair in one order that all ranks share. The two directions have separate communicators because
// NCCL runs the operations of one communicator in issue order: a receive
// posted ahead would hold up this rank's sends. Tags are matched on the
// host: each message is a 24-byte header (tag, dtype, count) and the data,
// in one NCCL group; while receives from a peer are pending, a loop reads
// the next header and receives the data into the oldest receive with that
// tag, or into pooled device memory when none is posted yet (copied on the
// device when it is). A mismatched dtype or count fails with
// comm.ErrMismatch naming both calls. A Send completes once the receiver
// has taken the message, which needs a pending receive from that peer
// (any tag). Messages a rank sends itself are matched per tag and copied
// on the device.
// Split exchanges colors and keys through the store and makes new
// communicators on the same GPUs.
//
// # Streams, Work and failures
//
// Each communicator enqueues its operations on its own non-blocking stream,
// which first waits for the work queued so far on the legacy default stream
// (so buffers written there, e.g. by cudaMemcpy, are ready). A collective
// whose context carries a cuda.Order (cuda.WithOrder) also waits for its
// After event, recorded on the caller's (non-blocking) stream, and records
// its Done event right after itself, at the launch, so that the caller's
// stream waits for the result on the device (order.go;
// TestOrderTiesStreams). Send and Recv honour it too, but launch later
// (once the peer's channel is ready, or the message has come): their
// After event must not be recorded again until their Work completes. A
// Work is a CUDA
// event recorded after the operation; a watcher goroutine per stream waits
// for the events in order with a cuda.Waiter: it polls each briefly (an
// adaptive spin, up to 100 us after short operations, down to a few polls
// when they take longer) and then blocks in the driver (cudaEventBlockingSync: no core
// spins while a collective waits for its peers; TestWaitCostsNoCPU). A
// monitor polls ncclCommGetAsyncError every 10 ms while operations are
// pending; its errors fail the Comm. Done means the device memory holds
// the result.
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
// NCCL connects on demand, inside the launch: the first send/recv between
// two ranks blocks in ncclGroupEnd until the peer launches its side, and
// since NCCL 2.22 so does a communicator's first collective (each
// algorithm's first use). So an operation's timeout and the failure watch
// start before its launch, the Comm's lock is not held during it (a lock
// per stream keeps launches in order), and an abort does not wait for a
// blocked launch (it waits abortWait for launches in progress, then calls
// ncclCommAbort, which ends a blocked ncclGroupEnd): a peer that never
// comes fails the operation at its timeout ("NCCL was still connecting:
// rank N never launched the matching operation"), a lost peer within the
// peer timeout naming it, and Close at once. A launch that blocks makes the
// call block (until the peer comes or the failure): New and Split
// therefore end with one all-reduce of one element ("connect", within their
// ctx), so a Comm's first collective does not wait for the slowest rank;
// sends and receives connect in their own goroutines (ConnectPeers makes
// the communicators, not the connections); Gather, Scatter and AllToAll,
// one group of sends and receives on the Comm's communicator, block at
// their first call until every peer makes it.
//
// # Lost peers and failures across ranks (watch.go)
//
// Over NVLink, P2P or shared memory NCCL reports no asynchronous error for a
// peer whose process died: the kernels wait for it until the timeout. So
// the ranks of a world Comm beat through the store, as the host backends do
// over their links: each sets its counter every PeerDeadline()/4 (at most
// every second) and watches the next rank of a ring (skipping ranks that
// closed); a counter that stands still for comm.Options.PeerTimeout means
// the peer is lost. And NCCL never tells the others that a rank aborted:
// so the first failure of a Comm (lost peer, timeout, mismatched message,
// Abort; not Close) is published in the store, where every rank of the
// Comm waits for it. The other ranks then fail at once, with a
// *comm.PeerError naming the lost rank (wrapping comm.ErrPeerLost) or with
// comm.ErrAborted quoting the failed rank's error, and abort their
// communicators, which ends their kernels. A lost peer fails the Comms
// split from the world Comm too (its process is in all of them). The Comm
// implements comm.Aborter.
//
// # Environment
//
// The package reads its variables in one place, env.go, each when it is
// needed: GDIST_NCCL_PATH (EnvLibrary, the library to load, handed to
// internal/dl's loader), CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (a
// process given one GPU), GDIST_NCCL_SHARE_GPU (EnvShareGPU) and
// NCCL_HOSTID (EnvHostID); and loading NCCL sets NCCL_RUNTIME_CONNECT=0
// (EnvRuntimeConnect) unless it is set. NCCL reads its own NCCL_*
// variables.
//
// # Tests
//
// The tests run on a real GPU when there is one (conformance at world size
// 1, more with more GPUs) and otherwise against the fake CUDA runtime and
// NCCL of package gpu/cudafake: the conformance suite at world sizes 1 to 4
// with the ranks as goroutines (TestConformance), and in the deployment
// shape of real jobs, one process per rank (process_test.go: the test
// binary re-executes itself as the ranks, each seeing one fake GPU, its
// own, as device 0 with LOCAL_RANK = its rank, so LOCAL_RANK > 0 on one
// visible device is exercised; the fake's NCCL joins the processes through
// a shared rendezvous file): the per-rank conformance checks at world sizes
// 2 and 4 (3 too without -short; TestConformanceProcesses), the same
// checks with every rank on the one GPU of a fake set up with one device,
// each process with its own NCCL_HOSTID (and every rank refused, at once,
// when they share one: TestSharedGPURefused), a 2-stage
// pipeline against the unsplit model (TestPipelineProcesses), and kill -9
// of one rank mid-all-reduce, after which the others fail within a few
// peer timeouts naming the killed rank (TestKilledRankProcess). The last
// found that a rank that failed and exited at once left its failure notice
// unwritten, so its peers blamed it instead of the killed rank: Close now
// waits up to min(PeerDeadline, 2s) for the notice and goodbye to reach the
// store. On a real GPU (GDIST_CUDA_TEST=real) the process tests run too,
// the ranks sharing the GPU (as above) where there are fewer GPUs than
// ranks; FAKE_CUDA_DEVICES=1 runs the tests on the fake as on a machine
// with one GPU.
package nccl
