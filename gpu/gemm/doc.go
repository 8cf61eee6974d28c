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
//     cast to bf16 (round to nearest even), multiplied by cublasGemmEx /
//     cublasGemmStridedBatchedEx with CUDA_R_16BF inputs,
//     CUBLAS_COMPUTE_32F and fp32 output. Parameters (the master
//     weights), gradients, optimizer state, reductions, softmax,
//     normalizations and the loss stay fp32 (gpu/kernels). Unlike
//     PyTorch's autocast, a product's output is fp32, not bf16. What is
//     cast, and when, is below.
//
// # What bf16 autocast casts, and when
//
// Through cuBLAS each operand of a product is read in bf16 from one of
// five places, four written by gdist's cast kernels (gemm.cu: four values a
// thread, 16-byte loads and 8-byte stores, where the operand is 16-byte
// aligned; one a thread where not; the same bits either way) (the tiled
// kernel instead rounds each value as it loads its tile, and casts
// nothing). An operand cast for a product whose span has gaps (a block of
// a larger matrix, as attention's block products read, padded rows,
// gaps between a batch's matrices) is cast compactly: only the values
// the product reads, rows of its columns, one launch with the rows
// along the grid's y (TestStridedOperands); a dense one as one run.
//
//   - Weights: the parameters registered with Weights (gpu/devmodel
//     registers a model's flat parameter buffer, or a pipeline stage's,
//     at placement). The engine holds a bf16 copy of them (2 bytes a
//     parameter, allocated by the first product that reads one); an
//     operand lying inside them is cast into it the first time a product
//     reads it after the last WeightsChanged, and every later product
//     reads the copy. gpu/devmodel calls WeightsChanged wherever the
//     parameters are written (Update, CopyFromHost, a Stage's, and
//     Model.ParamsChanged for a strategy's own writes), so a weight is
//     cast once per optimizer step: its forward product casts it and
//     backward's input-gradient product (and every other micro-batch's)
//     reads the copy. This is PyTorch's autocast cache (the cast of a
//     leaf tensor that requires grad is kept for the autocast region);
//     Config.NoWeightCache or $GDIST_AUTOCAST_CACHE=0 turn it off, as
//     autocast(cache_enabled=False). A product whose output overlaps the
//     registered values drops their copies. ZeRO-3 registers nothing:
//     its products read each unit's gathered block, gathered again for
//     backward, which the cache could not save a cast of.
//   - KeepNext's operand: one a caller names, cast into a buffer of its
//     own and kept for the one product after (the backward passes'
//     operands that two products in a row read: Linear's dy, Conv2d's D;
//     TestKeepNext, kernels' TestBF16KeepsShared).
//   - Held regions (Hold, until Release): values several products read,
//     cast once into a copy at the same index (2 bytes a value over the
//     region's span, a buffer per region kept across Release), which
//     every product whose operand lies inside reads in place: a dense
//     region or a staircase (row r's first widths[r] values: a causal
//     product's lower blocks). Block-causal attention holds Q, K and V
//     forward (qkv, in place), Q, K, V and dO backward, and dS's lower blocks for its
//     block rows (dQ_i) and columns (dK_j) (TestHold, kernels'
//     TestAttentionBlocks). The caller promises no writes until Release;
//     a product writing into a held region is refused.
//   - Given copies (Provide, until Withdraw): a dense region whose bf16
//     copy the caller wrote (at the same index, bits as the cast's) as
//     it produced the fp32 values: nothing is cast for an operand inside
//     it. gpu/kernels' LayerNorm, GELU and ReLU write their outputs'
//     copies (LayerNormForwardBF16, GELUBF16, ReLUBF16) and GELU's,
//     ReLU's and LayerNorm's backwards and Add (a Residual's backward)
//     their input gradients' (GELUBackwardBF16, ReLUBackwardBF16,
//     LayerNormBackwardBF16, AddBF16); gpu/devmodel's plans, under bf16 autocast,
//     give a Linear's input from forward to its weight-gradient product
//     in backward, and its output gradient for its two backward
//     products (TestProvide, devmodel's TestBF16ProducerCopies). The
//     producer costs 2 bytes written a value where a cast reads 4 and
//     writes 2 for every product that reads it. Release does not end a
//     given copy; a product writing into one is refused; the engine
//     cannot see other writes, so the caller withdraws before the memory
//     is written again (devmodel: after the Linear's backward, and
//     WithdrawAll before an evaluation and when a plan's region is
//     freed). UsesCopies says whether the copies are read at all
//     (not in fp32, TF32, with the tiled kernel or CastInCUBLAS). The
//     fp32 address need hold no values: gpu/devmodel keeps a value only
//     bf16 products read as its copy alone, its address a key in
//     address space reserved without memory (a held or given region
//     serves no operand 2^63 bytes or more above it: TestProvideFarBelow).
//   - Everything else (other activations and gradients, attention's
//     blocks of P): cast for the product into a scratch buffer that
//     grows to the largest product's operands in the first step and
//     stays. An activation read by two products far apart and produced
//     by no kernel that writes a copy (attention's output, read by the
//     out-projection forward and its dW; attention's P, read by P V and
//     by dV = P^T dO) is cast by each (benchmarks/NOTES.md has the
//     numbers).
//
// With Config.BF16Cast CastInCUBLAS ($GDIST_BF16_CAST=cublas) nothing is
// cast: cublasGemmEx reads the fp32 operands with the compute type
// CUBLAS_COMPUTE_32F_FAST_16BF and rounds them to bf16 itself as it loads
// them (cuBLAS "may": the rounding is not guaranteed as autocast's is).
// It removes every cast pass, at the price of products reading 4 bytes
// a value instead of 2. Measured on an H200 (benchmarks/NOTES.md): the
// Linears' products at half the speed of the cast kernel's, attention's
// at twice; a GPT-2-small step at 0.84x the default's speed, so it stays
// opt-in. On the fake the two give the same bits (TestBF16CastInCUBLAS,
// cmd/train's TestDeviceBF16CastInCUBLAS); on the GPU cuBLAS did not round
// the small pointer-batched products (their losses still agree within
// bf16's tolerance).
//
// The bf16 memory at gpt-L12-D768-H12-T1024 batch 8: the scratch (the
// largest product's operands), KeepNext's buffer (a Linear's dy), the
// held regions (Q, K, V, dO: 50 MB; dS's span: 201 MB) and the weight
// cache (2 bytes a parameter) are the engine's; the given copies are the
// caller's (gpu/devmodel's plan: 2 bytes a value of each LayerNorm's and
// GELU's output and of the gradients written for the Linears, about 1.8
// GB).
//
// CastStats counts the values cast, by kind (Operands, Weights) and the
// weight reads the cache served (WeightReuses); Bytes is their traffic
// (4 bytes read and 2 written a value). gpu/devmodel's Model.Casts reads
// them; its TestBF16CastsPerStep checks them against a formula for the
// gpt, and TestBF16WeightCache and cmd/train's
// TestDeviceBF16WeightCacheUnchanged that training with the cache is bit
// for bit training without it, each weight cast once a step.
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
// # Two-level batches (MatMulBatched2)
//
// A batch whose matrices are not one stride apart, product (o, i) at
// Outer o + Inner i (attention's heads read in place: head h of sequence
// n of (N T, 3C) rows at n T 3C + h D), is one cublasGemmBatchedEx
// (PointerBatches) over arrays of device pointers. Chosen over one
// strided product per sequence (N launches for each of attention's 6 nb
// block products a layer: 8x the launches at batch 8) and over
// cublasGemmGroupedBatchedEx (CUDA 12.5 and later; its groups of
// different shapes serve nothing here, every product of a call has one
// shape): cublasGemmBatchedEx is in every cuBLAS from CUDA 9.1 (11 here,
// 13 on the GPU machine), one launch a product as the strided call. The
// arrays are a function of (address, element size, strides, outer,
// inner) only, so the engine builds each once, by a copy from pinned
// memory on its stream at the first product that needs it, and keeps it
// (PointerArrayBytes; a model whose buffers stay put builds them all in
// its first step: about 1.5 MB at gpt-L12-D768-H12-T1024 batch 8; past
// 64 MB the engine waits for its stream and starts over). Under bf16 an
// operand inside a held region is read from the held copy in place; any
// other is cast compact as MatMulBatched's. Without cublasGemmBatchedEx
// (the tiled kernel, a library lacking it) it is one product per o (per
// (o, i) where C's matrices lie side by side in its rows), and
// gpu/kernels' attention copies the heads instead (TestMatMulBatched2Heads:
// bit for bit one product per head, every precision and backend).
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
