// Command train trains a gdist model on real data across ranks: the
// project's main job.
//
//	go run ./cmd/train                      # MLP on Fashion-MNIST, DDP over 2 local processes
//	go run ./cmd/train -nproc 4 -model cnn -epochs 3 -json
//	go run ./cmd/train -model gpt -save gpt.safetensors  # a byte-level GPT on the Go tree, a few minutes (defaults: gpt.go)
//
// With a process backend (tcp, shm; -backend auto with -nproc > 1) it launches
// -nproc local worker processes itself, like torchrun, and serves their
// rendezvous store. It also runs as one worker when started by torchrun
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun (OMPI_COMM_WORLD_*)
// or srun (SLURM_*). With -backend inproc the ranks are goroutines of this
// process. Progress goes to stderr (rank 0); results to stdout, as JSON
// lines with -json, the last being {"event":"summary", ...}.
//
// Exit status: 0 when training finished; 1 on any error (a diverging
// run, whose loss turned NaN or infinite, included: it stops at that step
// and keeps the last checkpoint); 2 for unparsable flags; 130 when
// SIGINT (Ctrl-C) or SIGTERM interrupted it ("train: interrupted");
// 75 when one preempted a rank (a worker under a launcher, or an inproc
// run): the first signal makes every rank finish its step and save (with
// -save) before exiting; go on with -resume auto. A second signal
// interrupts (130). Our own launcher interrupts at once (it does not
// forward the signal to its workers yet).
// Settings are checked once, by the process that starts the ranks, before
// any starts: -nproc (at most 1024), -save (its directory must take a new
// file), and the strategy's settings for -nproc ranks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/gdist/gdist/comm"
	_ "github.com/gdist/gdist/comm/auto"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/rendezvous"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/launch"
	"github.com/gdist/gdist/train"
)

