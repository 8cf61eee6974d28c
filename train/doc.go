// Package train is the training loop behind cmd/train: data loading and
// distributed sampling, the model, the strategy, the optimizer and its
// learning-rate schedule, gradient clipping, evaluation after every epoch
// (and every -eval-every steps), checkpoints and resume, progress on
// stderr and JSON events on stdout. LoadModel reads a checkpoint's model
// back for inference (cmd/generate). It takes a comm.Comm, so it runs
// the same whether the ranks are goroutines (inproc) or processes (tcp,
// shm).
//
// # Strategies
//
// How the ranks share the work is a Strategy, registered by name
// (Register) and chosen with Config.Strategy, the way comm's backends
// are: each is a package (or a file of one) that registers a Factory
// from an init function, and a command imports it for that:
//
//   - package dp (train/dp): "ddp" (ddp.go): every rank holds the whole
//     model; gradients are averaged in buckets during backward (package
//     ddp); "zero1", "zero2", "zero3" (zero.go): ZeRO stages 1-3
//     (package zero), sharding the optimizer state, then the gradients,
//     then the parameters.
//   - package pp (train/pp): "pipeline": K pipeline stages times D
//     data-parallel replicas (package pipeline).
//
// A Factory carries everything of its strategy: its Doc (for -help), its
// own Options (a struct whose fields each have a flag, defined by its
// AddFlags, defaults written there once: DDP's and ZeRO's -bucket-mb,
// the pipeline's -stages), its Check (the options' validation, which
// also says how many replicas of the model the ranks make: every rank
// for DDP and ZeRO, every -stages ranks for a pipeline), and New. Config
// keeps what every strategy shares; Config.Options holds the run's
// strategy's own (nil: its defaults), and Config.Settings lists them for
// the ranks to compare. AddStrategyFlags puts every registered
// strategy's flags on a command line and StrategyFlags.Options gives the
// run's strategy the values given (and refuses a flag only other
// strategies have), so a new strategy and its flags are its own file or
// package plus an import line in cmd/train: example_strategy_test.go
// registers one, with a flag, from outside the package and trains with
// it. -syncbn is no strategy: it converts the model's batch norms before
// any strategy is built (package syncbn), for the data-parallel ones
// (the pipeline's Check refuses it).
//
// Run never looks behind the interface: it builds the strategy with the
// registered Factory (after -syncbn converted the model), lets it Load
// the checkpoint to resume from, asks it where this rank sits among the
// data-parallel replicas (DataRank) for the sampler, then calls Step and
// Update for every batch, Eval and Save after every epoch, and Memory and
// Report for the summary. A Strategy owns its training graph, its
// optimizer and its gradient buffers (Update zeroes them); Run builds the
// evaluation graph. What a strategy needs of train to save is exported:
// the checkpoint helpers (SaveFull, SaveZero, their snapshots
// SnapshotFull and SnapshotZero with SnapshotBuffers, WithMeta,
// LoadCheckpoint), the finiteness checks (ParamsNonFinite,
// OptimizerNonFinite, for StateChecker), ClipGradNorm and
// OptimizerBytes.
//
// Optional interfaces extend a Strategy, and the built-in ones implement
// them all: a Snapshotter saves in the background (below), a StateChecker
// says what of its state a save checks for NaN, an LRSetter takes the
// learning rate of every step from the schedule (schedule.go: -warmup,
// -lr-schedule constant|cosine over the run's length, -steps or the epochs'
// steps; a function of the global step, which checkpoints keep, so a
// resumed run goes on at the same rate), and a GradClipper clips the
// synchronised gradients by their global norm between Step and Update
// (clip.go: -clip-grad; the norm sums each ZeRO rank's shard, or each
// pipeline stage's range within one replica, so nothing is missed or
// counted twice), or an UpdateClipper clips inside its Update (a GPU's
// fused clip and update) and reports the norm after it; a GradNormLogger
// (train/dp's device strategies) is an UpdateClipper that keeps each
// norm where it computed it, so that no step waits to read it, and Run
// reads them all once at the end for the summary. Run refuses
// those flags for a strategy that lacks the interface. -eval-every adds
// evaluations ("eval" events) between the epochs' ends.
//
// Config.Device "cuda" (-device) trains on a GPU, for a strategy
// registered with Factory.Device (train/dp's ddp and zero1-3, one rank
// or several, and train/pp's pipeline: gpu/devmodel); others are
// refused. Such a strategy saves
// through the host model (copied down first), so its checkpoints are
// the CPU's files, and evaluates on the device where it is a
// BatchEvaluator (EvaluateBatches); the summary reports device and
// peak_device_bytes.
//
// # The run (run.go, report.go)
//
// Run is four phases over the run they share: set-up (validate, load the
// data, build the model, compare the ranks' settings, lock -save,
// convert -syncbn, build the strategy), resume (the checkpoint into the
// strategy; the sampler of this rank's replica, the evaluation graph, the
// saver, rank 0's progress file for restarts, and a stepper: the batches,
// the learning-rate schedule and clipping around Step and Update), the
// loop (epochs of steps, every step agreed on by every rank: a finite
// loss, a stop asked for, the saves under way; evaluations; saves) and
// the finish (the last evaluation and save, the summary gathered over
// the ranks); then the strategy is closed, and a Close that fails (a
// device strategy that aborted a pending collective, or could not free
// its memory) fails the run, joined after the run's own error if any:
// the checkpoint saved before stays (TestRunFailsWhenCloseFails,
// TestRunJoinsCloseError). What rank 0 shows goes through a Reporter (step, eval,
// epoch, summary): text lines, or JSON lines with Config.JSON, on
// Config.Out and the progress bar on Config.Progress, unless
// Config.Reporter is another.
//
// # Checkpoints
//
// Every strategy saves and loads its own checkpoints (Strategy.Save and
// Strategy.Load) in one of two formats (checkpoint.go): DDP's model file
// with PyTorch's names plus a training-state file (DDP; the pipeline,
// after gathering its stages), or ZeRO's shard files plus the same model
// file (checkpoint_zero.go). LoadCheckpoint reads both, so a checkpoint
// saved by N ranks with any strategy resumes on M ranks with any other.
// A save commits atomically (checkpoint_files.go): data files under new
// names first, then the model file renamed into place naming them, so a
// crash mid-save leaves the previous checkpoint resumable.
//
// # Saves in the background, restarts (elastic.go)
//
// A strategy that is also a Snapshotter (the built-in ones) saves
// without stopping training: it copies what it writes, and the writing
// runs in the background in phases (ZeRO: every rank's shard, then rank
// 0's model file), each started once every rank finished the one before,
// which the ranks learn from the all-reduce every step already makes
// (checkStep). Config.SaveEvery saves mid-epoch too (positions resume
// exactly), Config.Keep keeps older checkpoints beside the latest, and a
// run whose Config.Restarts is above 0 (a launcher restarted the job)
// resumes from Save by itself and reports the steps it recomputes.
//
// # What a run refuses (finite.go, events.go, fingerprint.go, savelock_unix.go, savespace.go)
//
// Nothing NaN or infinite is saved: every save first checks, on every
// rank, the state it would write (a step's loss is checked too, but it
// comes from the parameters before the step's update), and a non-finite
// reported metric is an error (its JSON line still printed, with null).
// Run's first collective compares the ranks' settings (Config.Settings:
// another job's rank, or a node started with other flags, is refused
// naming both sides). Rank 0 locks the Save path for the run and checks
// its file system has room for a checkpoint before the first step.
package train
