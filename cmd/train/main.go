// Command train trains a gdist model on real data across ranks: the
// project's main job.
//
//	go run ./cmd/train                      # MLP on Fashion-MNIST, DDP over 2 local processes
//	go run ./cmd/train -nproc 4 -model cnn -epochs 3 -json
//	go run ./cmd/train -model gpt -save gpt.safetensors  # a byte-level GPT on the Go tree, a few minutes (defaults: gpt.go)
//
// With a process backend (tcp, shm, nccl; -backend auto with -nproc > 1) it launches
// -nproc local worker processes itself, like torchrun, and serves their
// rendezvous store. It also runs as one worker when started by torchrun
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun (OMPI_COMM_WORLD_*)
// or srun (SLURM_*). With -backend inproc the ranks are goroutines of this
// process. Progress goes to stderr (rank 0); results to stdout, as JSON
// lines with -json, the last being {"event":"summary", ...}.
//
// Exit status: 0 when training finished; 1 on any error (a diverging
// run included: its loss, the state a save would write or a reported
// metric turned NaN or infinite; it stops there, saves nothing more, and
// the JSON line of that metric still comes out, with null for it);
// 2 for unparsable flags; 75 when SIGINT
// (Ctrl-C) or SIGTERM preempted the job: the first signal, to the launcher
// (which forwards it) or to any rank, makes every rank finish its step and
// save (with -save) before exiting; go on with -resume auto. A second
// signal, a second or more after the first, interrupts at once (130,
// "train: interrupted"). Workers whose launcher dies stop the same way.
// Several hosts: one launcher per host with -nnodes N -node-rank R
// -master-addr (node 0) -master-port and one GDIST_TOKEN (or -token-file).
// With -max-restarts N the launcher restarts every rank after a failure
// (a dead or frozen worker), up to N times; they resume from the latest
// checkpoint at -save (-save-every bounds the steps recomputed).
// Settings are checked once, by the process that starts the ranks, before
// any starts: -nproc (at most 1024), -save (its directory must take a new
// file), and the strategy's settings for -nproc ranks. The ranks then
// compare their settings (train.Config.Settings) before the first step
// and refuse a mismatch, naming both sides; ranks started by hand with no
// GDIST_TOKEN and no job id get GDIST_JOB_ID=train-<fingerprint of the
// settings>, so another job's rank on the same MASTER_PORT is refused at
// the rendezvous. Rank 0 locks the -save path for the run (<save>.lock)
// and checks that its file system has room for a checkpoint.
//
// The launcher binds each rank to a share of the host's CPUs of its own
// (one CPU each with as many ranks as CPUs), as mpirun binds ranks to
// cores, unless the ranks outnumber the CPUs or -bind=false: with the
// placement left to the kernel, two ranks on two cores share one for
// stretches and the Go runtime's threads take a polling rank's CPU
// (benchmarks/README.md, the 4 KiB section, measures both).
//
// Each rank's process runs OpenBLAS with max(1, cores / local ranks)
// threads (cores: those this process may run on; local ranks: the ranks on
// this host, from the launcher's environment, or -nproc with -backend
// inproc; 1 for a rank bound to its own CPUs), so that the ranks of a host
// do not oversubscribe its cores.
// OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS, when set,
// are left to OpenBLAS; -blas-threads N overrides all. The summary's
// blas_threads and blas_threads_from say what was used.
//
// Each -strategy is a package that registers itself with package train
// (train/dp: ddp, zero1, zero2, zero3; train/pp: pipeline), imported here
// for that, one line apiece; train.AddStrategyFlags gives the command
// line every registered strategy's own flags (-bucket-mb, -no-overlap,
// -stages, ...), and the run's strategy takes those given (a flag of
// another strategy, given a value, is refused). A new strategy is its
// package plus one import line below (train/example_strategy_test.go
// shows one, with a flag).
//
// -device cuda (or cuda:N) trains on GPUs (gpu/devmodel: the
// parameters, gradients and optimizer state in device memory; per step
// the batch goes up and the loss comes down), with -strategy ddp, zero1,
// zero2 or zero3 on one rank (-nproc defaults to 1 with it) or several,
// each on the GPU of its LOCAL_RANK (train/dp: the gradients reduced in
// device memory over -backend nccl, through host memory over a host
// backend), or -strategy pipeline, each stage rank's layers on its GPU
// (train/pp: activations sent device to device over nccl, or through
// host memory); -precision fp32|tf32|bf16 sets the matrix products'
// precision there (gpu/gemm, PyTorch's names); -syncbn makes the device's
// batch norms SyncBatchNorms (ddp, zero); -syncbn with pipeline,
// -compress and a model with a layer that has no device kernels are
// refused, saying why. Evaluation runs on the device;
// checkpoints go through the host model, so a GPU run's checkpoint
// resumes on the CPU and back. GDIST_ATTENTION=fused runs the gpt's
// attention on fused kernels that keep no T x T probabilities
// (gpu/kernels; TestDeviceGPTFused). A device strategy whose Close
// fails (a collective it had to abort, memory it could not free) fails
// the run, after the summary (train.Run).
// The summary's device and peak_device_bytes say where it ran and the
// most device memory the model held.
//
// On one host the strategies keep their flat buffers in the job's shared
// memory (zero-copy collectives, see comm.Alloc): the summary's
// shared_memory says whether they did, and shared_memory_note why not
// when the area was too small (GDIST_SHM_AREA_BYTES enlarges it).
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gdist/gdist/comm"
	_ "github.com/gdist/gdist/comm/auto"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/rendezvous"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/launch"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/train"
	_ "github.com/gdist/gdist/train/dp" // -strategy ddp, zero1, zero2, zero3
	_ "github.com/gdist/gdist/train/pp" // -strategy pipeline
)