type options struct {
	nproc    int
	backend  string
	cfg      train.Config
	progress bool
	gpt      gptFlags
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
	fs.IntVar(&o.nproc, "nproc", 2, "number of ranks (local worker processes, or goroutines with -backend inproc)")
	fs.StringVar(&o.backend, "backend", "auto", "communication backend: inproc, tcp, shm or auto (for several processes: shared memory between ranks on one host, tcp across hosts; inproc for one process)")
	fs.StringVar(&c.Model, "model", "mlp", "model: mlp, cnn, cnn-bn (mlp-xl: 36.8M parameters, for ZeRO experiments); gpt, gpt-large, or gpt-L<layers>-D<dmodel>-H<heads>-T<context> (byte-level language models, trained on text; see -layers and the defaults below)")
	fs.StringVar(&c.DataDir, "data", "", "directory with MNIST-format IDX files (default "+data.DefaultDir+"; \"synthetic\" for a generated set); for -model gpt a text file or directory (default: the Go source tree's .go files)")
	fs.IntVar(&c.Epochs, "epochs", 2, "epochs")
	fs.IntVar(&c.Batch, "batch", 64, "batch size per rank")
	fs.IntVar(&c.EvalBatch, "eval-batch", 500, "evaluation batch size")
	fs.Float64Var(&c.LR, "lr", 0, "learning rate (default 0.05 for sgd, 0.001 for adam)")
	fs.StringVar(&c.Optimizer, "optimizer", "sgd", "optimizer: sgd (with momentum), adam, adamw")
	fs.Float64Var(&c.Momentum, "momentum", 0.9, "sgd momentum")
	fs.Float64Var(&c.WeightDecay, "weight-decay", 0, "weight decay")
	fs.Int64Var(&c.Seed, "seed", 1, "seed for the initial parameters and the data order")
	fs.IntVar(&c.Limit, "limit", 0, "use only the first N training samples (0: all)")
	fs.BoolVar(&c.Pad, "pad", false, "pad the last incomplete global batch (default: drop it)")
	fs.Float64Var(&c.BucketMB, "bucket-mb", 25, "DDP bucket cap in MiB")
	fs.Float64Var(&c.FirstBucket, "first-bucket-mb", 1, "DDP first bucket cap in MiB")
	fs.BoolVar(&c.NoOverlap, "no-overlap", false, "start gradient all-reduces only after backward (for comparison)")
	fs.StringVar(&c.Compress, "compress", "none", "gradient compression: none, fp16, bf16")
	fs.BoolVar(&c.Debug, "debug", false, "check after every step that all ranks hold identical parameters")
	fs.StringVar(&c.Strategy, "strategy", "ddp", "parallelism strategy: "+strategyHelp())
	fs.IntVar(&c.Stages, "stages", 0, "pipeline stages (default -nproc; with fewer, the rest is data parallel)")
	fs.IntVar(&c.Microbatches, "microbatches", 0, "pipeline micro-batches per batch (default: the number of stages)")
	fs.StringVar(&c.Schedule, "schedule", "1f1b", "pipeline schedule: gpipe or 1f1b")
	fs.StringVar(&c.Balance, "balance", "params", "how pipeline stages are chosen: params (equal parameter counts) or time (every rank times the layers and candidate stages on a micro-batch; equal compute)")
	fs.BoolVar(&c.SyncBN, "syncbn", false, "SyncBatchNorm: batch-norm statistics over all ranks' batches (cnn-bn)")
	fs.StringVar(&c.Save, "save", "", "save a checkpoint (safetensors, PyTorch names) here after every epoch")
	fs.StringVar(&c.Resume, "resume", "", "resume from this checkpoint; auto: from the -save checkpoint if there is one, else start afresh")
	fs.IntVar(&c.MaxSteps, "max-steps", 0, "stop (and save) after this many steps in this run (0: no cap)")
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
	if o.nproc < 1 || o.nproc > maxNProc {
		return o, fmt.Errorf("-nproc %d: want 1 to %d", o.nproc, maxNProc)
	}
	if c.LR == 0 {
		c.LR = 0.05
		if c.Optimizer == "adam" || c.Optimizer == "adamw" {
			c.LR = 0.001
		}
	}
	switch o.backend {
	case "auto":
		if o.nproc == 1 && !launch.UnderLauncher() {
			o.backend = "inproc"
		}
	case "inproc", "tcp", "shm":
	default:
		return o, fmt.Errorf("-backend %q: want inproc, tcp, shm or auto", o.backend)
	}
	c.Backend = o.backend
	if !launch.UnderLauncher() {
		// This process starts the ranks: check what depends on their
		// number here, once, not in every worker.
		c.World = o.nproc
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stop := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	graceful := o.backend == "inproc" || launch.UnderLauncher()
	go func() {
		// A rank (or inproc's ranks): the first signal preempts (finish
		// the step, save, exit 75), a second one interrupts. The launcher
		// (no ranks here) interrupts at once, killing its workers.
		if graceful {
			select {
			case <-sigs:
				close(stop)
			case <-done:
				return
			}
		}
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	o.cfg.Stop = stop
	err = start(ctx, o, stdout, stderr)
	if err != nil && ctx.Err() != nil {
		// The signal is the cause; what it cancelled says "context canceled".
		return errInterrupted
	}
	return err
}

// start runs the job o describes: the ranks as goroutines (inproc), as
// worker processes it launches, or this process as one worker.
func start(ctx context.Context, o options, stdout, stderr io.Writer) error {
	cfg := o.cfg
	cfg.Out = stdout
	if o.progress {
		cfg.Progress = stderr
	}

	if o.backend == "inproc" {
		if _, _, err := train.LoadData(cfg); err != nil {
			return err
		}
		comms, err := inproc.New(o.nproc, comm.Options{})
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
		if strings.HasPrefix(cfg.Model, "gpt") {
			// Text: the workers read the corpus; check it is there.
			path := cfg.DataDir
			if path == "" {
				path = data.DefaultCorpus()
			}
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("-data: text corpus: %w", err)
			}
		} else if cfg.DataDir != "synthetic" {
			dir := cfg.DataDir
			if dir == "" {
				dir = data.DefaultDir
			}
			if _, err := data.Load(dir, "test"); err != nil {
				return err
			}
		}
		if cfg.Resume != "" && cfg.Resume != "auto" {
			if _, err := os.Stat(cfg.Resume); err != nil {
				return fmt.Errorf("-resume: %w", err)
			}
		}
		return launch.Run(ctx, launch.Spec{NProc: o.nproc, Stdout: stdout, Stderr: stderr})
	}

	c, closeComm, err := rendezvous.InitComm(ctx, o.backend, comm.Options{})
	if err != nil {
		return err
	}
	if c.Rank() != 0 {
		cfg.Progress = nil
	}
	_, err = train.Run(ctx, c, cfg)
	cerr := closeComm()
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.Rank(), err)
	}
	return cerr
}

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
const exitPreempted = 75
