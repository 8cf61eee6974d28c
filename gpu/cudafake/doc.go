// Package cudafake lets the GPU code of gdist be tested where there is no
// GPU (CI has none). It compiles a fake CUDA runtime and a fake NCCL
// (testdata/fakecuda.c, embedded in this package) with the C compiler into a
// shared library, and points the loaders of gpu/cuda and comm/nccl at it.
//
// The fake is strict: "device" memory sits at addresses that host code cannot
// dereference, every copy is checked against its allocation's bounds and its
// cudaMemcpyKind, async copies must use pinned memory, streams run their work
// on their own threads, and NCCL communicators match collectives by launch
// order: ranks that are goroutines of one process, or, with
// FAKE_NCCL_PROCESSES=1 (see ProcessEnv), ranks in separate processes that
// meet through a rendezvous file the unique id names (each rank's input is
// copied into a shared slot and every rank computes its own output;
// send/recv go through per-pair mailboxes; a killed process gives its peers
// no error, their kernels wait until aborted, as over NVLink).
// FAKE_CUDA_VISIBLE_DEVICES shows a process only the given fake devices,
// like CUDA_VISIBLE_DEVICES. Like the real
// runtime, the current device is per OS thread, and a call that needs a
// context on a thread with no device set is counted (Contexts,
// NoImplicitContexts; the tests assert none); cudaFree and cudaFreeHost
// wait for the device; copies to the device and memsets are asynchronous to
// the host as CUDA documents ("API synchronization behavior": cudaMemcpy
// from pinned host memory to the device returns once done; from pageable
// memory it syncs the stream, reads the source before it returns and
// completes later; device to device and memsets are queued on each
// device's legacy default stream, which is ordered with the blocking
// streams as in the real runtime; cudaMemcpyAsync reads its source when
// the stream runs it); a CUDA 11 runtime
// (FAKE_CUDA_RUNTIME_VERSION=11080) makes no context current at
// cudaSetDevice; ncclAvg on floats pre-multiplies by fl(1/n); NCCL
// connects on demand, in the launch: the first send/recv between two ranks
// blocks in ncclGroupEnd until the peer launches its side, and a
// communicator's first collective until every rank launched one (unless
// NCCL_RUNTIME_CONNECT=0), an ncclCommAbort from another thread ending the
// wait; ranks of one host (NCCL_HOSTID) on one device are all refused
// ("Duplicate GPU detected"). HoldFunc and
// Gate stage device work that waits (as an NCCL kernel waits for a peer),
// CopyDelay slows copies and memsets (so that a missing synchronization
// reads stale data), StreamDelay, NCCLDelay and KernelDelay start one
// stream's work, every NCCL operation, or every kernel and GEMM late
// (FAKE_NCCL_DELAY_MS and FAKE_CUDA_KERNEL_DELAY_MS, whole ms, for
// ranks run as processes; another value stops the process naming it),
// so that a missing cross-stream wait reads unfinished data; an event
// wait is for the record queued before it, as in CUDA,
// Vanish makes the NCCL ranks of a device vanish with no
// asynchronous error (as a dead peer over NVLink does), StickyError leaves
// the CUDA context with a sticky error (as a kernel fault does: every later
// call returns it), MemLimit caps each device's memory (cudaMalloc then
// fails with cudaErrorMemoryAllocation), FAKE_CUDA_DRIVER_VERSION below the
// runtime's makes cudaGetDeviceCount fail with cudaErrorInsufficientDriver,
// CommInits counts the NCCL communicators made, LiveEvents the CUDA
// events not destroyed, FreedUses the calls that named device memory
// already freed (uses after free: work issued after a cudaFree, which
// itself waits for the work queued before it, as CUDA's does), and
// SpinWaits makes cudaStreamSynchronize and a
// plain event's cudaEventSynchronize spin the waiting thread, as CUDA's
// default scheduling does (a blocking-sync event's waits sleep), so that
// a test of CPU time sees a wait that spins.
// See the C file's header for the details and its environment variables.
//
// The fake is also cuBLAS, NVRTC and the CUDA driver API (Use points
// $GDIST_CUBLAS_PATH, $GDIST_NVRTC_PATH and $GDIST_LIBCUDA_PATH at it, for
// gpu/cublas and gpu/rtc): its GEMMs (cublasSgemm, ...StridedBatched,
// cublasGemmEx, cublasGemmStridedBatchedEx with fp32, fp16 or bf16
// inputs; cublasGemmBatchedEx, whose pointer arrays and matrices are read
// in stream order, a bad pointer then a fault: the sticky
// cudaErrorIllegalAddress) are reference loops run on the handle's
// stream over its device
// memory (bounds and arguments checked as cuBLAS does, the inputs rounded
// to TF32 when the math mode or compute type asks, ties away as the
// tensor cores' cvt.rna; bf16 and fp16 inputs read exactly, fp32 sums
// in order, no fused multiply-add; computed on packed panels, 8x4
// elements of C side by side, the reference loop's bits: ReferenceGEMM
// switches to that loop); its NVRTC compiles a
// kernel's CUDA C++ for the host with the C++ compiler ($FAKE_NVRTC_CXX,
// $CXX or g++; results cached under ~/.cache/gdist/fakenvrtc or
// $FAKE_NVRTC_CACHE) and an emulation of blocks, threads, barriers and
// warps (each thread a fiber that yields at barriers; gpu/rtc's package
// comment says what it does not model), and of CUDA's mma.h (the warp
// matrix API nvcuda::wmma, warp-collective, bf16 and half inputs, fp32
// sums in a stated order), cuda_bf16.h and cuda_fp16.h, which come first
// on a kernel's include path (gpu/rtc's package comment says what they
// model); its driver API loads such modules
// and runs each launch in stream order, translating the pointer parameters
// from device addresses; a launch that fails (a divergent barrier or warp
// matrix call, ...) leaves the sticky CUDA_ERROR_LAUNCH_FAILED, and
// KernelFailure says why (and repairs the context). FAKE_CUDA_CC sets the
// compute capability it reports (default 9.0).
//
// A test package opts in with
//
//	func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }
//
// Main chooses the mode once: "real" when a CUDA runtime with a device is
// found (the tests then run on the GPU), else "fake" when the fake builds,
// else "none". $GDIST_CUDA_TEST=fake forces the fake, =real forbids it.
// Tests call RequireCUDA (real or fake), RequireReal or RequireFake, which
// skip with the reason ("no CUDA: ...") when the mode does not fit. A child
// process that a test starts as one rank (environment from ProcessEnv)
// calls Setup instead of Main.
//
// Helpers that serve the fake and a real GPU alike make a test's CUDA
// objects and free them when it ends: NewStream, NewEvent, Malloc,
// HostAlloc, and NCCLRanks (ranks of the nccl backend as goroutines).
package cudafake
