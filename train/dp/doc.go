// Package dp registers train's data-parallel strategies, each in a file:
// "ddp" (ddp.go: every rank holds the whole model; gradients are averaged
// in buckets during backward, package ddp) and "zero1", "zero2", "zero3"
// (zero.go: ZeRO stages 1-3, package zero, sharding the optimizer state,
// then the gradients, then the parameters). Import it for its
// registration:
//
//	import _ "github.com/gdist/gdist/train/dp"
//
// Their options (DDPOptions, ZeroOptions) are train.Options: the
// -bucket-mb and -first-bucket-mb caps they share (Buckets, whose
// defaults are package ddp's), and DDP's -no-overlap, -compress and
// -debug. Both kinds of strategy checkpoint with train's helpers
// (train.SaveFull, train.SaveZero and their snapshots) and load any
// checkpoint with train.LoadCheckpoint.
//
// # On GPUs
//
// With Config.Device "cuda" (-device cuda) every strategy here trains
// on GPUs (device.go, zero_device.go, device_comm.go): each rank's model
// placed by gpu/devmodel on its GPU (the nccl Comm's, which is
// LOCAL_RANK, modulo the GPUs with GDIST_NCCL_SHARE_GPU=1, so cuda:N
// with N > 0 is refused there: CUDA_VISIBLE_DEVICES picks the GPUs; with
// a host backend GPU N of cuda:N plus the local rank, modulo the GPUs), its
// parameters, gradients and optimizer state in device memory in flat's
// layout, Dropout's masks placed by the rank's first sample in the
// global batch. DDP all-reduces (averages) the gradient buffer in place;
// ZeRO reduces each shard of it to the shard's owner (a reduce-scatter),
// each rank clips its shard by the global norm, updates its shard of the parameters with its
// shard of the optimizer state, and the parameters are all-gathered.
// With -clip-grad no step waits for the device to read the norm: DDP's
// Update logs each norm in device memory, and ZeRO clips in Update with
// the norm kept on the device (devmodel.ClipShardQueued: each shard's
// square summed over NCCL in the model's stream order, the factor
// computed there; through host memory over a host backend), bit for bit
// the host's clipping, ClipGrads (TestDeviceZeroClipOnDevice,
// TestDeviceZeroClipOnDeviceHostBackend); both are train.GradNormLoggers,
// whose norms Run reads once at the end.
// With -backend nccl the collectives take the device buffers
// (comm.DeviceBuffer); with a host backend (shm, tcp, inproc) the
// buffers are copied to host memory, reduced there and copied back:
// correct, two copies slower per collective, so several ranks can share
// a GPU without NCCL. DDP over NCCL averages the gradients in buckets
// (-first-bucket-mb, -bucket-mb) during backward: a bucket's all-reduce
// starts once backward has queued its last gradient
// (devmodel.Model.OnGradsReady) and NCCL's stream waits for an event
// recorded then on the model's stream, so it overlaps the rest of
// backward (-no-overlap: after backward, as one); ZeRO over NCCL
// likewise reduces each bucket
// (split at the shards' edges) to its shard's owner during backward;
// the summary's overlap and buckets say which. Over a host backend DDP
// and zero1 reduce after backward; zero2 and zero3 reduce each unit
// through host memory as backward reaches it (no overlap).
//
// -syncbn on the device (syncbn_device.go): over NCCL the batch norms'
// statistics stay on the device (syncbn.Device on the training Comm: an
// all-gather of [sum, M2, count] and a combine kernel forward, an
// all-reduce backward, each ordered with the model's stream by events,
// the host never waiting; they take their turn on NCCL's stream after
// the gradient buckets issued before them, as in PyTorch, where
// SyncBatchNorm and DDP share a process group; a failed one fails the
// Comm and so the step). Over a host backend they go through host memory
// (devmodel.HostSyncBN over the host model's syncbn hook, on syncbn's
// duplicate of the Comm). The two give the same bits (cmd/train's
// TestDeviceSyncBN); the summary's syncbn_ms_per_step counts the host
// hook's time only (0 over NCCL, where nothing waits).
//
// On the device zero1 keeps the full parameter and gradient buffers
// resident and shards the optimizer state; zero2 keeps only the rank's
// shard of the gradients (devmodel's ShardGrads: backward in units of
// layers of at least -bucket-mb, each unit's gradients in a block
// reduced to their owners, over NCCL while the next unit's backward
// runs, then given back); zero3 keeps only its shard of the parameters
// too (ShardParams: each unit's gathered into a block before its
// forward and before its backward, given back after: FSDP with a
// unit per layer, the next unit's gather started before this unit's
// ops are queued: a prefetch over NCCL), and gathers them whole
// for an evaluation's duration. The units' blocks are laid out by their
// lives in one region of their exact sizes (devmodel's zero.go).
// peak_device_bytes reports what is held (zero_device.go; cmd/train's
// TestDeviceZeroMemory: zero3 < zero2 < zero1 < ddp).
//
// Streams and events on the device (device_order.go): the model
// computes on its own non-blocking stream (devmodel's Stream), NCCL on
// its communicators' streams, and nothing is ordered through the legacy
// default stream. Every collective on the model's buffers carries a
// cuda.Order: NCCL's stream waits for an event recorded on the model's
// stream when the collective is issued (a bucket's or unit's gradients
// written; a ZeRO-3 block's last readers queued and the shard updated;
// the update queued, before zero1/2's all-gather), and the model's
// stream waits for an event recorded after it before the work that reads
// its result (the update after the last bucket's reduction; adding a
// unit's reduced gradients into the shard, each unit with its own event
// so that the next unit's reduction stays overlapped; a unit's forward
// or backward after its gather, the next unit's gather issued while
// this unit computes, on a Comm split from the training one so that
// the gathers have NCCL streams of their own and do not queue behind
// the reductions; the next forward after zero1/2's all-gather).
// Within a step the host waits only for the loss to come down: the
// collectives' Works are checked after the next step's loss (done on the
// device by then) and before saves and evaluations. Over a host backend
// the host waits for the model's stream before copying buffers down, and
// the stream waits for an event recorded on the legacy default stream
// after the results are copied up. cmd/train's TestDeviceStreamOrdering
// slows the fake's kernels, or its NCCL, and gets the same bits for ddp
// (overlapped and not), zero1, zero2, zero3 and the pipeline.
//
// Close (device_order.go's quiesce, on train/internal/closewait's
// bounded waits, shared with train/pp) frees the device memory only once
// the collectives still pending (the last step's, or a failed step's)
// and the model's stream are done, waiting a minute at most for each
// (and as long again after an abort); if they are not done by then, or at once after a failed step or
// update, it aborts the Comm (and zero3's gathers' Comm): NCCL's kernels
// end, and the other ranks fail at once, quoting the abort, instead of
// waiting for their timeouts. It then returns an error naming the rank
// and the first collective pending; if the device is still busy after
// the abort, the memory is leaked rather than freed under a kernel
// (TestDeviceCloseAbortsPendingCollectives, TestDeviceCloseLeaksBusyDevice,
// TestDeviceCloseAfterFailedStepAborts, TestDeviceCloseWaitsForLastStep);
// train.Run returns that error, so the run fails
// (TestDeviceRunJoinsCloseError).
//
// Evaluation runs on the device (train.BatchEvaluator: devmodel.Eval),
// every rank with rank 0's batch-norm statistics, broadcast on the
// device first as train does on the host. Saves copy the parameters,
// statistics and optimizer state down to the host model (and, for
// ZeRO, a host engine holding this rank's shard), so the checkpoints
// are the CPU's files and a GPU run resumes on the CPU and back (the
// shard files of a device zero3 run record stage 2, the host engine's
// contiguous layout; train's "strategy" metadata says zero3). Tested on
// the fake CUDA by cmd/train's device tests: 2 ranks at batch B == 1 at
// 2B == the CPU, zero1-3 == ddp, resumes across devices.
package dp
