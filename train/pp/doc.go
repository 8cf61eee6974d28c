// Package pp registers train's pipeline-parallel strategy, "pipeline"
// (pipeline.go): K pipeline stages (package pipeline) times D
// data-parallel replicas on K*D ranks. Import it for its registration:
//
//	import _ "github.com/gdist/gdist/train/pp"
//
// Its options (Options: -stages, -microbatches, -schedule, -balance) are
// a train.Options; its Check says how many replicas the ranks make. Its
// checkpoints are DDP's files (train.SaveFull), written after gathering
// the stages' parameters and optimizer state into the whole model, so
// they resume with any strategy, split and device; its part of the
// summary is a Summary (train.Summary.Pipeline).
//
// With -device cuda (device.go) each rank's stage is a devmodel.Stage on
// its GPU (the nccl Comm's; else GPU LOCAL_RANK modulo the GPUs the
// process sees, so that ranks share a GPU where there are fewer): the
// stage's parameters, gradients and optimizer state in device memory,
// its layers' forward and backward passes, clipping and the update
// there: -clip-grad clips in Update with no wait for the device (each
// stage's norm squared there and all-reduced over the pipeline's Comm,
// over NCCL ordered with the stage's stream by events, the factor
// computed by a kernel: devmodel.Stage.ClipQueued), and the norms are
// logged there and read once for the summary (train.GradNormLogger). It runs package pipeline's schedules (GPipe, 1F1B) with the CPU
// pipeline's messages: activations and their gradients go between the
// stage ranks as device buffers (comm.DeviceBuffer), device to device
// over NCCL, or staged through pinned host memory by package
// comm/staging over a host backend (shm, tcp, inproc: -backend auto
// picks one of them when the ranks cannot each have an NCCL GPU); the
// replicas of a stage average its gradients the same way. Backward
// passes recompute the forward pass from the held input as on the CPU,
// unless the stage's plan for that micro-batch size still holds the
// micro-batch's activations. The first stage uploads the batch once per
// step and the last the batch's labels, asynchronously from pinned host
// memory; the last brings the step's losses down once, the step's only
// wait for the device. The host does not wait for the device between
// ops: the hand-overs are ordered by the streams and events (device.go
// says how), and each op is timed on the device by timing events, read a
// step later, so busy, idle and the bubbles are the device's.
// Evaluation runs on the device too (train.BatchEvaluator): the test set
// is split over the replicas (train.EvalSharder), the stage ranks of a
// replica take the same batches forward through their stages (in passes
// of at most a micro-batch, on the stages' forward-only plans,
// devmodel.Stage.EvalForward: an evaluation batch holds no more device
// memory than a step), and the
// last stage's loss and correct count (computed from the logits it
// brings down, as train.Evaluate does) go to the other stages and are
// summed over the replicas. Checkpoints go through the host model: each
// stage's parameters and optimizer state are copied down (after an
// update) and gathered as on the CPU, and copied up after a resume.
// -balance time is refused (it times the layers on the CPU), and so is
// batch norm, as on the CPU. The summary's peak_device_bytes is the most
// any stage's GPU held (its stage, activations and message buffers).
// A failed step or evaluation aborts the Comm; Close frees the stage's
// device memory only once the sends and receives it left and the
// stage's stream are done, waiting a minute at most for each
// (train/internal/closewait's bounded waits, as train/dp's), aborting
// the Comm where they are not, and freeing nothing (an error says so,
// naming the stage) if the device is still busy after that
// (TestDevicePipeCloseBounded).
//
// Tests on the fake CUDA (cmd/train/pipeline_device_test.go): 2 stages
// on the device equal the unsplit model on the CPU within 1e-4 (mlp and
// cnn with clipping and a schedule, over shared memory; the mlp over the
// fake's NCCL, with GPipe, and as 2 stages x 2 replicas at half the
// batch; a 2-block gpt with AdamW), within 2% with -precision bf16, and
// a pipeline saved on the GPU resumes on the CPU and back.
// TestDevicePipeClipOnDevice (device_clip_test.go): the clipping on the
// device gives bit for bit the parameters and norms of the host's sum of
// the stages' squares (ClipGrads), at 2 and 3 stages, over the fake's
// NCCL and over inproc. TestDevicePipeOrdering (device_test.go): with the fake's copies slowed,
// a 2-stage device pipeline trains bit for bit as at full speed (a stage
// stream not ordered with the staging copies fails it).
package pp
