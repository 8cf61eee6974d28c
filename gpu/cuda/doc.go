// Package cuda is gdist's small window on the CUDA runtime: device memory
// (Malloc, Free), pinned host memory (HostAlloc), copies between them,
// streams, events (NewTimingEvent and ElapsedMs time a stream's work, as
// gpu/devmodel's profile does) and a caching Pool. It exists so that the GPU path builds
// and its tests run on machines with no CUDA at all. It sits below comm and
// imports nothing of it: device memory as comm.Buffers (NewBuffer, Copy,
// Upload, CheckDevice) is package comm/staging's.
//
// # Loading
//
// Nothing links against CUDA. The first call loads the runtime library with
// dlopen. If $GDIST_CUDART_PATH is set, that file alone is tried. Otherwise
// the candidates are, in order: the runtimes of NVIDIA's pip wheels
// (WheelLibraries: CUDA 13's nvidia/cu13/lib/libcudart.so.13, then CUDA
// 12's nvidia/cuda_runtime/lib/libcudart.so.12, under
// lib/python3*/site-packages or dist-packages) in $VIRTUAL_ENV, then
// $CONDA_PREFIX, then the environment of each python3 on $PATH (its
// directory's parent, so a virtualenv that is not activated counts); then
// libcudart.so, libcudart.so.13, libcudart.so.12, libcudart.so.11.0 from
// the usual library path. The first runtime that sees a device is used: one
// that loads but sees none (a CUDA 13 wheel on an older driver says
// cudaErrorInsufficientDriver) does not end the search. If none sees a
// device, the first that loaded is kept (Symbol, Loaded) and Available's
// reason names every library tried and what each said. A runtime named by
// $GDIST_CUDART_PATH that sees no device is reported so, naming the
// variable; no other runtime stands in for it. The C
// prototypes of the two dozen functions used are re-declared in shim.h (with
// the enum values they need, and their meaning), so building needs only a C
// compiler and libc, never the CUDA headers. gorgonia's own CUDA build tag
// is not used: it needs headers, generated kernels and a patched
// gorgonia.org/cu.
//
// Available reports whether a runtime was loaded and sees a device, and if
// not, why (which libraries were tried, whether the NVIDIA driver is there,
// what cudaGetDeviceCount said). Every other function returns an error
// wrapping ErrUnavailable when CUDA is not usable, and a *Error naming the
// call and the runtime's error string when a call fails.
//
// # Threads and devices
//
// The current device of the CUDA runtime is per OS thread, and goroutines
// move between threads, so every call that needs a CUDA context (memory,
// pinned memory, copies, streams, events, pointer attributes) takes the
// device ordinal and makes it current inside the same C call: a thread on
// which no device was set works on device 0, and the runtime would make a
// context there (about 0.5 GiB, or an error in EXCLUSIVE_PROCESS mode).
//
// # Asynchrony and freeing
//
// Copies to the device and Memset are asynchronous to the host (queued on
// the legacy default stream); copies to the host return with the data.
// A non-blocking stream (NewStream(dev, true)) is not ordered with the
// legacy default stream at all: work on it is ordered with other
// streams by events only (Event.Record, Stream.WaitEvent), and
// Stream.CopyAsync and MemsetAsync queue copies and memsets on it. An
// Order (WithOrder) carries such events in an operation's context to
// work that runs on a stream of its own (an NCCL collective: comm/nccl
// honours it), so that the caller's stream and the operation's wait for
// each other on the device, not on the host. Where the host must wait, a
// Waiter waits for a blocking-sync event (NewBlockingEvent) by a brief
// poll and then asleep in the driver: Stream.Synchronize and a plain
// event's Synchronize spin a host core for the whole wait under CUDA's
// default scheduling.
// cudaFree and cudaFreeHost wait for all the work on the device, so Pool
// never frees in the caller's goroutine (Put and Discard run on completion
// paths, where the device's work may wait for this rank).
//
// # Tests
//
// The tests run against the real runtime when it sees a device, and
// otherwise against a fake runtime (package gpu/cudafake) that keeps
// "device" memory at addresses no host code can dereference and checks
// every copy's bounds, kinds and pinning. TestRealHeaders checks the shims'
// prototypes, values and struct offsets against the real
// cuda_runtime_api.h at compile time (testdata/abicheck.c), and
// TestRealRuntime loads the real libcudart with no GPU; both skip, saying
// why, without Debian's nvidia-cuda-dev and libcudart11.0.
package cuda