type options struct {
	nproc       int
	backend     string
	cfg         train.Config
	progress    bool
	maxRestarts int
	minNProc    int
	nnodes      int
	nodeRank    int
	masterAddr  string
	masterPort  int
	tokenFile   string
	peerTimeout time.Duration
	blasThreads int
	bind        bool // launcher: bind each rank to CPUs of its own
	cpuProfile  string
	gpt         gptFlags
}

// strategyHelp lists the registered strategies with their descriptions.
func strategyHelp() string {
	var parts []string
	for _, n := range train.Strategies() {
		parts = append(parts, n+" ("+train.StrategyDoc(n)+")")
	}
	return strings.Join(parts, ", ")
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	c := &o.cfg
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.nproc, "nproc", 2, "number of ranks on this host (local worker processes, or goroutines with -backend inproc); with -nnodes, per node")
	fs.StringVar(&o.backend, "backend", "auto", "communication backend: inproc, tcp, shm, nccl or auto (for several processes: nccl when every rank has a GPU of its own, else shared memory between ranks on one host, tcp across hosts; inproc for one process)")
	fs.StringVar(&c.Model, "model", "mlp", "model: mlp, cnn, cnn-bn (mlp-xl: 36.8M parameters, for ZeRO experiments); gpt, gpt-large, or gpt-L<layers>-D<dmodel>-H<heads>-T<context> (byte-level language models, trained on text; see -layers and the defaults below)")
	fs.StringVar(&c.DataDir, "data", "", "directory with MNIST-format IDX files (default "+data.DefaultDir+"; \"synthetic\" for a generated set); for -model gpt a text file or directory (default: the Go source tree's .go files)")
	fs.IntVar(&c.Epochs, "epochs", 2, "epochs")
	fs.IntVar(&c.Batch, "batch", 64, "batch size per rank")
	fs.IntVar(&c.EvalBatch, "eval-batch", 500, "evaluation batch size")
	fs.Float64Var(&c.LR, "lr", 0, "learning rate (default 0.05 for sgd, 0.001 for adam)")
	fs.StringVar(&c.Optimizer, "optimizer", "sgd", "optimizer: sgd (with momentum), adam, adamw; gorgonia's rmsprop, adagrad, momentum, vanilla (CPU only)")
	fs.Float64Var(&c.Momentum, "momentum", 0.9, "sgd momentum")
	fs.Float64Var(&c.WeightDecay, "weight-decay", 0, "weight decay")
	fs.Int64Var(&c.Seed, "seed", 1, "seed for the initial parameters and the data order")
	fs.IntVar(&c.Limit, "limit", 0, "use only the first N training samples (0: all)")
	fs.BoolVar(&c.Pad, "pad", false, "pad the last incomplete global batch (default: drop it)")
	fs.StringVar(&c.Strategy, "strategy", train.DefaultStrategy, "parallelism strategy: "+strategyHelp())
	strategyFlags := train.AddStrategyFlags(fs) // each strategy's own: -bucket-mb, -stages, ...
	fs.StringVar(&c.Device, "device", "cpu", "where the model trains: cpu, or cuda / cuda:N (GPUs, one per rank: -strategy ddp, zero1-3, pipeline; mlp, cnn, cnn-bn and gpt; -nproc defaults to 1 with it); checkpoints go through the host, so they are the CPU's files")
	fs.StringVar(&c.Precision, "precision", "fp32", "matrix products' precision with -device cuda, PyTorch's names: fp32, tf32 (allow_tf32) or bf16 (autocast to bfloat16; parameters, gradients and optimizer state stay fp32)")
	fs.BoolVar(&c.SyncBN, "syncbn", false, "SyncBatchNorm: batch-norm statistics over all ranks' batches (cnn-bn)")
	fs.StringVar(&c.Save, "save", "", "save a checkpoint (safetensors, PyTorch names) here after every epoch")
	fs.StringVar(&c.Resume, "resume", "", "resume from this checkpoint; auto: from the -save checkpoint if there is one, else start afresh")
	fs.IntVar(&c.MaxSteps, "max-steps", 0, "stop (and save) after this many steps in this run (0: no cap)")
	fs.IntVar(&c.SaveEvery, "save-every", 0, "with -save, also save every this many steps (0: after every epoch only)")
	fs.BoolVar(&c.SyncSave, "sync-save", false, "write each checkpoint before training goes on (default: copy it and write it in the background)")
	fs.IntVar(&c.Keep, "keep", 1, "with -save, keep this many checkpoints (1 or more): the latest at the -save path, older ones beside it as <save>.<step>-<id>.safetensors")
	fs.IntVar(&o.nnodes, "nnodes", 1, "number of nodes (hosts), one train launcher on each with the same flags but -node-rank; -nproc is per node")
	fs.IntVar(&o.nodeRank, "node-rank", 0, "this node's rank, 0 to -nnodes-1 (node 0 hosts rank 0 and the store)")
	fs.StringVar(&o.masterAddr, "master-addr", "", "with -nnodes > 1: node 0's address, reachable from every node")
	fs.IntVar(&o.masterPort, "master-port", 29500, "with -nnodes > 1: the store's port on node 0")
	fs.StringVar(&o.tokenFile, "token-file", "", "with -nnodes > 1: a file holding the job's secret token (default: $GDIST_TOKEN), the same on every node")
	fs.IntVar(&o.minNProc, "min-nproc", 0, "with -max-restarts: when a restart cannot start some ranks again (their process fails to start: out of memory, a process limit, the binary gone; a rank that starts and fails again is a failure, not a shrink), go on with as few as this many (the global batch kept); the next restart tries -nproc again. For hosts whose ranks do not come back; 0: always -nproc")
	fs.IntVar(&o.maxRestarts, "max-restarts", 0, "restart the whole job up to this many times after a worker fails or hangs; it resumes from the latest -save checkpoint")
	fs.DurationVar(&o.peerTimeout, "peer-timeout", comm.DefaultPeerTimeout, "how long a rank waits without hearing from a peer before naming it dead (process backends)")
	fs.BoolVar(&o.bind, "bind", true, "launcher: bind each local rank to a share of this host's CPUs of its own (one each with as many ranks as CPUs), as mpirun binds ranks to cores; only when the ranks do not outnumber the CPUs (Linux). -bind=false leaves placement to the kernel")
	fs.IntVar(&o.blasThreads, "blas-threads", 0, "OpenBLAS threads per rank (0: OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS if set, else max(1, cores / ranks on this host))")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) of this process here; a launched worker writes <file>.rank<RANK>")
	fs.BoolVar(&c.JSON, "json", false, "print JSON lines on stdout; the last is the summary")
	fs.BoolVar(&o.progress, "progress", true, "show a progress bar on stderr (rank 0)")
	o.gpt.register(fs, c) // gpt.go: the language-model flags
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of train:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\n%s.\n", gptDefaultsDoc())
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := o.gpt.apply(set, c); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !set["nproc"] && c.Device != "cpu" {
		o.nproc = 1 // a GPU run is one rank unless -nproc says more
	}
	var err error
	if c.Options, err = strategyFlags.Options(c.Strategy); err != nil {
		return o, err
	}
	if o.nproc < 1 || o.nproc > maxNProc {
		return o, fmt.Errorf("-nproc %d: want 1 to %d", o.nproc, maxNProc)
	}
	if o.maxRestarts < 0 {
		return o, fmt.Errorf("-max-restarts %d: want 0 or more", o.maxRestarts)
	}
	if o.maxRestarts > 0 && c.Save == "" {
		return o, fmt.Errorf("-max-restarts %d needs -save: a restarted job resumes from the latest checkpoint (add -save-every STEPS to lose fewer steps)", o.maxRestarts)
	}
	if o.minNProc < 0 || o.minNProc > o.nproc {
		return o, fmt.Errorf("-min-nproc %d: want 1 to -nproc (%d), or 0 (always -nproc)", o.minNProc, o.nproc)
	}
	if o.minNProc > 0 && o.maxRestarts == 0 {
		return o, fmt.Errorf("-min-nproc %d needs -max-restarts: it says how few ranks a restart may go on with; without restarts it does nothing", o.minNProc)
	}
	if set["keep"] && c.Keep < 1 {
		return o, fmt.Errorf("-keep %d: want 1 or more (1, the default: the latest checkpoint only; it is always kept)", c.Keep)
	}
	if set["keep"] && c.Save == "" {
		return o, fmt.Errorf("-keep %d needs -save: it says how many checkpoints to keep there", c.Keep)
	}
	if o.nnodes < 1 || o.nodeRank < 0 || o.nodeRank >= o.nnodes {
		return o, fmt.Errorf("-nnodes %d -node-rank %d: want at least 1 node and a node rank from 0 to -nnodes-1", o.nnodes, o.nodeRank)
	}
	if o.nnodes > 1 && o.masterAddr == "" {
		return o, fmt.Errorf("-nnodes %d needs -master-addr: node 0's address, which every node reaches", o.nnodes)
	}
	if o.nnodes > 1 && (o.maxRestarts > 0 || o.minNProc > 0) {
		return o, fmt.Errorf("-max-restarts and -min-nproc: gdist's launchers do not coordinate restarts across %d nodes; use torchrun --max_restarts, or the scheduler's requeue with -resume auto", o.nnodes)
	}
	if o.blasThreads < 0 {
		return o, fmt.Errorf("-blas-threads %d: want 1 or more, or 0 (the default)", o.blasThreads)
	}
	if o.peerTimeout <= 0 {
		return o, fmt.Errorf("-peer-timeout %v: want a positive duration", o.peerTimeout)
	}
	c.Restarts = launch.RestartCount()
	c.Restartable = launch.MaxRestarts() > 0
	if c.LR == 0 {
		c.LR = 0.05
		switch c.Optimizer {
		case "adam", "adamw", "rmsprop", "adagrad":
			c.LR = 0.001
		}
	}
	switch o.backend {
	case "auto":
		// One rank in one process: no processes to connect (but a node
		// of several is a process whatever -nproc).
		if o.nproc == 1 && o.nnodes == 1 && !launch.UnderLauncher() {
			o.backend = "inproc"
		}
	case "inproc", "tcp", "shm", "nccl":
	default:
		return o, fmt.Errorf("-backend %q: want inproc, tcp, shm, nccl or auto", o.backend)
	}
	c.Backend = o.backend
	if o.maxRestarts > 0 && o.backend == "inproc" {
		return o, fmt.Errorf("-max-restarts: the ranks are goroutines of one process with -backend inproc: use -backend auto, shm or tcp")
	}
	if o.nnodes > 1 && o.backend == "inproc" {
		return o, fmt.Errorf("-nnodes %d -backend inproc: inproc runs every rank as a goroutine of one process, and ranks on several nodes are processes: leave -backend out (auto: shared memory within a node, tcp across) or use -backend tcp", o.nnodes)
	}
	if !launch.UnderLauncher() {
		// This process starts the ranks: check what depends on their
		// number here, once, not in every worker.
		c.World = o.nproc * o.nnodes
	}
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// maxNProc bounds -nproc: every rank is a process or a goroutine with its
// own model and buffers on this host.
const maxNProc = 1024

