// Package rtc runs custom CUDA kernels: CUDA C++ source embedded in Go,
// compiled at run time by NVRTC for the device's architecture, cached, and
// loaded and launched through the CUDA driver API on the streams of
// gpu/cuda. Nothing links against CUDA; the package builds and its tests
// run on machines with no CUDA at all.
//
//	m, err := rtc.Load(dev, "scale.cu", src)    // compiled once per process
//	f, err := m.Function("scale")              // an extern "C" __global__ function
//	err = f.Launch(stream, rtc.Config{Grid: rtc.Dim(blocks), Block: rtc.Dim(256)}, x, float32(2), int32(n))
//
// # Compiling
//
// Compile asks the device's compute capability (cuDeviceGetAttribute) and
// compiles a cubin for it (--gpu-architecture=sm_90) when NVRTC knows the
// architecture, else PTX for the newest virtual architecture it knows
// that the device runs, which the driver compiles when loading it (a GPU
// newer than NVRTC). Images are cached per process by NVRTC, architecture,
// name, source and options; with $GDIST_KERNEL_CACHE set to a directory
// they are also written there and read back by later processes (a cached
// image that no longer loads is compiled afresh). A failed compilation is
// a *CompileError with NVRTC's log. Compiler (DefaultCompiler,
// OpenCompiler) compiles for any architecture without a GPU: the tests use
// it to check the kernels with the real NVRTC on machines with none.
//
// Kernels must be extern "C" (found by name, unmangled) and must only use
// what the fake below can run: no templates as kernels, no textures, no
// warp-synchronous code without __syncwarp or a shuffle, no reliance on
// shared memory's initial contents.
//
// # Launching
//
// Load loads the image as a module into the device's primary context (the
// CUDA runtime's: each call first runs cudaSetDevice and cudaFree(NULL)
// through gpu/cuda in the same C call), once per process and device.
// Function.Launch queues a kernel on a cuda.Stream (its cudaStream_t is the
// driver's CUstream; nil is the legacy default stream): arguments are
// uintptr device addresses and int32, uint32, int64, uint64, float32 or
// float64 scalars, copied at once; a Go int is refused (its size must be
// the parameter's). Where the driver can say (cuFuncGetParamInfo, CUDA
// 12.4 and later), the count and size of the arguments are checked
// against the kernel's parameters before anything is queued.
//
// # Loading
//
// NVRTC is $GDIST_NVRTC_PATH alone when set; else, in order, NVIDIA's pip
// wheels (CUDA 13's nvidia/cu13/lib/libnvrtc.so.13, then CUDA 12's
// nvidia/cuda_nvrtc/lib/libnvrtc.so.12) in $VIRTUAL_ENV, $CONDA_PREFIX and
// the environment of each python3 on $PATH, then libnvrtc.so.13, .so.12,
// .so.11.2 from the library path. The driver is $GDIST_LIBCUDA_PATH alone
// when set, else the NVIDIA driver's libcuda.so.1. Available says whether
// both loaded (and cuInit succeeded) and if not why, naming every library
// tried; errors from their absence wrap cuda.ErrUnavailable. The C
// prototypes used are re-declared in shim.h; TestRealHeaders checks them
// against the real nvrtc.h and cuda.h where installed.
//
// # Tests and the fake
//
// The tests run on a real GPU when the CUDA runtime sees one
// (GDIST_CUDA_TEST=real insists), else on gpu/cudafake, whose NVRTC
// compiles the same CUDA C++ for the host with an emulation header and
// whose driver runs each launch in stream order over the fake's device
// memory (pointer parameters translated; a pointer that is not device
// memory of the current device fails the launch). The emulation is correct
// for kernels that synchronize threads: a block's threads run one after
// another, each as a fiber with its own stack when the source uses
// __syncthreads (and its _count/_and/_or forms), __syncwarp, shuffles or
// votes, yielding at every barrier; the block resumes once every live
// thread arrived (threads that returned count as arrived), and blocks run
// one after another. It does not model: warps as lockstep groups (lanes
// meet only at shuffles, votes and __syncwarp, so code that relies on
// implicit lockstep gives wrong results there, as it may on Volta and
// later GPUs), partial warp masks (every live lane of the warp takes
// part), concurrent blocks and memory ordering between them (one kernel
// runs at a time in the process), out-of-bounds accesses inside a kernel
// (not caught: run the GPU tests under compute-sanitizer), shared memory's
// initial contents (static __shared__ keeps its values from block to
// block; dynamic shared memory starts as 0xff bytes), __constant__ memory
// set from the host, textures, templates as kernels, and timing. Device
// math functions are the host's libm (expf, tanhf, ...: within an ulp or
// two of the device's). TestRealNVRTC compiles the same test kernels with
// a real NVRTC (no GPU needed) where one is installed.
package rtc
