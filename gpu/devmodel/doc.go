// Package devmodel places an nn model on a GPU and trains it there: the
// parameters, gradients and optimizer state in device memory in package
// flat's layout (one buffer each, every tensor at its nn.ParamInfo
// offset, as the host model's Flat.Value and Flat.Grad, so that DDP and
// ZeRO can reduce the device gradients in place over NCCL), a step's
// forward pass, mean cross-entropy and backward pass from gpu/kernels
// (per step only the batch goes up and the loss, 4 bytes, comes down),
// and package optim's updates (SGD with momentum, Adam, AdamW, gradient
// clipping by global norm; the learning rate per step from the caller,
// optim.Schedule.At) on the device.
//
// The matrix products go through gpu/gemm (cuBLAS, or gdist's tiled
// kernel where cuBLAS is absent) in Config.Precision: "fp32" (default),
// "tf32" or "bf16" autocast, PyTorch's names and semantics; Products
// says which. Under bf16 the parameters are registered with the
// engine's weight cache (autocast.go): each weight is cast to bf16 once
// per change, not per product; Update and CopyFromHost (a Stage's too)
// announce the changes, a strategy that writes Params itself calls
// ParamsChanged, and Casts counts the values cast. Under bf16 (through
// cuBLAS with the cast kernel: gemm's UsesCopies) the training plan also
// has the kernels that produce a Linear's input (LayerNorm, GELU, ReLU)
// write its bf16 copy as they go, and those that write a Linear's output
// gradient (GELU's and ReLU's backward after it; a Residual's backward
// sum and LayerNorm's backward after the Residual it ends) its copy;
// the Linear gives the copies
// to the engine (gemm's Provide) for its forward and weight-gradient
// products and its two backward products, and withdraws them after its
// backward (Eval, EvalForward and a plan's release withdraw every copy;
// the backward gives them again first, so that a Stage's Backward after
// an EvalForward reads them still),
// so those operands are not cast: the same bits, fewer casts (2 bytes a
// value of each copy, in the plan's memory and PeakBytes; none in fp32
// and TF32 or in a forward-only plan). A LayerNorm's or GELU's output
// that only those products read keeps no fp32 value at all: its kernel
// writes the copy alone (memory.go's copyOnly; TestCopyOnlyValues), in
// a Model's training plan and a Stage's alike (keepCopiesOnly), except
// a stage's input and output, which the stages send and receive in fp32
// (TestStageCopyOnly). A
// training plan fuses the bias add of
// a Linear into the layer that reads its output next, where that is a
// GELU (kernels.BiasGELU and BiasGELUBackward: GELU's gradient and the
// bias's column sums in one pass) or the sum of a Residual whose
// function the Linear ends (kernels.BiasAddResidual), the fused work in
// the Linear's op (fuse.go): the same bits, without the bias add's pass
// over the Linear's output (a read and a write) and, after a GELU, the
// bias gradient's second read of the output gradient (GPT-2 small at
// batch 8: 1.45 ms less ideal kernel time a step on an H100, 48 launches
// fewer; gpu/kernels' TestAudit). Config.SyncBN makes every batch norm a SyncBatchNorm: its
// statistics span the data-parallel ranks through the hook the strategy
// provides (SyncBNFunc): syncbn.Device's over NCCL keeps them on the
// device (an all-gather forward, an all-reduce backward, ordered with
// the model's stream by events: no host round trip); HostSyncBN adapts
// nn's host hook (package syncbn's Syncer over any comm.Comm), copying
// the statistics through host memory. Both give the same bits.
//
//	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 32,
//		Optim: optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}})
//	defer d.Close()
//	loss, err := d.Step(x, y) // forward, loss, backward, update, zero
//	l, correct, err := d.Eval(tx, ty) // evaluation: 8 bytes come down
//	err = d.CopyToHost()      // m's Flat.Value and BNs: save m as on the CPU
//
// Eval is the forward pass in evaluation mode, nn's evaluation graph's
// (Model.NewGraph(batch, false)): batch norm on its running statistics,
// Dropout off. It returns the batch's mean cross-entropy over its labels
// and the number of labels that are their logits' argmax (the first
// largest, as train's Evaluate counts), and changes nothing: parameters,
// gradients, running statistics and counts, the optimizer's state and
// Dropout's run count are as they were, so training goes on bit for bit
// as without it.
//
// Eval runs a forward-only plan (evalplan.go), compiled once per batch
// size with the compiler's eval flag: no gradients, nothing kept for
// backward, each buffer given back once its last reader has run so that
// later ones reuse it (liveness at compile time: a Sequential child's
// input dies after it unless a Residual holds it; a layer's scratch dies
// with the layer; in place where the kernel allows it; the convolutions'
// unrolled input and attention's scores and probabilities in chunks of
// samples, within the layer's output size; with $GDIST_ATTENTION=fused
// the fused attention forward, as training: no scores or probabilities,
// TestEvalFusedAttention). It borrows the training
// plan's blocks (kept as they are: training goes on without planning
// again), and what does not fit comes from an evaluation arena allocated
// once (EvalBytes); a batch too large for both runs in passes of fewer
// samples, its input, labels and logits whole, the values the same. After
// the first evaluation at a batch size (and after each training batch
// size) an evaluation allocates nothing. Stage.EvalForward is the same for
// a pipeline stage (its own arena; train/pp evaluates a batch in passes of
// a micro-batch through the stages). Peak device memory on the fake,
// `train -device cuda -model cnn -batch 16` with the default evaluation
// batch (500), before (evaluating with a training plan at the evaluation
// batch: every activation, its gradient and the layers' scratch) and
// after: 1 rank 736 MB -> 27.9 MB (the same as with -eval-batch 16;
// 16.3 MB since the training plan's region, memory.go), a 2-stage
// pipeline in 3 micro-batches 685 MB -> 16.2 MB (11.3 MB since the
// stages' plans are laid out in regions too) (TestDeviceEvalPeak in
// cmd/train).
//
// Data parallelism (train/dp) reduces Grads and Params in place over the
// ranks (comm.DeviceBuffer over NCCL). For ZeRO, Config.Shard places the
// optimizer state for a range [Lo, Hi) of the flat buffers only, and
// Update changes that range's parameters; ClipShard clips the range's
// gradients by the whole gradient's norm, which the caller combines
// over the ranks (TestShardsMatchWhole: two halves clipped and updated
// apart, then gathered, hold the whole model's parameters and AdamW
// state; measured bit for bit), and ClipShardQueued does the same with
// no host read (the square summed on the device by the caller's
// collective, the factor computed there, the norm logged for
// GradNorms), bit for bit ClipShard's (train/dp's
// TestDeviceZeroClipOnDevice). Config.ShardGrads (ZeRO-2) keeps only
// the shard's gradients: backward runs in units of layers (at least
// Config.UnitFloats parameters), each unit's gradients in a block
// that ReduceGrads reduces over the ranks and that is released
// once this rank's part is added into the shard; Config.ShardParams
// (ZeRO-3) keeps only the shard's parameters, each unit's gathered by
// GatherParams into a block before its forward and its backward,
// and Unshard gathers them whole for evaluation (zero.go;
// TestShardedUnitsMatchWhole: bit for bit the whole model's training).
// The units' blocks are laid out by their lives in one region of their
// exact sizes (zero.go's unitMem), held from the first sharded pass and
// counted in PeakBytes (TestUnitBlocksLaidOut); Unshard frees it. An
// Unshard that cannot have the whole buffer errs naming the model,
// device, shard and bytes and puts the shard back, so the rank trains on
// bit for bit (TestUnshardOutOfMemory; should the shard's own buffer not
// be had back either, its values stay in host memory and ForwardBackward,
// Eval and Update refuse, naming Reshard, which puts them back).
// BNBuffers are batch norm's running statistics on the device, which a
// strategy broadcasts from rank 0.
//
// Streams and events (streams.go): the model's work is queued on its own
// stream (Stream), a non-blocking one, which nothing orders with the
// legacy default stream; every dependency is an event or a host wait.
// A step's batch and labels go up from pinned memory on that stream,
// its gradients are zeroed there, and its loss comes down into pinned
// memory there: the host waits for the stream only for the loss (and
// Eval's counts, GradNorm's norm; Update's clipping logs its norm on the
// device, which GradNorms reads for all the steps at once), on a
// blocking-sync event with a
// cuda.Waiter (a brief poll, then asleep: no host core spins for the
// step; TestStepWaitCostsNoCPU). Uploads outside a step (CopyFromHost,
// the optimizer state, Unshard and Reshard, HostSyncBN's result) run on
// the legacy stream, and the model's stream then waits for an event
// recorded there; copies down synchronize the stream first. Collectives
// on the model's buffers run on other streams (NCCL's) and are tied to
// it with a cuda.Order: OnGradsReady comes when a bucket's gradients
// are queued (the collective waits for an event recorded then);
// ReduceGrads and GatherParams get such an event (after) and return how
// to make the stream wait for their result (an event recorded after the
// collective, waited for on the device); a unit's block is another's
// once its ops are queued (zero.go's unitMem), and its next user (a gather on NCCL's
// stream) waits for the event recorded after them, never the host
// (TestGatherWaitsForReaders). A caller that reads or writes the
// buffers with cudaMemcpy synchronizes Stream first, or makes it wait
// (Stream.WaitDefault) after.
//
// Place walks the model's layer tree and maps each nn layer to its
// kernels (Layers lists them); a layer without device kernels (a user
// layer type, nn.Func, nn.Adapt; a SyncBatchNorm without Config.SyncBN)
// is refused then, by its
// name and Go type, never in the middle of a step; Check does the same without a device. A
// user layer built of nn's layers (nn.Seq, nn.Residual and the layers
// above) runs unchanged. The activations, their gradients and the
// layers' scratch are laid out once per batch size in one region of
// device memory (memory.go), buffers whose lives in a step do not meet
// sharing it: a gradient lives in the backward pass only, from its
// reader's backward to its producer's; values no backward reads live in
// the forward pass only (the same bits: TestSharedPlanSameBits); a step
// allocates nothing; PeakBytes reports the most device memory held, and
// Memory (MemoryPlan without a device; StageMemoryPlan for a pipeline
// stage) says where it goes. GPT-2 small at batch 8 (AdamW): fp32 25.2
// GB measured before on an H200, 11.8 GB laid out now; bf16 autocast
// 28.1 GB measured, 10.97 GB laid out plus the products' scratch; with
// $GDIST_ATTENTION=fused 6.59 GB fp32 (benchmarks/NOTES.md, "Device
// memory of a GPT step"; TestMemoryGPT2Small, TestFusedAttentionMemoryPlan,
// TestMemoryIsPeak, TestSharedPlanSameBits; the laid-out figures not yet
// measured on a GPU). An allocation that fails leaves the model usable:
// a step whose larger region cannot be had keeps no plan and plans the
// next batch afresh (TestPlanAfterFailedGrowth); an evaluation arena or
// units' region that cannot grow takes the old one back, and the batches
// that fitted run bit for bit as before (TestEvalAfterFailedArenaGrowth,
// TestStageEvalAfterFailedArenaGrowth).
//
// $GDIST_ATTENTION=fused (kernels.EnvAttention, read when the plan is
// compiled: changing it after placing leaves the plan as it is,
// TestAttentionEnvChangedAfterPlacing) runs attention on gpu/kernels'
// fused kernels in training and evaluation: the plan keeps each row's
// log-sum-exp (N H T floats) instead of the probabilities (N H T^2), and
// its workspace is N H T; another value, or heads wider than 128, is
// refused at Place naming the layer and the variable
// (TestFusedAttentionRefused). A gpt follows the CPU path and the
// default attention within TestGPTMatchesCPU's tolerances
// (TestFusedAttentionFollowsCPU, TestFusedAttentionPrecisions).
//
// A profile of the device time by layer kind (linear, attention,
// layernorm, ..., the loss, the optimizer, and the gaps where the device
// waited for the host): set GDIST_DEVICE_PROFILE (EnvProfile) to a file,
// written as JSON at Close, or to 1 for a table on stderr; Model.Profile
// reads it. CUDA timing events bracket each layer's forward and backward
// work and the update; the training itself is unchanged bit for bit.
//
// A Stage (stage.go, PlaceStage) is a pipeline stage on the device:
// layers [from, to) of the model's top Sequential (nn.Model.NumLayers,
// package pipeline's split), holding only its range of the flat
// parameters, gradients and optimizer state. Forward runs from an input
// activation in device memory (the batch on the first stage) to the
// output activation; Backward from the received output gradient to the
// input gradient (parameter gradients accumulate over micro-batches);
// on the last stage LossBackward takes the labels and a micro-batch's
// share of the batch instead. GradNorm and ClipGrads clip by a norm
// over every stage (each stage's norm read on the host), and ClipQueued
// likewise with no host read (the squares summed by the caller's
// collective on the device, the factor computed there, the norms logged
// for GradNorms: a stage placed with Config.ClipGrad, which never clips
// by itself); EvalForward evaluates on a forward-only plan. Each
// micro-batch size's training plan is laid out in a region of its own
// as a Model's (memory.go; the same bits as pool blocks and their
// rounding, TestStageSharedPlanSameBits). train/pp runs them as
// -strategy pipeline -device cuda.
//
// The arithmetic is gpu/kernels', within the tolerances its package
// documentation states per layer. Trained here step by step from the
// same weights and batches as the CPU path (nn's graphs through
// gorgonia, optim on the host), on the fake CUDA (gpu/cudafake) and on a
// real GPU when there is one:
//
//   - TestZooMatchesCPU: mlp, cnn and cnn-bn, batch 8, 8 steps of SGD
//     with momentum and weight decay: every loss within 2e-5 of the
//     CPU's (relative to max(1, loss)), every parameter and running
//     statistic within 2e-5 (gpu/kernels' whole-model tolerances).
//     Measured on the fake: losses within 6e-7, parameters within 1.6e-7.
//   - TestGPTMatchesCPU: a gpt of 2 layers (every layer type of the
//     zoo's gpt), 6 steps: with SGD the same tolerances (measured 4.8e-7
//     and 1.2e-7); with AdamW and clipping the losses likewise and the
//     parameters within lr (Adam's step is about lr whatever the
//     gradient's size, so a gradient of rounding noise on both paths
//     moves its parameter up to lr either way; measured 4.7e-4 at lr
//     3e-3).
//   - TestComposedMatchesCPU: a user's model of nn.Seq and nn.Residual
//     blocks with LayerNorm, GELU, Dropout and BatchNorm1d, SGD: the zoo's
//     tolerances, Dropout's masks nn's (Model.SampleOffset is nn's
//     Graph.SampleOffset).
//   - TestTanhPositionMatchesCPU: a user's model with Tanh and a
//     PositionEmbedding on its own (after a Linear) among Residual,
//     LayerNorm and Linear layers, SGD: the zoo's tolerances (measured:
//     losses within 1.2e-7, parameters within 1.2e-7 on the fake).
//   - TestPrecisionFollowsCPU: Config.Precision "tf32" and "bf16"
//     (PyTorch's allow_tf32 and bf16 autocast, package gpu/gemm): the
//     first step's loss within 1e-4 (tf32) and 1e-3 (bf16) of the CPU's
//     fp32 path, every gradient within 2e-3 and 2e-2 of its tensor's
//     largest (gpt and a Tanh model; the mlp's ReLUs flip where an
//     input is within rounding of 0), the loss after 6-8 steps within 5%.
//     Measured on the fake: tf32 gradients within 1.4e-3, bf16 within
//     8.6e-3.
//   - TestBF16WeightCache, TestBF16WeightCacheStage: bf16 with the
//     weight cache is bit for bit bf16 without it (a gpt of 2 layers,
//     6 steps and evaluations; a whole-model stage in 2 micro-batches),
//     each Linear weight cast once a step, and the cache follows Update,
//     CopyFromHost and ParamsChanged; TestBF16CastsPerStep: the values
//     cast a step equal a formula on three gpt shapes.
//   - TestBF16ProducerCopies: bf16 with the producers' bf16 copies is
//     bit for bit bf16 without them (a gpt and the mlp, 4 steps, an
//     evaluation after a forward without its backward), with the casts
//     they save (copiesSaved); it fails with a copy written once and
//     read stale after.
//   - TestFusedSameBits: the fusions across layers (fuse.go: a GELU
//     right after a Linear takes the Linear's bias, forward and backward,
//     and a Residual whose function ends with a Linear, attention's
//     out-projection included, adds that bias in its sum) train bit for
//     bit as the layers on their own: a gpt in fp32, bf16 and ZeRO-3
//     units of one layer, and a user's model, 4 steps and an evaluation;
//     it fails with a fused kernel that drops the bias.
//   - TestSharedPlanRandomModels: 60 random compositions of the layers
//     (nested Sequentials and Residuals, views such as a Dropout of 0,
//     Linears with and without a GELU after, attention; fp32 and bf16;
//     a short batch; half as ZeRO-3 units) train bit for bit with the
//     region and the fusions on and off; TestStagesRandomModels splits
//     such models into two pipeline stages at every boundary.
//   - TestTiledMatchesCPU: without cuBLAS ($GDIST_CUBLAS_PATH naming no
//     library) the products go through gpu/gemm's tiled kernel; mlp and
//     cnn follow the CPU path within the fp32 tolerances (measured:
//     parameters within 7.5e-8).
//   - TestSyncBNMatchesDoubleBatch: cnn-bn with Config.SyncBN on two
//     ranks (goroutines, one fake device each, HostSyncBN over package
//     syncbn on an inproc comm) at batch B equals one rank at 2B: loss,
//     averaged gradients, running statistics; with syncbn.Device over
//     NCCL instead, the same bits as HostSyncBN.
//   - TestEvalMatchesCPU: mlp, cnn (also at 4 times the placed batch),
//     cnn-bn, a gpt of 2 layers and a user's model with BatchNorm1d and
//     Dropout, after 3 steps and a pending backward, evaluated at the
//     placed batch and shorter ones: the loss
//     within 2e-5 of train's evaluation of the same weights on the CPU
//     (nn's evaluation graph, nn.CrossEntropy; relative to max(1,
//     loss)), the count of correct predictions exactly where no row's
//     two largest logits are within 4e-5 (relative to max(1, |logit|));
//     the model's state afterwards bit for bit what it was, and the next
//     step bit for bit that of a copy never evaluated. Measured on the
//     fake: losses within 1.5e-7, every count exact (no near ties).
//   - TestEvalPlanSameBits: Eval's forward-only plans equal evaluating
//     with a training plan at the evaluation batch (what Eval did before
//     them) bit for bit, loss, count and every logit, for mlp, cnn,
//     cnn-bn, a gpt of 2 layers, an Embedding/Linear model and a user's
//     model of Residuals (one around a Dropout), LayerNorm, GELU, Tanh,
//     BatchNorm1d and Dropout, at the placed batch, 4 and 16 times it
//     plus 3 (in passes, a short last one zero-padded: the cnn's 67 in
//     passes of 56, the cnn-bn's of 41, the mlp's 131 of 32, the
//     Embedding model's 35 of 8; attention a sequence at a time) and a
//     short one; a step after Eval
//     equals a step without it (on a real GPU, where cuBLAS may choose
//     other kernels for smaller products, within 2e-5). TestStageEvalForward:
//     EvalForward equals Forward bit for bit and leaves Forward's
//     activations to Backward. TestEvalAllocatesOnce: no cudaMalloc (the
//     fake's fails) in Eval or training after the first evaluation at
//     each size. TestEvalPeakBelowTraining: the cnn placed at 4 and
//     evaluated at 16 holds nothing beyond its training plan's blocks and
//     the batch's own buffers (0 bytes here; before, a training plan at 16,
//     about 4 times the 5.7 MB one at 4); a stage of its convolutions
//     evaluated at 16, at most the input, conv1's output and half of it
//     per sample (2.43 MB; its training activations and gradients at 4:
//     2.71 MB).
//   - TestUpdateMatchesOptim: the device's updates (clipping, SGD, Adam,
//     AdamW) on the device's gradients equal optim's on the host within
//     1e-6 relative.
//   - TestStagesMatchWhole: the mlp split in 2 stages at each boundary
//     and in 3, the cnn and a 2-layer gpt (AdamW, clipping over the
//     stages) in 2, batch 8 in micro-batches of 3, 3 and 2 (recomputed
//     or not), 4 steps: losses within 2e-5 of the whole model's on the
//     device and of the CPU's, parameters within 2e-5 (lr with AdamW).
//     Measured on the fake: parameters within 3e-8 of the whole model's
//     (2.8e-4 with AdamW).
package devmodel