// errInterrupted is run's error when SIGINT or SIGTERM ended the run.
var errInterrupted = errors.New("interrupted")

// Exit codes: 0 success, 1 any failure, 2 bad flags (flag package),
// exitInterrupted after SIGINT or SIGTERM.
func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(os.Stderr, "train: interrupted")
		os.Exit(exitInterrupted)
	case errors.Is(err, train.ErrPreempted):
		fmt.Fprintln(os.Stderr, "train:", strings.TrimPrefix(err.Error(), "train: "))
		os.Exit(exitPreempted)
	}
	// Errors from package train carry its prefix already.
	fmt.Fprintln(os.Stderr, "train:", strings.TrimPrefix(err.Error(), "train: "))
	os.Exit(1)
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		path := o.cpuProfile
		if launch.IsWorker() {
			path += ".rank" + os.Getenv("RANK")
		}
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %v", err)
		}
		defer pprof.StopCPUProfile()
	}
	if launch.UnderLauncher() {
		// A worker's stdout and stderr are pipes to its launcher; if the
		// launcher dies (even kill -9) a write to them must fail, not
		// kill the worker with SIGPIPE before its stop-save: the worker
		// stops and saves (handleSignals), its output lost.
		signal.Ignore(syscall.SIGPIPE)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stop := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go handleSignals(sigs, launch.WatchLauncher(time.Second), stop, cancel, done, stderr)
	o.cfg.Stop = stop
	err = start(ctx, o, stdout, stderr)
	if err != nil && ctx.Err() != nil {
		// The signal is the cause; what it cancelled says "context canceled".
		return errInterrupted
	}
	return err
}

