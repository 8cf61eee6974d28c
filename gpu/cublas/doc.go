// Package cublas is gdist's window on cuBLAS: a handle per device and
// stream (New), fp32 products (Sgemm, column-major as cuBLAS; MatMul for
// our row-major [rows, cols] tensors), batches of products at fixed
// strides (SgemmStridedBatched; MatMulBatched for row-major views such as
// attention's heads), mixed-precision products (GemmEx and
// GemmStridedBatchedEx: bf16 or fp16 inputs, fp32 accumulation), batches
// of products anywhere in memory (GemmBatchedEx: arrays of device
// pointers, for offsets that no single stride gives, such as attention's
// heads read in place; optional: HasGemmBatchedEx) and the TF32 switch
// (SetMath).
// It builds and its tests run on machines with no CUDA at all.
//
// # Loading
//
// Nothing links against cuBLAS: the first call loads it with dlopen, as
// gpu/cuda loads the CUDA runtime. If $GDIST_CUBLAS_PATH is set, that file
// alone is tried. Otherwise the candidates are, in order, the libraries of
// NVIDIA's pip wheels (CUDA 13's nvidia/cu13/lib/libcublas.so.13, then CUDA
// 12's nvidia/cublas/lib/libcublas.so.12, under lib/python3*/site-packages
// or dist-packages) in $VIRTUAL_ENV, then $CONDA_PREFIX, then the
// environment of each python3 on $PATH; then libcublas.so.13, .so.12 and
// .so.11 from the library path. PyTorch's wheels bring cuBLAS. The C
// prototypes of the few functions used are re-declared in shim.h;
// TestRealHeaders checks them against the real cublas_v2.h where CUDA's
// headers are installed (Debian's nvidia-cuda-dev).
//
// Available says whether cuBLAS loaded and, if not, why: every library
// tried and what dlopen said, or that CUDA itself is unavailable. Every
// error from its absence wraps cuda.ErrUnavailable; a failed call is an
// *Error naming the call and its cublasStatus_t.
//
// # Devices, streams, precision
//
// A Handle belongs to one device and one stream: each call makes the
// device current first (cudaSetDevice and cudaFree(NULL) through gpu/cuda's
// runtime, in the same C call), then queues the product on the stream,
// asynchronously. Alpha and beta are passed by value (host pointer mode).
//
// Precision follows PyTorch: fp32 products are fp32 by default
// (DefaultMath, torch.backends.cuda.matmul.allow_tf32 = False); SetMath(TF32)
// lets cuBLAS round the inputs to TF32 on tensor cores, as allow_tf32 =
// True or set_float32_matmul_precision("high") do (Float32MatmulPrecision
// maps PyTorch's names). GemmEx (GemmStridedBatchedEx for batches) with BF16
// inputs and Compute32F is the product under bf16 autocast (package
// gpu/gemm casts the operands and calls them).
//
// # Tests
//
// The tests run on a real GPU when the CUDA runtime sees one
// (GDIST_CUDA_TEST=real insists), else on gpu/cudafake, whose cuBLAS
// computes each product by a reference loop on the handle's stream,
// checking every matrix against its allocation, the arguments as cuBLAS
// does, beta 0 not reading C, and TF32 rounding its inputs. The results
// are checked against float64 loops at odd sizes with both transposes
// (batched: a shared A, gaps between the products left untouched).
package cublas
