// Package gemm computes the device layers' matrix products (gpu/kernels'
// Products) in PyTorch's precisions, through cuBLAS where it loads and
// through a tiled kernel of gdist's own where it does not.
//
//	e, err := gemm.New(dev, stream, gemm.Config{Precision: gemm.BF16})
//	defer e.Close()
//	kernels.LinearForward(e, k, y, x, w, b, rows, in, out) // y = x W + b, bf16 inputs
//	fmt.Println(e.Backend())                               // cuBLAS 13.0.2 (...), or why not
//
// # Precisions (PyTorch's semantics and names)
//
//   - fp32 (FP32, the default): fp32 products (cublasSgemm,
//     cublasSgemmStridedBatched; torch.backends.cuda.matmul.allow_tf32 =
//     False).
//   - tf32 (TF32): the handle's math mode CUBLAS_TF32_TENSOR_OP_MATH:
//     cuBLAS may round the fp32 inputs to TF32 (10 mantissa bits) on
//     tensor cores and accumulates in fp32 (allow_tf32 = True,
//     set_float32_matmul_precision("high")). The tiled kernel computes
//     fp32, which TF32 allows.
//   - bf16 (BF16): autocast to bfloat16 (torch.autocast(dtype=
//     torch.bfloat16)) for the products only: their fp32 operands are
//     cast to bf16 (round to nearest even, one kernel over each
//     operand's span into a scratch buffer that grows to the largest
//     product's in the first step and stays), multiplied by
//     cublasGemmEx / cublasGemmStridedBatchedEx with CUDA_R_16BF inputs,
//     CUBLAS_COMPUTE_32F and fp32 output. Parameters (the master
//     weights), gradients, optimizer state, reductions, softmax,
//     normalizations and the loss stay fp32 (gpu/kernels). Unlike
//     PyTorch's autocast, a product's output is fp32, not bf16, and the
//     weights' bf16 copies are not cached across a step's products: each
//     product casts its operands (a memory pass over each), but for an
//     operand the caller names with KeepNext, kept for the product after
//     (the backward passes' operands that two products in a row read:
//     Linear's dy, Conv2d's D, attention's dO and dS; TestKeepNext,
//     kernels' TestBF16KeepsShared: the same bits, cast once).
//     Casts counts the values cast; fusing the casts into the kernels
//     that produce the operands is what would remove them.
//
// Tolerances, relative to the sum of the magnitudes of an element's k
// terms: fp32 kernels.GemmTol(k); TF32 TF32Tol (2^-10) more; BF16
// BF16Tol (2^-7) more (both inputs of each term rounded to 11 or 8 bits
// of precision). TestBF16 and TestTF32 check them on odd shapes, both
// transposes, padded rows, strided batches with gaps and a shared
// operand; the fake's cuBLAS (gpu/cudafake) rounds the inputs as the
// hardware does (bf16: to nearest even; TF32: ties away, cvt.rna).
// gpu/devmodel's TestPrecisionFollowsCPU trains with each.
//
// # Without cuBLAS
//
// When cuBLAS cannot be loaded (gpu/cublas's search finds no library, or
// $GDIST_CUBLAS_PATH names one that does not load), New uses gdist's
// tiled kernel (gemm.cu, compiled at run time by NVRTC like gpu/kernels'):
// a 64 x 64 tile of C per block of 16 x 16 threads (4 x 4 elements a
// thread, in registers), k in steps of 16 through shared memory, the batch along the grid's z, both transposes
// and strided batches as the layers use them; each element one fp32 sum
// over k in order. Slower than cuBLAS, correct: within GemmTol(k)
// (TestTiled), and gpu/devmodel's TestTiledMatchesCPU trains the mlp and
// cnn through it as on the CPU path within the fp32 tolerances.
// Config.Tiled forces it. Backend says which is in use and why.
package gemm