// handleSignals turns signals into a stop, then an interrupt. The first
// SIGINT or SIGTERM closes stop: a rank (or inproc's ranks) finishes its
// step, saves and exits with exitPreempted; the launcher forwards it to
// its workers and waits for them. A second signal, a second or more after
// the first, cancels: everything ends at once (130). (Slurm signals the
// launcher and its workers together, and the launcher forwards it: one
// stop, not two.) A worker whose launcher died (orphaned) stops the same
// way and, if stopping takes longer than orphanGrace, exits.
func handleSignals(sigs <-chan os.Signal, orphaned <-chan struct{}, stop chan<- struct{}, cancel func(), done <-chan struct{}, stderr io.Writer) {
	var first time.Time
	select {
	case <-sigs:
	case <-orphaned:
		fmt.Fprintln(stderr, "train: the launcher is gone: stopping (saving with -save)")
		time.AfterFunc(orphanGrace, func() {
			fmt.Fprintf(stderr, "train: the launcher is gone and stopping took over %v: exiting\n", orphanGrace)
			orphanExit()
		})
	case <-done:
		return
	}
	first = time.Now()
	close(stop)
	for {
		select {
		case <-sigs:
			if time.Since(first) >= time.Second {
				cancel()
				return
			}
		case <-done:
			return
		}
	}
}

