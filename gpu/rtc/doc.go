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
// Every compilation also gets CUDA's include directory (--include-path,
// after the caller's options), as nvcc has it, so that kernels can
// #include <mma.h> (nvcuda::wmma, the tensor cores' warp matrix API),
// <cuda_bf16.h> and <cuda_fp16.h>, which NVRTC does not have built in:
// $GDIST_CUDA_INCLUDE alone when set (':' between several), else the first
// directory holding CUDAHeaders of NVRTC's CUDA version (cuda_runtime_api.h
// says) among, from the library's directory D, D/../include (a toolkit's
// lib64 or targets/*/lib; CUDA 13's pip wheel, nvidia/cu13), CUDA 12's
// pip wheels (nvidia/cuda_runtime/include with nvidia/cuda_nvcc/include,
// which holds crt/mma.h), D/../../include (Debian's /usr/lib/<triplet>:
// /usr/include), $CUDA_HOME/include, $CUDA_PATH/include and
// /usr/local/cuda/include; else the first of another version (noted);
// a cccl directory in it (CUDA 13's libcu++, which its fp16 and bf16
// headers may include) comes after it.
// Compiler.Include and Info name it; a header not found, with no
// directory, is a CompileError that says how to give one.
//
// Kernels must be extern "C" (found by name, unmangled) and must only use
// what the fake below can run: no templates as kernels, no textures, no
// warp-synchronous code without __syncwarp or a shuffle, no reliance on
// shared memory's initial contents; of CUDA's headers, the fake has mma.h,
// cuda_bf16.h and cuda_fp16.h (the subsets below).
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
//
// # Tensor cores on the fake
//
// The fake's mma.h emulates nvcuda::wmma for the shapes m16n16k16,
// m32n8k16 and m8n32k16 with __nv_bfloat16 or __half matrix_a and
// matrix_b (row_major or col_major) and float accumulators: fragment
// (num_elements, x[]), fill_fragment, load_matrix_sync (an accumulator's
// with a layout_t), store_matrix_sync and mma_sync. A fragment holds
// rows x cols / 32 elements in each lane, element i of lane l being
// element 32 i + l of the matrix in row-major order; CUDA leaves this
// layout unspecified and a GPU's differs, so a kernel that depends on it
// is wrong here or there (element-wise work on x[], the same for every
// element, is fine; work by rows, such as a softmax's maximum and sum,
// goes through memory: store_matrix_sync, then the threads' own code). The _sync calls are warp-collective as CUDA requires:
// every one of the 32 lanes of a full warp must make the same call with
// the same arguments together, else the launch fails (a sticky launch
// failure, as a fault), saying which call, warp and lanes: lanes that
// returned or branched around it, another call or warp operation at the
// same time, other arguments, a warp of fewer than 32 threads. Pointers
// must be 32-byte aligned and ldm a multiple of 16 bytes (checked; the
// fake's cudaMalloc aligns 256 bytes, its dynamic shared memory 128, a
// static __shared__ array needs __align__(32)). mma_sync reads the bf16
// and half inputs exactly (their products are exact in fp32) and computes
// each element of D in fp32 as d = c, then d = d + a[i][k] b[k][j] for
// k = 0, 1, ..., K-1, each addition rounded to nearest even: a defined
// order, so the fake's results are bit for bit those of that loop. A
// GPU's tensor cores sum in an order, and with a rounding (truncation on
// some), that NVIDIA does not specify: compare a GPU's results within a
// bound that holds for any order, such as K 2^-22 (|c| + sum |a b|) (each
// addition erring by at most 2 ulps of a partial sum), as TestWMMAGEMM
// does on both. cuda_bf16.h and cuda_fp16.h give the types (2 bytes,
// conversions to and from float rounding to nearest even, __float2bfloat16,
// __bfloat162float, __float2half, __half2float, __ushort_as_bfloat16, ...);
// arithmetic between two of them is deleted (a compile error here, not a
// different result). Not modelled: other shapes and types (tf32, int8,
// double, half accumulators), satf, the element types' arithmetic and
// vector types (__nv_bfloat162, __half2), the newer mma.sync / wgmma PTX
// instructions, and the speed of tensor cores.
package rtc
