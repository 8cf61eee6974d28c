// Command commbench measures the collectives like nccl-tests: for each op and
// size it reports the time per op, the algorithm bandwidth (size / time) and
// the bus bandwidth (algbw times nccl-tests' bus factor for the op), and it
// checks the result of every op.
//
//	go run ./benchmarks/commbench -backend inproc|tcp|shm|auto|nccl -np N \
//	    -ops all|all_reduce,broadcast,... -sizes 4K,1M,... [-iters K] [-json] [-device] [-per-op] [-cpu]
//
// -cpu adds a column with the CPU time per op, all ranks' processes
// together (the JSON rows always carry it, cpu_us): on a machine shared
// with other jobs it moves less than the time does.
//
// Each size is warmed up with -warmup iterations and then for about
// -warmup-time (100 ms), so that the timed iterations measure a process
// in its steady state rather than the Go runtime's start-up (warmUp).
//
// -refill refills every input and verifies every result around each
// timed iteration, as a training step's fresh gradients are before each
// all-reduce (only the op is timed, after a barrier): the plain loop
// re-reduces the same buffer, which stays in cache (and, zero-copy, in the
// cache of the core that owns each block), so it measures a best case.
//
// -per-op also times every iteration and reports rank 0's p50, p90, p99
// and maximum: small messages on shm have a slow tail (the iterations
// that sleep) that the mean folds in. -slow-log DIR (with -per-op) has
// every rank list its slow iterations and its threads' context switches,
// to line up with a scheduler trace (perf record -k mono).
//
// -device (the default with nccl) puts the buffers in GPU memory: the timed
// runs then move device memory only (host backends stage it: their Comms
// are wrapped with comm/staging's Adapt), and the checked run copies inputs
// in and results out.
//
// Sizes follow nccl-tests: for all_gather and gather the total output; for
// reduce_scatter, scatter and all_to_all the total input; for sendrecv the
// bytes each rank sends. With a process backend (tcp, shm, auto, nccl) commbench launches
// the N local processes itself, like torchrun; it also runs as one worker
// under torchrun, mpirun or srun (the env init of comm/rendezvous).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gdist/gdist/comm"
	_ "github.com/gdist/gdist/comm/auto"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/rendezvous"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
	"github.com/gdist/gdist/launch"
)

var allOps = []string{"all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter", "reduce_scatter", "all_to_all", "sendrecv", "barrier"}

type config struct {
	backend string
	np      int
	ops     []string
	sizes   []int64
	iters   int
	warmup  int
	warmFor time.Duration // more warm-up, by time (see warmUp)
	jsonOut bool
	dtype   comm.DType
	redop   comm.ReduceOp
	timeout time.Duration
	cpuProf string
	device  bool   // device buffers (device.go)
	perOp   bool   // time every iteration: percentiles in the row
	alloc   bool   // buffers from comm.Alloc (shared memory on shm/auto)
	refill  bool   // refill the inputs and verify before and after every timed op
	bind    bool   // pin each rank's process to one CPU
	cpu     bool   // text output: a column with the CPU time per op
	slowLog string // with perOp: where each rank writes its slow ops (slowlog_linux.go)
}