// orphanGrace bounds how long a worker whose launcher died may take to
// save and exit.
const orphanGrace = 60 * time.Second

// orphanExit ends an orphaned worker that did not stop in time.
var orphanExit = func() { os.Exit(1) }

// testAfterStep is Config.AfterStep for the tests (the test binary runs as
// train and may pace its workers' steps); nil in the command.
var testAfterStep func(rank int, step int64)

// start runs the job o describes: the ranks as goroutines (inproc), as
// worker processes it launches, or this process as one worker.
func start(ctx context.Context, o options, stdout, stderr io.Writer) error {
	cfg := o.cfg
	cfg.Out = stdout
	cfg.AfterStep = testAfterStep
	if o.progress {
		cfg.Progress = stderr
	}

	if o.backend == "inproc" {
		// One process, one OpenBLAS, o.nproc ranks sharing the cores.
		cfg.BLASThreadsFrom = setBLASThreads(o.blasThreads, o.nproc)
		cfg.LocalRanks = o.nproc
		// One copy of the data for every rank.
		tr, te, err := train.LoadData(cfg)
		if err != nil {
			return err
		}
		cfg.Data = &train.Data{Train: tr, Test: te}
		comms, err := inproc.New(o.nproc, comm.Options{PeerTimeout: o.peerTimeout})
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		errs := make([]error, o.nproc)
		for r, c := range comms {
			wg.Add(1)
			go func(r int, c comm.Comm) {
				defer wg.Done()
				defer c.Close()
				_, errs[r] = train.Run(ctx, c, cfg)
				if errs[r] != nil {
					c.Close() // fail the others' pending collectives at once
				}
			}(r, c)
		}
		wg.Wait()
		return firstErr(errs)
	}

	if !launch.UnderLauncher() {
		// Launcher: check what would make every worker fail the same way,
		// then start the workers.
		if err := train.CheckData(cfg); err != nil {
			return err
		}
		if cfg.Resume != "" && cfg.Resume != "auto" {
			if _, err := os.Stat(cfg.Resume); err != nil {
				return fmt.Errorf("-resume: %w", err)
			}
		}
		spec := launch.Spec{NProc: o.nproc, Stdout: stdout, Stderr: stderr,
			Stop: cfg.Stop, MaxRestarts: o.maxRestarts, MinProc: o.minNProc,
			// A failed rank's peers name it within the peer timeout.
			GracePeriod: launch.DefaultGracePeriod, BindCPUs: o.bind}
		if o.nnodes > 1 {
			tok, err := jobToken(o.tokenFile)
			if err != nil {
				return err
			}
			spec.Nodes, spec.NodeRank, spec.MasterAddr, spec.MasterPort, spec.Token = o.nnodes, o.nodeRank, o.masterAddr, o.masterPort, tok
		}
		err := launch.Run(ctx, spec)
		var ee *launch.ExitError
		if errors.As(err, &ee) && ee.Preempted() {
			return fmt.Errorf("%w: every rank stopped after its step (and saved, with -save): go on with -resume auto", train.ErrPreempted)
		}
		return err
	}

	// A worker: set its BLAS threads before any BLAS work. A bad
	// environment is InitComm's to report. A rank the launcher bound to
	// CPUs of its own (-bind) has them to itself: it counts as the only
	// local rank on the CPUs it sees.
	local := 1
	if env, err := rendezvous.FromEnv(); err == nil && launch.BoundCPUs() == nil {
		local = env.LocalSize
	}
	cfg.BLASThreadsFrom = setBLASThreads(o.blasThreads, local)
	cfg.LocalRanks = local
	setJobID(cfg)
	c, closeComm, err := rendezvous.InitComm(ctx, o.backend, comm.Options{PeerTimeout: o.peerTimeout})
	if err != nil {
		return err
	}
	if c.Rank() != 0 {
		cfg.Progress = nil
	}
	if msg := keepGlobalBatch(&cfg, launch.TargetWorldSize(), c.Size()); msg != "" && c.Rank() == 0 {
		fmt.Fprintln(stderr, "train:", msg)
	}
	_, err = train.Run(ctx, c, cfg)
	cerr := closeComm()
	if err != nil {
		return &rankError{c.Rank(), err}
	}
	return cerr
}

