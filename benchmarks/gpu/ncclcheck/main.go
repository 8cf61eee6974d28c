// Command ncclcheck runs gdist's per-rank conformance checks over the nccl
// backend with one process per rank, the way a real job runs: it is the
// multi-rank step of benchmarks/gpu/verify.sh, which runs it on a machine
// with one or more GPUs (two ranks may share one GPU when each process poses
// as its own host: NCCL_HOSTID differs per process, NCCL_SOCKET_IFNAME=lo).
//
//	ncclcheck -np 2                      # launch 2 ranks, run every check, exit 0 if all pass
//	ncclcheck -mode loop                 # one rank (RANK, WORLD_SIZE, MASTER_ADDR ... set by the caller):
//	                                     # all-reduce until something fails, say which rank was lost
//
// Modes (info prints what the loaders found: the library paths and versions):
//
//   - suite: commtest.RankChecksRule (every collective, dtype and op,
//     send/recv, split, sub-groups, bad arguments; avg by NCCL's rule) at
//     counts 0, 1, 7, 1023, 1<<16+3 (and 1<<20+3 with -big); each rank
//     prints "rank N passed" or "rank N failed: ...".
//   - loop: prints "ready rank N", then all-reduces 1024 floats until an
//     operation fails; it then prints "lost rank K" when the error names a
//     lost peer, "caught-by: heartbeat|notice|async-error|timeout|other"
//     (which mechanism reported it), "failed-at-ms: <Unix time in ms>"
//     and "rank N failed: <error>", and
//     exits 1. verify.sh kills one rank with SIGKILL and reads the others'
//     lines.
//
// Without a launcher's environment and with -np > 1 it starts the ranks
// itself (package launch, as train and commbench do). It exits non-zero if
// any rank failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/rendezvous"
	_ "github.com/gdist/gdist/comm/shm" // registers "shm" (a host backend to compare with)
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/launch"
)

type config struct {
	mode        string
	np          int
	backend     string
	big         bool
	timeout     time.Duration
	peerTimeout time.Duration
	opTimeout   time.Duration
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("ncclcheck", flag.ContinueOnError)
	fs.StringVar(&cfg.mode, "mode", "suite", "suite (the conformance checks), loop (all-reduce until a failure) or info (what the loaders found)")
	fs.IntVar(&cfg.np, "np", 2, "ranks to launch when not started by a launcher")
	fs.StringVar(&cfg.backend, "backend", "nccl", "backend to check (nccl; a host backend for comparison)")
	fs.BoolVar(&cfg.big, "big", false, "suite: also count 1<<20+3")
	fs.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "bound on the whole run of one rank")
	fs.DurationVar(&cfg.peerTimeout, "peer-timeout", 0, "comm.Options.PeerTimeout (0: the backend's default)")
	fs.DurationVar(&cfg.opTimeout, "op-timeout", time.Minute, "comm.Options.Timeout: the bound on one operation")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if cfg.mode != "suite" && cfg.mode != "loop" && cfg.mode != "info" {
		return cfg, fmt.Errorf("-mode %q: want suite, loop or info", cfg.mode)
	}
	if cfg.np < 1 {
		return cfg, fmt.Errorf("-np %d: want at least 1", cfg.np)
	}
	if cfg.timeout <= 0 || cfg.opTimeout <= 0 || cfg.peerTimeout < 0 {
		return cfg, fmt.Errorf("-timeout and -op-timeout must be positive, -peer-timeout not negative")
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "ncclcheck:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if cfg.mode == "info" {
		os.Exit(info())
	}
	if !launch.UnderLauncher() && cfg.np > 1 {
		if err := launch.Run(ctx, launch.Spec{NProc: cfg.np, GracePeriod: 5 * time.Second}); err != nil {
			fmt.Fprintln(os.Stderr, "ncclcheck:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(rank(ctx, cfg))
}

// rank runs one rank and returns its exit status.
func rank(ctx context.Context, cfg config) int {
	env, _ := rendezvous.FromEnv()
	fail := func(err error) int {
		fmt.Printf("rank %d failed: %v\n", env.Rank, err)
		return 1
	}
	if cfg.backend == "nccl" {
		if ok, why := cuda.Available(); !ok {
			return fail(fmt.Errorf("no CUDA: %s", why))
		}
		fmt.Printf("rank %d: %s\n", env.Rank, cuda.Info())
	}
	c, closeFn, err := rendezvous.InitComm(ctx, cfg.backend, comm.Options{PeerTimeout: cfg.peerTimeout, Timeout: cfg.opTimeout})
	if err != nil {
		return fail(err)
	}
	defer closeFn()
	switch cfg.mode {
	case "suite":
		counts := append(append([]int(nil), commtest.Counts...), 1<<16+3)
		if cfg.big {
			counts = append(counts, 1<<20+3)
		}
		rule := commtest.AvgDivide
		if cfg.backend == "nccl" {
			rule = commtest.AvgPreMultiply
		}
		for _, ch := range commtest.RankChecksRule(counts, rule) {
			start := time.Now()
			if err := ch.Run(ctx, c); err != nil {
				return fail(fmt.Errorf("%s: %w", ch.Name, err))
			}
			fmt.Printf("rank %d: %s ok (%v)\n", c.Rank(), ch.Name, time.Since(start).Round(time.Millisecond))
		}
	case "loop":
		buf := make([]float32, 1024)
		fmt.Printf("ready rank %d\n", c.Rank())
		for i := 0; ; i++ {
			err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(buf), comm.Sum))
			if err == nil {
				continue
			}
			var pe *comm.PeerError
			if errors.As(err, &pe) {
				fmt.Printf("lost rank %d\n", pe.Rank)
			}
			fmt.Printf("caught-by: %s (after %d all-reduces)\n", caughtBy(err), i)
			fmt.Printf("failed-at-ms: %d\n", time.Now().UnixMilli())
			return fail(err)
		}
	}
	fmt.Printf("rank %d passed\n", c.Rank())
	return 0
}

// info prints what gdist's loaders found, one line each: "cuda: ok ..." or
// "cuda: no: why", "nccl: ok ..." or "nccl: no: why". It exits 1 when
// CUDA sees no device.
func info() int {
	ok, why := cuda.Available()
	path, missing := cuda.Loaded()
	if !ok {
		fmt.Printf("cuda: no: %s\n", why)
	} else {
		fmt.Printf("cuda: ok %s\n", cuda.Info())
	}
	if path != "" {
		fmt.Printf("cudart: %s (optional functions missing: %v)\n", path, missing)
	}
	if v, p, err := nccl.Version(); err != nil {
		fmt.Printf("nccl: no: %v\n", err)
	} else {
		fmt.Printf("nccl: ok %s (%s)\n", v, p)
	}
	if !ok {
		return 1
	}
	return 0
}

// caughtBy names the mechanism that reported a failure, from the wording
// of comm/nccl's errors: the store heartbeat, a failure notice another rank
// published, NCCL's ncclCommGetAsyncError, or the operation timeout.
func caughtBy(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "no heartbeat"):
		return "heartbeat"
	case strings.Contains(s, "reported it lost") || strings.Contains(s, "by rank"):
		return "notice"
	case strings.Contains(s, "asynchronous error") || strings.Contains(s, "ncclCommGetAsyncError"):
		return "async-error"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(s, "timed out") || strings.Contains(s, "timeout"):
		return "timeout"
	}
	return "other"
}
