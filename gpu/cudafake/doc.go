// Package cudafake lets the GPU code of gdist be tested where there is no
// GPU (CI has none). It compiles a fake CUDA runtime and a fake NCCL
// (testdata/fakecuda.c, embedded in this package) with the C compiler into a
// shared library, and points the loaders of gpu/cuda and comm/nccl at it.
//
// The fake is strict: "device" memory sits at addresses that host code cannot
// dereference, every copy is checked against its allocation's bounds and its
// cudaMemcpyKind, async copies must use pinned memory, streams run their work
// on their own threads, and NCCL communicators of one process match
// collectives by launch order (ranks being goroutines). Like the real
// runtime, the current device is per OS thread, and a call that needs a
// context on a thread with no device set is counted (Contexts,
// NoImplicitContexts; the tests assert none); cudaFree and cudaFreeHost
// wait for the device; copies to the device and memsets are asynchronous to
// the host (queued on each device's legacy default stream, which is ordered
// with the blocking streams as in the real runtime); a CUDA 11 runtime
// (FAKE_CUDA_RUNTIME_VERSION=11080) makes no context current at
// cudaSetDevice; ncclAvg on floats pre-multiplies by fl(1/n). HoldFunc and
// Gate stage device work that waits (as an NCCL kernel waits for a peer),
// CopyDelay slows copies and memsets (so that a missing synchronization
// reads stale data), Vanish makes the NCCL ranks of a device vanish with no
// asynchronous error (as a dead peer over NVLink does), and CommInits
// counts the NCCL communicators made.
// See the C file's header for the details and its environment variables.
//
// A test package opts in with
//
//	func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }
//
// Main chooses the mode once: "real" when a CUDA runtime with a device is
// found (the tests then run on the GPU), else "fake" when the fake builds,
// else "none". $GDIST_CUDA_TEST=fake forces the fake, =real forbids it.
// Tests call RequireCUDA (real or fake), RequireReal or RequireFake, which
// skip with the reason ("no CUDA: ...") when the mode does not fit.
package cudafake