// setJobID gives a worker of a job with no token and no job id of its
// own (ranks started by hand with torchrun's variables, say) the job id
// train-<fingerprint of its settings> (GDIST_JOB_ID): a rank of another
// job with other settings that dials the same MASTER_PORT is then refused
// at the rendezvous, naming both job ids, instead of joining this one.
// (train.Run's first collective refuses ranks whose settings differ in
// any job.)
func setJobID(cfg train.Config) {
	if os.Getenv("GDIST_TOKEN") != "" || os.Getenv("GDIST_JOB_ID") != "" {
		return
	}
	if env, err := rendezvous.FromEnv(); err != nil || env.JobID != "" || env.StoreAddr != "" {
		return
	}
	os.Setenv("GDIST_JOB_ID", "train-"+cfg.Fingerprint())
}

// jobToken is the secret every node's launcher must share: the token
// file's contents, else GDIST_TOKEN; hex-decoded where it is hex, as
// package rendezvous reads GDIST_TOKEN, else used as is.
func jobToken(file string) ([]byte, error) {
	v := os.Getenv("GDIST_TOKEN")
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("-token-file: %w", err)
		}
		v = strings.TrimSpace(string(b))
	}
	if v == "" {
		return nil, fmt.Errorf("-nnodes: the nodes need a shared secret: set GDIST_TOKEN on every node (e.g. export GDIST_TOKEN=$(openssl rand -hex 32)) or pass -token-file")
	}
	if b, err := hex.DecodeString(v); err == nil {
		return b, nil
	}
	return []byte(v), nil
}

