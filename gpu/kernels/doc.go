// Package kernels holds gdist's device layers: the CUDA kernels and cuBLAS
// products that run the forward and backward passes of nn's layers and
// package optim's updates on a GPU, over flat device buffers in package
// flat's layout (one buffer of parameters, one of gradients, one of each
// optimizer state, each tensor at its nn.ParamInfo offset; nn's Linear
// weight is [in, out], PyTorch's transposed; Conv2d's (Cout, C, K, K)).
// The layers the zoo's mlp, cnn, cnn-bn and gpt use are here: Linear,
// Conv2d, MaxPool2d, BatchNorm2d/1d, ReLU, LayerNorm, GELU, Tanh, Embedding
// and PositionEmbedding (fused or on its own), causal self-attention's
// core, Residual's add,
// Dropout, the softmax cross-entropy and the count of correct predictions
// (CountCorrect); SGD, Adam, AdamW and gradient-norm
// clipping. The kernels are CUDA C++ (elementwise.cu, reduce.cu; the
// layers' conv.cu, pointwise.cu and rows.cu, compiled with --fmad=false so
// that every float operation rounds on its own, as Go's do) compiled at
// run time by NVRTC through gpu/rtc (Programs lists them); the products
// go through a Products: a cuBLAS handle (gpu/cublas, fp32), or package
// gpu/gemm's Engine (cuBLAS or, without it, gdist's tiled kernel; fp32,
// TF32 or bf16 autocast), batched where a layer has many (a
// convolution's images, attention's heads). The tolerances below are
// fp32's; gpu/gemm states TF32's and bf16's.
//
//	k, _ := kernels.Load(dev)
//	h, _ := cublas.New(dev, stream)
//	kernels.LinearForward(h, k, y, x, w, b, rows, in, out) // y = x W + b
//	k.ReLU(stream, y, y, rows*out)
//	k.CrossEntropy(stream, loss, rowLoss, logits, labels, rows, classes)
//	k.CrossEntropyBackward(stream, dlogits, logits, labels, rows, classes, 1/float32(rows))
//	k.ReLUBackward(stream, dy, dy, y, rows*out)
//	kernels.LinearBackward(h, k, dx, dw, db, x, w, dy, rows, in, out, false)
//	k.SGD(stream, params, grads, momentum, n, kernels.SGDConfig{LR: 0.1, Momentum: 0.9})
//
// Every call queues work on a stream and returns; per training step only
// the batch goes up and the loss (4 bytes) comes down. Scratch is the
// caller's: each layer says how much (ConvGeom.Workspace,
// BatchNormWorkspace, AttentionGeom.Workspace and Probs, ClipWorkspace)
// and what it keeps from forward to backward; only the two-stage sums'
// partial sums and the embedding gradient's sort (below; 16 bytes a
// position and 1 KiB a block of 256, at most 512 blocks: 160 KiB at 8192
// positions) live in
// scratch that Kernels keeps per stream (512 KiB at a stream's first
// such launch, grown if ever needed, held until Kernels.Close). The tests
// TestMLPMatchesCPU and TestCNNMatchesCPU train models' mlp, cnn and
// cnn-bn this way and follow the CPU path (nn through gorgonia, optim's
// SGD) step by step; TestGPTBlock composes a transformer layer.
//
// Where a kernel does what nn's Go does, operation for operation (the
// same float32 operations in the same order, float64 where nn uses it),
// its result is nn's bit for bit; that needs nn's order of summation
// (vecmath.Sum32's eight running sums, rows in order), which the kernels
// follow where a sum is short or its order cheap to keep (layer norm,
// softmax, embedding gradients), and on amd64 (Go fuses no multiply-add
// there; on arm64 it may, and the CPU path's bits change). Products and
// long sums (cuBLAS, the per-channel trees) sum in their own orders: the
// tolerance then bounds the difference.
//
// # Tolerances (fp32, against float64 references or the CPU path)
//
//   - BiasAdd, ReLU, ReLUBackward: exact (one rounding, or none).
//
//   - SGD: bit for bit optim.SGD (PyTorch's formula): each multiply and
//     add rounded on its own (__fmul_rn, __fadd_rn: no fused multiply-add).
//
//   - BiasGrad (column sums) and LayerNorm's dgamma and dbeta: SumTol
//     (1e-5) relative to the sum of magnitudes, for up to about 8000 rows
//     (two stages: chunks of rows, each summed by 8 lanes taking every
//     8th row, the lanes' sums then the chunks' added in order; enough
//     blocks to fill the GPU, no atomics: the same result every run;
//     LayerNorm's, for rows of up to 1024, in its dx pass: below).
//
//   - CountCorrect (the rows whose first largest logit is their label,
//     train's argmax): exact (comparisons only).
//
//   - CrossEntropy: CrossEntropyTol (1e-5) relative to max(1, loss);
//     CrossEntropyBackward: CrossEntropyTol/rows per element for the mean
//     loss's gradient. Float32 with max subtraction, as PyTorch computes
//     it; the CPU path sums in float64.
//
//   - Linear (cuBLAS): 2e-6 relative to the sum of the products'
//     magnitudes (TestLinear; gpu/cublas's fp32 GEMM bound).
//
//   - The mlp (784-256-128-10, batch 32, SGD lr 0.1, momentum 0.9, 12
//     steps, loss 2.31 to 0.07): the loss within 2e-5 of the CPU's
//     (relative to max(1, loss)), every parameter within 1e-5 (weights
//     are ~0.05). Measured: ~5e-8 on the fake, 6e-8 on an H200 (cuBLAS
//     13.1, NVRTC 13.0; loss within 2.4e-7): the differences are
//     summation orders only.
//
//   - Conv2d (im2col, one cuBLAS batched product over the images, the
//     bias per channel; backward: dy as (Cout, N Ho Wo), dw and dx's
//     columns one cuBLAS product each over the whole batch, col2im
//     gathering each input's taps in nn's order, db in two stages per
//     channel):
//     every element within GemmTol(k) (k+2 roundings of 2^-24) of the
//     sum of its k terms' magnitudes (k = C K K + 1 for y, Cout K K for
//     dx, N Ho Wo for dw and db) of the float64 definition, and within
//     twice that of nn's Conv2d on the CPU path (im2col or Winograd);
//     TestConv2d, strides 1 to 3, paddings 0 to 2, 1x1 to 5x5. Measured:
//     at most 0.23 of the bound on the fake.
//
//   - MaxPool2d and its backward: bit for bit nn's (the first maximum of
//     each 2x2 window in row-major order by nn's order of floats, -0
//     below +0; the byte arg records which; the gradient written to every
//     input, 0 on the dropped odd row and column); TestMaxPool2d.
//
//   - BatchNorm2d and BatchNorm1d (training and evaluation, forward and
//     backward, running statistics with PyTorch's momentum and unbiased
//     variance): nn.BNLayer's float64 formulas, the per-channel sums in
//     two stages (chunks of each channel a block each, each chunk's count,
//     sum and M2, then the chunks in order, M2 by Chan's formula); every
//     output, running statistic and gradient
//     within BatchNormULP (1) float32 step of nn's (the float64 sums
//     differ in order only). Measured: identical on the fake over 3 steps
//     of 5 shapes; TestBatchNorm.
//
//   - LayerNorm, forward and dx: bit for bit nn's (a warp per row, the
//     row sums in vecmath.Sum32's order of eight running sums, 1/std in
//     float64); dgamma and dbeta (nn sums the rows in order) within
//     SumTol: for rows of up to 1024 summed in dx's pass, which reads dy
//     and xhat once (a block a chunk of rows, each of its 8 warps every
//     8th row, a lane's sums over its warp's rows in order, the warps'
//     then the chunks' in a fixed order: the same bits every run, with or
//     without dx), longer rows in two stages as BiasGrad; TestLayerNorm,
//     rows of 1 to 1100, up to 3100 of them.
//
//   - The fusions gpu/devmodel runs across layers (its fuse.go): BiasGELU
//     (a Linear's bias add and the GELU after it in one pass, the
//     product x left without its bias), BiasGELUBackward (GELU's gradient
//     from x and the bias, and the bias's gradient, its column sums in
//     BiasGrad's chunks and order, in one pass over dy and x) and
//     BiasAddResidual (a Residual's sum x + (f + bias) with the bias of
//     the Linear that ends its function): the unfused kernels' float32
//     operations in their order, bit for bit BiasAdd then GELU,
//     GELUBackward then BiasGrad, BiasAdd then Add (TestFusedBiasGELU,
//     TestFusedBiasResidual, the bf16 copies too).
//
//   - GELU (the exact form, as nn's) and its gradient: bit for bit nn's
//     where nn runs vecmath's kernel (its float32 Mills-ratio formula
//     with fused multiply-adds; all but the last len%8 values of an op's
//     input), within GELUTailTol (1e-6 relative to max(1, |x|)) of nn's
//     float64 table on those; TestGELU.
//
//   - Embedding and PositionEmbedding, forward and backward: bit for bit
//     nn's (the weight's gradient sums each row's positions in order:
//     the positions sorted by id on the device, stably, then a warp per
//     table row adding its rows' values in that order, loaded 32 rows at
//     a time: deterministic, no atomics; the position's sums over the
//     batch in order); an id outside the table gives NaNs forward and
//     adds to no row backward; TestEmbedding, TestEmbeddingGradVocab
//     (tables of 256, 50257 and 70000 rows), TestEmbeddingGradBadIDs.
//
//   - Causal self-attention's core (AttentionForward/Backward between
//     the projections, which are LinearForward/Backward): the heads read
//     and written in place in the (N T, 3C) and (N T, C) rows where the
//     Products batch by pointers (gemm.Engine through a cuBLAS with
//     cublasGemmBatchedEx: each block product one call over all N H
//     heads, head h of sequence n at n T 3C + h D; AttentionInPlace),
//     else copied into (N H, T, D) matrices and back (the tiled kernel,
//     an older cuBLAS, a plain cublas.Handle, $GDIST_ATTENTION_HEADS=copy;
//     the two bit for bit alike on the fake, TestAttentionInPlace, and
//     the same values cast under bf16); the products block-causal: T in
//     blocks of Tb rows (AttentionGeom.BlockSize: 128 above T = 128,
//     else T, unless Block or $GDIST_ATTENTION_BLOCK sets it;
//     DefaultAttentionBlock says why), each block row's S_i =
//     Q_i K_{0..i}^T, O_i = P_i V_{0..i}, dP_i = dO_i V_{0..i}^T and dQ_i
//     = dS_i K_{0..i}, each block column's dV_j and dK_j from the blocks
//     at and below the diagonal, each one batched product over all
//     sequences and heads, P in the (N H, T, T) layout of before; the
//     blocks above the diagonal (44% of the scores at T = 1024) are
//     neither computed, written nor read. The masked softmax and its
//     backward bit for bit nn's given the same scores (CausalSoftmax:
//     nn's float32 exponential and Sum32's order, a warp per row; in
//     attention each row written up to its block's end). CausalSoftmax
//     within SoftmaxTol (1e-6 relative) of float64, its backward within
//     GemmTol of the terms (TestCausalSoftmax); nn's whole
//     CausalSelfAttention (output and every gradient) within AttentionTol
//     (1e-5) of the largest value of each tensor of nn's on the CPU path
//     (TestAttention; measured 3e-7 on the fake). The blocks leave each
//     dot product's terms in their order and drop only masked ones
//     (exact zeros, first or last in the sum): on the fake, whose
//     products sum in order, blocked attention is bit for bit (a zero's
//     sign aside) the whole T x T products (fp32 through cuBLAS, the tiled kernel and bf16;
//     TestAttentionBlocks, T = 13 in blocks of 4 among others); on a GPU
//     cuBLAS chooses its kernels by shape, and the two agree within
//     AttentionTol.
//
//   - The fused causal attention ($GDIST_ATTENTION=fused, read by
//     AttentionGeom.Fused: gpu/devmodel's plan then runs
//     AttentionFusedForward and AttentionFusedBackward instead of the
//     block-causal products; "" or "blocks" is the default): a block of
//     threads per 64 queries (or keys) of a head, Q, K and V read in
//     place from the (N T, 3C) rows, the keys and values (or queries and
//     output gradients) through shared memory 64 rows at a time (32 for
//     heads over 64), an online softmax (a running maximum and sum per
//     row), tiles after the diagonal never read; only O and each row's
//     log-sum-exp (N H T floats, not P's N H T^2) kept; the backward
//     recomputes P tile by tile, dQ (with D_i = dO_i . O_i) in one
//     kernel over query tiles and dK, dV in another over key tiles (no
//     atomics). fp32 arithmetic under every precision (under bf16
//     autocast more accurate than autocast needs), heads of up to 128
//     values. Every element of out, dQ, dK and dV within a bound derived
//     from float32's rounding of the float64 attention (each score's
//     GemmTol(D) of its terms' magnitudes, P's relative error twice the
//     row's largest plus GemmTol(2T) plus 4u (|s - L| + ln T) for the
//     scale's rounding, each sum's GemmTol(T): attention_fused_test.go's
//     attnRef), which the block-causal path meets too, so the two are
//     within twice it of each other (TestAttentionFused: T 1 to 129
//     across the 64-row tiles, heads of 2 to 128 through each
//     instantiation padded and exact; measured at most 0.09 of the bound
//     on the fake). A gpt
//     with it follows the CPU path within TestGPTMatchesCPU's tolerances
//     (gpu/devmodel's TestFusedAttentionFollowsCPU). Not the default
//     until a GPU has measured it.
//
//   - Tanh: within TanhTol (1e-6) of nn's float32 tanh (chewxy/math32)
//     relative to |y|, and of the float64 tanh (CUDA's tanhf); its
//     backward (1 - y y) dy bit for bit gorgonia's given the same y;
//     TestTanh (measured 0.18 TanhTol on the fake).
//
//   - PositionEmbedding on its own (not right after an Embedding): the
//     sum y = x + pos, one float32 add, and pos's gradient the batch's
//     sum in order: bit for bit nn's; TestPositionEmbedding.
//
//   - Add (nn's Residual and its backward): one float32 add, exact.
//
//   - The products under TF32 and bf16 autocast (a gemm.Engine of that
//     precision as the Products): each element within gemm.TF32Tol
//     (2^-10) and gemm.BF16Tol (2^-7) more than GemmTol(k) of the fp32
//     product, relative to its terms' magnitudes (gpu/gemm's TestTF32,
//     TestBF16); whole models from the same weights (gpu/devmodel's
//     TestPrecisionFollowsCPU): the loss within 1e-4 (TF32) and 1e-3
//     (bf16) of the CPU's fp32 path relative to max(1, loss), every
//     gradient within 2e-3 and 2e-2 of its tensor's largest. Under bf16
//     an operand two products in a row read is cast once
//     (TestBF16KeepsShared: the same bits), and attention holds what its
//     block products read many times (gemm.Engine.Hold: Q, K, V and dO,
//     dS's lower blocks) cast once: 7 N T C + 3 Scores values a layer
//     (TestAttentionBlocks). LayerNormForwardBF16, GELUBF16, ReLUBF16,
//     GELUBackwardBF16, ReLUBackwardBF16, LayerNormBackwardBF16 and
//     AddBF16 also write their output's
//     bf16 copy (gpu/gemm/bf16.cuh's bf16_bits: gemm's cast, the same bits) for
//     gemm.Engine.Provide; their fp32 outputs are unchanged
//     (TestLayerNormForwardBF16, TestActivationsBF16: a tie to even, a
//     NaN).
//
//   - gdist's tiled GEMM (gpu/gemm, where cuBLAS is absent): GemmTol(k),
//     as cuBLAS's fp32 (TestTiled; the mlp and cnn train within the fp32
//     whole-model tolerances, devmodel's TestTiledMatchesCPU).
//
//   - Adam and AdamW: bit for bit optim's (the constants computed on the
//     host as optim does, each float32 operation rounded on its own on
//     the device); TestAdam, with and without weight decay, 5 steps.
//
//   - ClipGradNorm (train's -clip-grad, clip_grad_norm_): the float64
//     norm by a deterministic two-level tree (1024 equal stretches, then a
//     tree over them) within NormTol (1e-12) of train's ordered sum; the
//     clipped gradients bit for bit train's (the same float32 factor),
//     nothing clipped for a non-finite norm; the norm stays on the device
//     for the caller to read; TestClipGradNorm. ZeRO's clipping with no
//     host read: ClipSquare gives a shard's norm squared for the ranks to
//     sum on the device, ClipGlobal the global norm and the factor from
//     that sum and scales the shard, bit for bit devmodel's ClipShard
//     (TestClipGlobal); ClipGlobalExact scales by the CPU's factor,
//     float32(max / (norm + 1e-6)), for a pipeline's stages
//     (TestClipGlobalExact).
//
//   - Dropout: nn's mask exactly (nn's hash of the seed, the graph's run
//     and the element's index in the global batch, so N ranks drop what
//     one process with the whole batch drops, on the device too) and the
//     kept values scaled bit for bit; the backward is the same call;
//     TestDropout reads nn's mask from nn's training graphs.
//
//   - The cnn and cnn-bn (models' zoo, batch 8, SGD with momentum, 8
//     steps; TestCNNMatchesCPU runs their nn.Sequential layer by layer on
//     the device over the flat layout, as the CPU path's weights and
//     batches): the loss of every step within 2e-5 of the CPU's (relative
//     to max(1, loss)), every parameter and running statistic within
//     2e-5. Measured on the fake: losses within 6e-7, parameters within
//     1.6e-7 (the CPU path's second convolution runs Winograd).
//
// Reductions use __syncthreads over shared memory or warps that meet at
// shuffles, ballots and __syncwarp (never implicit lockstep), and nothing
// else the fake's emulation (gpu/rtc) cannot run; no atomics: every
// result is the same from run to run. The tests run on a real GPU when
// one is there (GDIST_CUDA_TEST=real insists), else on gpu/cudafake, and
// TestRealNVRTC compiles every program with a real NVRTC where installed.
//
// # Launch shapes (for an H100: 132 SMs, 2048 threads each)
//
// Every launch that moves more than 1 MiB at the zoo's measured shapes
// has at least 2 blocks per SM: TestAudit (audit_test.go) walks a
// training step of gpt-L12-D768-H12-T1024 at batch 8 and mlp, cnn and
// cnn-bn at 32 as gpu/devmodel's plan runs it, records every launch
// instead of queueing it and fails on one that does not; with -v (or
// GDIST_KERNEL_AUDIT=FILE) it prints each launch's grid, block, bytes and
// ideal time (benchmarks/NOTES.md keeps the tables). Element-wise kernels
// are grid-stride loops of at most 1024 blocks of 256 threads; row-wise
// ones (the bias add, the embedding, attention's head copies where it
// copies) a 2-d grid,
// rows by a row's values, with no division per element; float4 accesses
// where the launch finds every buffer 16-byte aligned and the widths
// multiples of 4 (one value a thread otherwise: ZeRO shards sit at any
// offset); 32-bit index math where the sizes are checked below 2^31 (the
// convolution's and pooling's kernels, attention's copies; batch norm's
// where total + the grid's stride < 2^32) and 64-bit otherwise. Column
// and per-channel sums (BiasGrad, batch norm's parameter sums, the
// convolution's bias gradient, LayerNorm's for rows over 1024) run in two
// stages: about 1024 blocks over chunks of rows, then each column's
// chunks added in order (16 chunks' loads in flight at a time);
// LayerNorm's backward for rows of up to 1024 sums its parameters'
// gradients in its row pass, about 384 blocks of 8 warps over chunks of
// rows, then a warp a column over the chunks. The embedding's gradient
// sorts the positions by id first (a stable LSD radix sort of 8-bit
// digits, a pass a digit of the table's last row: one at a byte
// vocabulary, two at GPT-2's; each pass a blocks' histogram, one block's
// prefix sums over them and a scatter, a block of Block positions, no
// atomics; in the stream's scratch, 20 bytes a position), then a warp per
// table row and 32 of its values finds its rows by a binary search in the
// sorted ids and adds their values in order, 32 rows' loads in flight at
// a time: work in rows dim + num dim. It was a warp per table row
// scanning every id (rows num dim / 32 id reads: 0.2 GB a GPT-2 small
// step at a byte vocabulary, 40 GB at GPT-2's).
// The row kernels (LayerNorm forward and dx, the causal softmax and its
// backward: a warp per row) hold a row of up to 1024 values in registers
// (32 K a warp, K instantiated for 2 to 32), read once and written once;
// longer rows are read from memory in each pass. Both give the same bits
// (TestLayerNormRegisters, TestCausalSoftmaxRegisters). TestAudit also
// checks the gpt's attention against the block-causal formulas: 6
// products a block row or column a layer, 12 D Scores FLOPs, the softmax
// writing Scores values, and no head copies (5 a layer moving 22 N T C
// floats with GDIST_ATTENTION_HEADS=copy); the plan's fusions across
// layers (auditFusions: per layer one bias + GELU forward, one GELU +
// bias gradient backward, two Residual sums with their Linear's bias,
// no GELU, bias add or add of their own); TestAuditFused, the fused
// attention's three kernels a layer, their ideal time their arithmetic
// at fp32's peak (10.4 ms a GPT-2 small step at batch 8 on an H100).
//
// SyncBatchNorm: BatchNormForwardSync and BatchNormBackwardSync call a
// BNSync hook between the per-channel sums and their use ([sum x, M2,
// count] forward, [sum dy, sum dy xhat] backward, nn.BNLayer.Sync's
// layout), which makes them span the ranks.
//
// Package gpu/devmodel places a whole nn.Model on the device over these
// kernels (a layer without device kernels refused by name). Not yet here
// (issue 28): the LR schedule's value per step (a host function of the
// step: pass it to SGD or Adam), fused kernels (conv + bias + ReLU + pool;
// the bias + GELU and the bias + residual sum are done, above;
// attention without the T x T probabilities is an option,
// $GDIST_ATTENTION=fused, not yet measured on a GPU), timings on a
// GPU of the kernels since runs 5 and 6 (the audit counts bytes, blocks
// and FLOPs; those runs on an H200 timed the step and, with ncu, its
// kernels before the fusions, the fused attention and the embedding
// gradient's sort: benchmarks/NOTES.md).
package kernels