// Row is one line of output.
type Row struct {
	Op       string  `json:"op"`
	Backend  string  `json:"backend"`
	World    int     `json:"world"`
	Bytes    int64   `json:"bytes"`
	Count    int64   `json:"count"`
	DType    string  `json:"dtype"`
	Iters    int     `json:"iters"`
	TimeUS   float64 `json:"time_us"`
	AlgBW    float64 `json:"algbw_gbs"`
	BusBW    float64 `json:"busbw_gbs"`
	Correct  bool    `json:"correct"`
	CheckErr string  `json:"check_error,omitempty"`
	// With -per-op: rank 0's per-iteration time percentiles.
	P50US float64 `json:"p50_us,omitempty"`
	P90US float64 `json:"p90_us,omitempty"`
	P99US float64 `json:"p99_us,omitempty"`
	MaxUS float64 `json:"max_us,omitempty"`
	// CPUUS is the CPU time (user and system) that the timed iterations
	// took per op, summed over the ranks' processes (with inproc, the one
	// process's). On a machine with fewer cores than busy threads it
	// bounds what the time can reach: cores x time_us >= cpu_us. It counts
	// the kernel's work done in the ranks' contexts (system calls and the
	// softirqs that run in them), not that of kernel threads. Zero where
	// the platform does not tell (see cpuTime).
	CPUUS float64 `json:"cpu_us,omitempty"`
	// With -alloc: the buffers came from comm.Alloc.
	Alloc bool `json:"alloc,omitempty"`
	// With -refill: every timed op had fresh inputs, and its result was
	// checked.
	Refill bool `json:"refill,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "commbench:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	s = strings.TrimSuffix(s, "B")
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 4K, 1M, 4096)", s)
	}
	return v * mult, nil
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("commbench", flag.ContinueOnError)
	var cfg config
	var ops, sizes, dtype, redop string
	fs.StringVar(&cfg.backend, "backend", "inproc", "backend: inproc, tcp, shm (shared memory, one host) or auto (shm within a host, tcp across)")
	fs.IntVar(&cfg.np, "np", 2, "number of ranks")
	fs.StringVar(&ops, "ops", "all", "comma-separated ops, or all: "+strings.Join(allOps, ","))
	fs.StringVar(&sizes, "sizes", "4K,64K,1M,16M", "comma-separated sizes in bytes (K, M, G suffixes)")
	fs.IntVar(&cfg.iters, "iters", 0, "timed iterations per size (0: about 64 MiB of traffic, 3..2000, as OSU times small messages over about 1000)")
	fs.IntVar(&cfg.warmup, "warmup", 3, "untimed iterations per size")
	fs.DurationVar(&cfg.warmFor, "warmup-time", 100*time.Millisecond, "after -warmup iterations, more untimed ones for about this long (as many on every rank), so that the timed run starts past the Go runtime's start-up; 0: none")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print one JSON object per row")
	fs.BoolVar(&cfg.perOp, "per-op", false, "also time each iteration and report rank 0's p50/p90/p99/max (a mean hides a slow tail)")
	fs.StringVar(&cfg.slowLog, "slow-log", "", "with -per-op, a directory where each rank writes rankN.txt: the iterations that took 20 us or more, with CLOCK_MONOTONIC start times (for perf record -k mono), and its threads' context switches during the timed run (Linux)")
	fs.BoolVar(&cfg.bind, "bind", false, "pin each rank's process to one CPU (rank r to the r-th allowed CPU, modulo), as mpirun --bind-to core does for Open MPI's ranks, and set GOMAXPROCS to 1 to match unless $GOMAXPROCS is set; process backends only")
	fs.StringVar(&dtype, "dtype", "float32", "element type")
	fs.StringVar(&redop, "op", "sum", "reduction for all_reduce, reduce, reduce_scatter")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.BoolVar(&cfg.device, "device", false, "use GPU buffers (CUDA); the default with -backend nccl")
	fs.BoolVar(&cfg.alloc, "alloc", false, "all_reduce, broadcast, reduce: buffers from comm.Alloc (on shm and auto, shared memory: all-reduce is zero-copy)")
	fs.BoolVar(&cfg.refill, "refill", false, "before every timed iteration refill the inputs (and after it verify the result), as a training step's fresh gradients are; only the op is timed, after a barrier")
	fs.BoolVar(&cfg.cpu, "cpu", false, "text output: add a column with the CPU time (user+system, all ranks' processes) per op")
	fs.StringVar(&cfg.cpuProf, "cpuprofile", "", "write a CPU profile (pprof) to this file; with a process backend every rank writes FILE.rankN")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	switch cfg.backend {
	case "inproc", "tcp", "shm", "auto":
	case "nccl":
		cfg.device = true
	default:
		return cfg, fmt.Errorf("-backend %q: want inproc, tcp, shm, auto or nccl", cfg.backend)
	}
	if cfg.bind && cfg.backend == "inproc" {
		return cfg, fmt.Errorf("-bind: inproc ranks are goroutines of one process; use a process backend (shm, tcp, auto)")
	}
	if cfg.np < 1 || cfg.np > 1024 {
		return cfg, fmt.Errorf("-np %d: want 1..1024", cfg.np)
	}
	if ops == "all" {
		cfg.ops = allOps
	} else {
		for _, o := range strings.Split(ops, ",") {
			o = strings.TrimSpace(o)
			if indexOf(allOps, o) < 0 {
				return cfg, fmt.Errorf("-ops: unknown op %q (know %s)", o, strings.Join(allOps, ","))
			}
			cfg.ops = append(cfg.ops, o)
		}
	}
	for _, s := range strings.Split(sizes, ",") {
		v, err := parseSize(s)
		if err != nil {
			return cfg, fmt.Errorf("-sizes: %v", err)
		}
		cfg.sizes = append(cfg.sizes, v)
	}
	sort.Slice(cfg.sizes, func(i, j int) bool { return cfg.sizes[i] < cfg.sizes[j] })
	var err error
	if cfg.dtype, err = comm.ParseDType(dtype); err != nil {
		return cfg, fmt.Errorf("-dtype: %v", err)
	}
	if cfg.redop, err = comm.ParseReduceOp(redop); err != nil {
		return cfg, fmt.Errorf("-op: %v", err)
	}
	if err := comm.CheckReduce(cfg.dtype, cfg.redop); err != nil {
		return cfg, fmt.Errorf("-op %s -dtype %s: %v", redop, dtype, err)
	}
	if cfg.slowLog != "" && !cfg.perOp {
		return cfg, fmt.Errorf("-slow-log needs -per-op")
	}
	if cfg.iters < 0 || cfg.warmup < 0 || cfg.warmFor < 0 {
		return cfg, fmt.Errorf("-iters, -warmup and -warmup-time must not be negative")
	}
	return cfg, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func run() error {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	if cfg.backend == "inproc" {
		stopProf, err := startCPUProfile(cfg.cpuProf)
		if err != nil {
			return err
		}
		defer stopProf()
		comms, err := inproc.New(cfg.np, comm.Options{})
		if err != nil {
			return err
		}
		if comms, err = deviceComms(comms, cfg); err != nil {
			return err
		}
		var wg sync.WaitGroup
		errs := make([]error, cfg.np)
		for r, c := range comms {
			wg.Add(1)
			go func(r int, c comm.Comm) {
				defer wg.Done()
				defer c.Close()
				errs[r] = bench(ctx, c, cfg, os.Stdout)
			}(r, c)
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	// A process backend: launch the workers unless we are one (our own
	// launcher, or torchrun / mpirun / srun).
	if !launch.UnderLauncher() {
		return launch.Run(ctx, launch.Spec{NProc: cfg.np, Stdout: os.Stdout, Stderr: os.Stderr})
	}
	c, closeFn, err := rendezvous.InitComm(ctx, cfg.backend, comm.Options{})
	if err != nil {
		return err
	}
	if cfg.bind {
		if _, err := bindToCPU(c.Rank()); err != nil {
			closeFn()
			return fmt.Errorf("rank %d: -bind: %w", c.Rank(), err)
		}
		fitGOMAXPROCS()
	}
	if cfg.cpuProf != "" {
		stopProf, err := startCPUProfile(fmt.Sprintf("%s.rank%d", cfg.cpuProf, c.Rank()))
		if err != nil {
			return err
		}
		defer stopProf()
	}
	cs, err := deviceComms([]comm.Comm{c}, cfg)
	if err != nil {
		closeFn()
		return err
	}
	berr := bench(ctx, cs[0], cfg, os.Stdout)
	cerr := closeFn()
	if berr != nil {
		return fmt.Errorf("rank %d: %w", c.Rank(), berr)
	}
	return cerr
}

// startCPUProfile starts a pprof CPU profile into path ("" : none) and
// returns the function that stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func busFactor(op string, n int) float64 {
	f := float64(n)
	switch op {
	case "all_reduce":
		return 2 * (f - 1) / f
	case "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter":
		return (f - 1) / f
	case "broadcast", "reduce", "sendrecv":
		return 1
	}
	return 0
}

// opCase is one op at one size on one rank: run performs it once.
type opCase struct {
	count int64 // elements per rank's "main" buffer, as nccl-tests reports
	run   func(ctx context.Context) error
	fill  func()       // sets inputs for the checked run
	free  func()       // releases the buffers (nil: nothing to do)
	check func() error // verifies the checked run
}

// avgRule is how c computes Avg on floats: NCCL's pre-multiplied sum, or
// the host backends' fl(sum)/n.
func avgRule(c comm.Comm) commtest.AvgRule {
	for c != nil {
		switch x := c.(type) {
		case *nccl.Comm:
			return commtest.AvgPreMultiply
		case *devCase:
			c = x.Comm
		case interface{ Unwrap() comm.Comm }:
			c = x.Unwrap()
		default:
			return commtest.AvgDivide
		}
	}
	return commtest.AvgDivide
}

func newCase(c comm.Comm, cfg config, op string, size int64) opCase {
	n, r := c.Size(), c.Rank()
	dt, red := cfg.dtype, cfg.redop
	rule := avgRule(c)
	checkReduced := func(b []byte, count int, want func(i int) float64) error {
		return commtest.CheckReduced(dt, red, n, rule, b, count, want)
	}
	expected := commtest.ExpectedFuncRule(dt, red, n, rule)
	es := int64(dt.Size())
	nn := int64(n)
	do := comm.Run
	switch op {
	case "all_reduce", "broadcast", "reduce", "sendrecv":
		k := int(size / es)
		buf := commtest.NewBuf(dt, k)
		out := commtest.NewBuf(dt, k)
		oc := opCase{count: int64(k)}
		if cfg.alloc && op != "sendrecv" {
			b, free, err := comm.Alloc(c, dt, k)
			if err != nil {
				fmt.Fprintf(os.Stderr, "commbench: -alloc: %v; using ordinary memory\n", err)
			} else {
				buf, oc.free = b, free
			}
		}
		switch op {
		case "all_reduce":
			oc.run = func(ctx context.Context) error { return do(ctx)(c.AllReduce(ctx, buf, red)) }
			oc.fill = func() { commtest.Fill(dt, buf.Host(), func(i int) float64 { return commtest.Input(dt, red, r, i) }) }
			oc.check = func() error { return checkReduced(buf.Host(), k, expected) }
		case "reduce":
			oc.run = func(ctx context.Context) error { return do(ctx)(c.Reduce(ctx, buf, red, 0)) }
			oc.fill = func() { commtest.Fill(dt, buf.Host(), func(i int) float64 { return commtest.Input(dt, red, r, i) }) }
			oc.check = func() error {
				if r != 0 {
					return nil
				}
				return checkReduced(buf.Host(), k, expected)
			}
		case "broadcast":
			oc.run = func(ctx context.Context) error { return do(ctx)(c.Broadcast(ctx, buf, 0)) }
			oc.fill = func() { commtest.Fill(dt, buf.Host(), func(i int) float64 { return commtest.Pattern(r, i) }) }
			oc.check = func() error {
				return commtest.CheckElems(dt, buf.Host(), k, func(i int) float64 { return commtest.Pattern(0, i) })
			}
		case "sendrecv":
			next, prev := (r+1)%n, (r-1+n)%n
			oc.run = func(ctx context.Context) error {
				ws, err := c.Send(ctx, buf, next, 0)
				if err != nil {
					return err
				}
				if err := do(ctx)(c.Recv(ctx, out, prev, 0)); err != nil {
					return err
				}
				return ws.Wait(ctx)
			}
			oc.fill = func() { commtest.Fill(dt, buf.Host(), func(i int) float64 { return commtest.Pattern(r, i) }) }
			oc.check = func() error {
				return commtest.CheckElems(dt, out.Host(), k, func(i int) float64 { return commtest.Pattern(prev, i) })
			}
		}
		return oc
	case "all_gather", "gather":
		k := int(size / es / nn)
		src, dst := commtest.NewBuf(dt, k), commtest.NewBuf(dt, n*k)
		oc := opCase{count: int64(n * k)}
		if op == "all_gather" {
			oc.run = func(ctx context.Context) error { return do(ctx)(c.AllGather(ctx, dst, src)) }
		} else {
			oc.run = func(ctx context.Context) error { return do(ctx)(c.Gather(ctx, dst, src, 0)) }
		}
		oc.fill = func() { commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Pattern(r, i) }) }
		oc.check = func() error {
			if op == "gather" && r != 0 {
				return nil
			}
			return commtest.CheckElems(dt, dst.Host(), n*k, func(i int) float64 { return commtest.Pattern(i/max(k, 1), i%max(k, 1)) })
		}
		return oc
	case "scatter", "reduce_scatter", "all_to_all":
		k := int(size / es / nn)
		src, dst := commtest.NewBuf(dt, n*k), commtest.NewBuf(dt, k)
		oc := opCase{count: int64(n * k)}
		switch op {
		case "scatter":
			oc.run = func(ctx context.Context) error { return do(ctx)(c.Scatter(ctx, dst, src, 0)) }
			oc.fill = func() {
				commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Pattern(100+i/max(k, 1), i%max(k, 1)) })
			}
			oc.check = func() error {
				return commtest.CheckElems(dt, dst.Host(), k, func(i int) float64 { return commtest.Pattern(100+r, i) })
			}
		case "reduce_scatter":
			oc.run = func(ctx context.Context) error { return do(ctx)(c.ReduceScatter(ctx, dst, src, red)) }
			oc.fill = func() { commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Input(dt, red, r, i) }) }
			oc.check = func() error {
				return checkReduced(dst.Host(), k, func(i int) float64 { return expected(r*k + i) })
			}
		case "all_to_all":
			dst = commtest.NewBuf(dt, n*k)
			oc.run = func(ctx context.Context) error { return do(ctx)(c.AllToAll(ctx, dst, src)) }
			oc.fill = func() {
				commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Pattern(r*n+i/max(k, 1), i%max(k, 1)) })
			}
			oc.check = func() error {
				return commtest.CheckElems(dt, dst.Host(), n*k, func(i int) float64 { return commtest.Pattern((i/max(k, 1))*n+r, i%max(k, 1)) })
			}
		}
		return oc
	}
	// barrier
	return opCase{
		run:   func(ctx context.Context) error { return do(ctx)(c.Barrier(ctx)) },
		fill:  func() {},
		check: func() error { return nil },
	}
}

// warmUp runs cfg.warmup untimed iterations, then more, in batches that
// double, until the slowest rank has spent cfg.warmFor warming up (every
// rank runs the same number: the time is all-reduced after each batch).
// A fresh Go process is not in its steady state for its first tens of
// milliseconds: sysmon, the runtime's monitor thread, wakes every 20 us at
// first (and again after it takes a processor back from a system call),
// backing off to 10 ms over about 25 ms; on the 2-core VM of issue 16
// each wake-up takes a pinned rank's core for 20-40 us, which a
// 2000-iteration run of 4 KiB all-reduces (4 ms) would measure instead of
// the collective (benchmarks/NOTES.md, "4 KiB latency: the slow operations").
func warmUp(ctx context.Context, c comm.Comm, oc opCase, cfg config) error {
	start := time.Now()
	for i := 0; i < cfg.warmup; i++ {
		if err := oc.run(ctx); err != nil {
			return err
		}
	}
	if cfg.warmup == 0 || cfg.warmFor <= 0 {
		return nil
	}
	for batch := cfg.warmup; ; batch = min(2*batch, 1<<20) {
		spent := []float64{time.Since(start).Seconds()}
		if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(spent), comm.Max)); err != nil {
			return err
		}
		if spent[0] >= cfg.warmFor.Seconds() {
			return nil
		}
		for i := 0; i < batch; i++ {
			if err := oc.run(ctx); err != nil {
				return err
			}
		}
	}
}

func bench(ctx context.Context, c comm.Comm, cfg config, out io.Writer) error {
	n := c.Size()
	backend := backendName(cfg)
	failed := 0
	for _, op := range cfg.ops {
		sizes := cfg.sizes
		if op == "barrier" {
			sizes = []int64{0}
		}
		if c.Rank() == 0 && !cfg.jsonOut {
			fmt.Fprintf(out, "# %s  backend=%s world=%d dtype=%v", op, backend, n, cfg.dtype)
			if op == "all_reduce" || op == "reduce" || op == "reduce_scatter" {
				fmt.Fprintf(out, " op=%v", cfg.redop)
			}
			fmt.Fprintf(out, "\n# %12s %12s %10s %12s %12s %6s", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check")
			if cfg.cpu {
				fmt.Fprintf(out, " %10s", "cpu(us)")
			}
			fmt.Fprintln(out)
		}
		for _, size := range sizes {
			dc, err := newDevCase(c, cfg)
			if err != nil {
				return err
			}
			oc := newCase(dc.comm(), cfg, op, size)
			iters := cfg.iters
			if iters == 0 {
				iters = int(min(2000, max(3, (64<<20)/max(size, 1))))
			}
			if err := warmUp(ctx, c, oc, cfg); err != nil {
				return fmt.Errorf("%s %d bytes: %w", op, size, err)
			}
			if err := comm.Run(ctx)(c.Barrier(ctx)); err != nil {
				return err
			}
			var per []time.Duration
			if cfg.perOp {
				per = make([]time.Duration, 0, iters)
			}
			var starts []time.Duration
			var slow *slowLog
			if per != nil && cfg.slowLog != "" {
				starts = make([]time.Duration, 0, iters)
				slow = startSlowLog(cfg.slowLog, c.Rank())
			}
			var (
				opTime, opCPU time.Duration // -refill: the ops' alone
				refillBad     int32         // -refill: iterations with a wrong result
			)
			cpu0 := cpuTime()
			start := time.Now()
			for i := 0; i < iters; i++ {
				if cfg.refill {
					oc.fill()
					if err := dc.upload(); err != nil {
						return err
					}
					if err := comm.Run(ctx)(c.Barrier(ctx)); err != nil {
						return err
					}
				}
				c0 := time.Duration(0)
				if cfg.refill {
					c0 = cpuTime()
				}
				t0 := time.Now()
				if err := oc.run(ctx); err != nil {
					return fmt.Errorf("%s %d bytes: %w", op, size, err)
				}
				if cfg.refill {
					opTime += time.Since(t0)
					opCPU += cpuTime() - c0
					if err := dc.download(); err != nil {
						return err
					}
					if err := oc.check(); err != nil {
						if refillBad == 0 {
							fmt.Fprintf(os.Stderr, "commbench: rank %d: %s %d bytes, iteration %d: WRONG RESULT: %v\n", c.Rank(), op, size, i, err)
						}
						refillBad++
					}
				}
				if per != nil {
					per = append(per, time.Since(t0))
					if starts != nil {
						starts = append(starts, t0.Sub(start))
					}
				}
			}
			elapsed := []float64{time.Since(start).Seconds() / float64(iters)}
			cpu := []float64{(cpuTime() - cpu0).Seconds() / float64(iters)}
			if cfg.refill {
				elapsed[0] = opTime.Seconds() / float64(iters)
				cpu[0] = opCPU.Seconds() / float64(iters)
			}
			if err := slow.write(start, starts, per); err != nil {
				return fmt.Errorf("-slow-log: %w", err)
			}
			// The slowest rank's time is the op's time.
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(elapsed), comm.Max)); err != nil {
				return err
			}
			if cfg.backend == "inproc" {
				// One process: every rank measured the same clock.
				cpu[0] /= float64(n)
			}
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(cpu), comm.Sum)); err != nil {
				return err
			}
			// One more run with known inputs, checked on every rank.
			oc.fill()
			if err := dc.upload(); err != nil {
				return err
			}
			if err := oc.run(ctx); err != nil {
				return fmt.Errorf("%s %d bytes (checked run): %w", op, size, err)
			}
			if err := dc.download(); err != nil {
				return err
			}
			dc.free()
			bad := []int32{0}
			cerr := oc.check()
			if cerr != nil || refillBad > 0 {
				bad[0] = 1
			}
			if cerr != nil {
				fmt.Fprintf(os.Stderr, "commbench: rank %d: %s %d bytes: WRONG RESULT: %v\n", c.Rank(), op, size, cerr)
			}
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(bad), comm.Sum)); err != nil {
				return err
			}
			if oc.free != nil {
				oc.free()
			}
			row := Row{Op: op, Backend: backend, World: n, Bytes: size, Count: oc.count, DType: cfg.dtype.String(),
				Iters: iters, TimeUS: elapsed[0] * 1e6, CPUUS: cpu[0] * 1e6, Correct: bad[0] == 0, Alloc: cfg.alloc, Refill: cfg.refill}
			if bad[0] != 0 {
				failed++
				row.CheckErr = fmt.Sprintf("%d rank(s) got a wrong result", bad[0])
			}
			if len(per) > 0 {
				slices.Sort(per)
				q := func(f float64) float64 {
					return float64(per[min(len(per)-1, int(f*float64(len(per))))].Nanoseconds()) / 1e3
				}
				row.P50US, row.P90US, row.P99US, row.MaxUS = q(0.5), q(0.9), q(0.99), q(1)
			}
			if size > 0 && elapsed[0] > 0 {
				row.AlgBW = float64(size) / elapsed[0] / 1e9
				row.BusBW = row.AlgBW * busFactor(op, n)
			}
			if c.Rank() == 0 {
				if cfg.jsonOut {
					b, _ := json.Marshal(row)
					fmt.Fprintln(out, string(b))
				} else {
					check := "ok"
					if !row.Correct {
						check = "WRONG"
					}
					fmt.Fprintf(out, "  %12d %12d %10.1f %12.3f %12.3f %6s", row.Bytes, row.Count, row.TimeUS, row.AlgBW, row.BusBW, check)
					if cfg.cpu {
						fmt.Fprintf(out, " %10.1f", row.CPUUS)
					}
					if cfg.perOp {
						fmt.Fprintf(out, "  p50 %.1f p90 %.1f p99 %.1f max %.1f us", row.P50US, row.P90US, row.P99US, row.MaxUS)
					}
					fmt.Fprintln(out)
				}
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d row(s) had wrong results", failed)
	}
	return nil
}