// setBLASThreads sets this process's OpenBLAS thread count for local
// ranks on this host (nn.ChooseBLASThreads) and says who chose it. A
// count from the environment is OpenBLAS's own setting, left as it is.
func setBLASThreads(flag, local int) (from string) {
	n, from := nn.ChooseBLASThreads(runtime.NumCPU(), local, flag, os.Getenv)
	if from == "default" || from == "-blas-threads" {
		nn.SetBLASThreads(n)
	}
	return from
}

// keepGlobalBatch adapts cfg.Batch, the batch per replica of the model
// of a job launched on target ranks, to a generation running on world
// ranks (a shrunk or regrown job, -min-nproc), so that the global batch,
// and with it the samples of every step, stays the same: the replicas
// (every rank for DDP and ZeRO, every -stages ranks for a pipeline) are
// what the strategy's Check says. It says what it did, or "".
func keepGlobalBatch(cfg *train.Config, target, world int) string {
	if target <= 0 || target == world {
		return ""
	}
	from, to := *cfg, *cfg
	from.World, to.World = target, world
	was, err := from.Replicas()
	if err != nil {
		return ""
	}
	now, err := to.Replicas()
	if err != nil {
		return "" // the run says why
	}
	per, over := "rank", fmt.Sprintf("%d ranks", world)
	if was != target || now != world {
		per, over = "replica", fmt.Sprintf("%d replicas", now)
	}
	global := cfg.Batch * was
	switch {
	case was == now:
		return fmt.Sprintf("running on %d of %d ranks: %d replica(s) either way: the batch per replica stays %d", world, target, now, cfg.Batch)
	case global%now != 0:
		cfg.Batch = (global + now - 1) / now
		return fmt.Sprintf("running on %d of %d ranks: the global batch %d does not split over %s; batch %d per %s (global %d)",
			world, target, global, over, cfg.Batch, per, cfg.Batch*now)
	}
	cfg.Batch = global / now
	return fmt.Sprintf("running on %d of %d ranks: batch %d per %s keeps the global batch %d", world, target, cfg.Batch, per, global)
}

// rankError is a worker's error, naming its rank once: "rank 1: epoch 1
// batch 5: ...", not "rank 1: train: epoch ...".
type rankError struct {
	rank int
	err  error
}

func (e *rankError) Error() string {
	return fmt.Sprintf("rank %d: %s", e.rank, strings.TrimPrefix(e.err.Error(), "train: "))
}

func (e *rankError) Unwrap() error { return e.err }

func firstErr(errs []error) error {
	// Prefer a root cause over the errors it caused on other ranks.
	for _, e := range errs {
		if e != nil && !errors.Is(e, comm.ErrClosed) && !errors.Is(e, comm.ErrAborted) {
			return e
		}
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// exitInterrupted is the exit code after SIGINT or SIGTERM (128 + SIGINT's
// number, as shells report a Ctrl-C).
const exitInterrupted = 130

// exitPreempted is the exit code of a rank (or an inproc run) that the
// first SIGINT or SIGTERM preempted: it finished its step and saved
// (EX_TEMPFAIL: run it again with -resume auto).
const exitPreempted = launch.ExitPreempted
