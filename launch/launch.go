// Package launch is gdist's own torchrun-like launcher: it starts NProc
// copies of the running executable on this host as the ranks of one job,
// serves their rendezvous store, forwards their output and supervises them.
//
// A program is both launcher and worker in one call:
//
//	func main() {
//		launch.Main(func(ctx context.Context, c comm.Comm) error {
//			// one rank's training, c its world
//		})
//	}
//
// Started plainly with -nproc 4 it starts 4 processes of itself, which
// join as the ranks; under torchrun, mpirun or srun each process joins as
// a rank; with -backend inproc the ranks are goroutines. Ranks is the
// same for a program that keeps its command line to itself (Job), and
// runs the ranks as goroutines for tests. Under them, Run starts the
// processes and rendezvous.InitComm joins them.
//
// Output: rank 0's stdout is copied to Spec.Stdout byte for byte, so JSON
// output stays clean; the stdout of the other ranks and the stderr of every
// rank go to Spec.Stderr, each line prefixed with "[rank N] ". Progress
// bars drawn with carriage returns stay readable: one progress line shows
// at a time, the lowest rank's of those drawing one (the others' updates
// are dropped, their final lines kept), redrawn in place with its prefix
// ("\r[rank 0] step 3/10"), and cleared before any other line is
// written (output.go).
//
// Supervision, like torchrun's agent: a failed rank's peers get
// GracePeriod to exit by themselves, then the rest are killed (a rank
// stopped by a signal, which cannot exit, at once); Spec.Stop (the
// launcher's SIGTERM or Ctrl-C) sends every rank SIGTERM (and SIGCONT) to
// save and exit (ExitPreempted); Spec.MaxRestarts starts every rank again after a
// failure (GDIST_RESTART_COUNT), Spec.MinProc lets a restart go on with
// fewer ranks when some cannot start; workers die with the launcher
// (parent-death signal, WatchLauncher). Spec.Nodes > 1 spans several
// hosts, one launcher per host, rank 0 serving the store on node 0.
//
// Environment: the launcher's protocol variables (GDIST_LAUNCHED,
// GDIST_LAUNCHER_PID, GDIST_RESTART_COUNT, GDIST_MAX_RESTARTS,
// GDIST_TARGET_WORLD_SIZE, GDIST_CPUS, and GDIST_FAULT_START for tests)
// are named by the Env* constants and read in one file, env.go, by the
// functions that report them (IsWorker, RestartCount, BoundCPUs, ...); the
// rendezvous variables Run sets are comm/rendezvous's (FromEnv).
package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/rendezvous"
)

// DefaultGracePeriod is Spec.GracePeriod's default: long enough for the
// other ranks to notice a failed rank (a closed connection reaches them in
// well under a second) and exit naming it; a rank that has not exited by
// then is frozen or stuck, and is killed.
const DefaultGracePeriod = 10 * time.Second

// frozenPollInterval is how often, during the grace period after a
// failure, the launcher looks for ranks stopped by a signal.
const frozenPollInterval = 200 * time.Millisecond

// DefaultStopTimeout is Spec.StopTimeout's default.
const DefaultStopTimeout = 60 * time.Second

// ExitPreempted is the exit code of a rank that stopped on request (SIGTERM
// or SIGINT: it finished its step, saved and exited). A job whose failed
// ranks all exited with it was preempted: Run does not restart it.
const ExitPreempted = 75

// waitDelay bounds how long a child's output is still read after it exited
// (a grandchild may hold its pipes open).
const waitDelay = 5 * time.Second

// Spec describes one launch.
type Spec struct {
	// NProc is the number of ranks (processes) to start, at least 1.
	NProc int
	// Args is the children's argv, Args[0] included; default os.Args. The
	// program run is always os.Executable().
	Args []string
	// Env lists extra KEY=value variables for the children, on top of this
	// process's environment. The launcher's own variables override them.
	Env []string
	// Stdout and Stderr receive the children's output; default os.Stdout
	// and os.Stderr.
	Stdout, Stderr io.Writer
	// GracePeriod is how long, after a child fails, the others may go on
	// to exit by themselves before the launcher kills them. 0 means
	// DefaultGracePeriod; a negative value kills them at once.
	GracePeriod time.Duration
	// Stop, when closed, preempts the job: every running rank gets SIGTERM
	// (a gdist worker finishes its step, saves and exits with
	// ExitPreempted), and a rank still running StopTimeout later is
	// killed. nil: never.
	Stop <-chan struct{}
	// StopTimeout bounds the wait after Stop; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// MaxRestarts is how many times Run restarts the whole job after a
	// rank failed (exited non-zero other than ExitPreempted, or was killed
	// by a signal): it stops the other ranks, then starts every rank again
	// with a fresh store and token and GDIST_RESTART_COUNT set to the
	// restart's number (1, 2, ...), like torchrun's --max-restarts. The
	// ranks are expected to resume from their latest checkpoint.
	MaxRestarts int
	// MinProc, when above 0, lets the job go on with fewer ranks: if
	// some ranks of a generation cannot start (their host is gone), Run
	// starts the generation again with as many ranks as did start, if
	// that is at least MinProc, numbered 0..M-1. The next restart tries
	// NProc again (the job grows back when the capacity returns). Each
	// child gets GDIST_TARGET_WORLD_SIZE=NProc, to keep the global batch.
	// 0: every generation has NProc ranks, and a rank that cannot start
	// fails the launch.
	MinProc int
	// Nodes is the number of nodes (hosts) the job spans, one launcher
	// on each (like torchrun --nnodes); 0 or 1: this host only. With
	// several, this launcher starts NProc ranks, NodeRank*NProc to
	// NodeRank*NProc+NProc-1, and serves no store: rank 0 (on node 0)
	// serves it at MasterAddr:MasterPort, reachable from every node, and
	// every rank needs the same Token.
	Nodes, NodeRank int
	MasterAddr      string
	MasterPort      int
	// Token is the job's secret (raw bytes) for several nodes: every
	// node's launcher must be given the same (GDIST_TOKEN, or a file).
	Token []byte
	// Logf receives the launcher's messages; nil logs to the standard
	// logger.
	Logf func(format string, args ...any)
	// BindCPUs pins each local rank to a block of its own of the CPUs
	// this launcher may run on (split evenly; local rank r gets the r-th
	// block), as mpirun binds ranks to cores: the child starts with that
	// affinity, and GDIST_CPUS lists the block (BoundCPUs). Only when the
	// CPUs are at least as many as the local ranks, and on Linux; else it
	// does nothing. The children keep the GOMAXPROCS they would have had
	// unbound (GOMAXPROCS=<this launcher's CPUs>, unless the environment
	// sets it): binding decides where a rank runs, not how many goroutines
	// may run at once, and a rank with one P stalls its other goroutines
	// behind every cgo call (BLAS) until the runtime takes the P back
	// (train -model cnn, 2 ranks bound to 1 CPU each: 33 ms steps with
	// GOMAXPROCS 1 against 28.6 ms with 2).
	BindCPUs bool
}

// multiNode reports whether s spans several nodes.
func (s *Spec) multiNode() bool { return s.Nodes > 1 }

// startError is runGeneration's error when ranks could not start.
type startError struct {
	err    error // the first rank's
	failed int   // how many ranks could not start
}

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// RankStatus says how one rank ended.
type RankStatus struct {
	Rank int
	// ExitCode is the child's exit status, or -1 if a signal ended it.
	ExitCode int
	// Status is a description, e.g. "exit status 3" or "signal: killed".
	Status string
	// Killed is true if the launcher killed it (grace period over, or the
	// launch cancelled).
	Killed bool
}

// ExitError is Run's error when ranks failed. It lists every failed rank
// of the last generation in rank order.
type ExitError struct {
	Failed []RankStatus
	// Restarts is how many restarts (Spec.MaxRestarts) were used.
	Restarts int
}

func (e *ExitError) Error() string {
	var b strings.Builder
	b.WriteString("launch: ")
	for i, f := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "rank %d %s", f.Rank, f.Status)
		if f.Killed {
			b.WriteString(" (killed by the launcher)")
		}
	}
	if e.Restarts > 0 {
		fmt.Fprintf(&b, " (after %d restart(s))", e.Restarts)
	}
	return b.String()
}

// Preempted reports whether the job stopped on request: every failed rank
// exited with ExitPreempted.
func (e *ExitError) Preempted() bool {
	for _, f := range e.Failed {
		if f.ExitCode != ExitPreempted {
			return false
		}
	}
	return len(e.Failed) > 0
}

type result struct {
	rank int
	err  error
	ps   *os.ProcessState
}

// Run starts s.NProc copies of this executable as the ranks of one job and
// waits for them. Each child gets RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1), MASTER_PORT and
// GDIST_STORE_ADDR (the rendezvous store Run serves for the job, on
// 127.0.0.1), GDIST_TOKEN (a fresh random 32-byte token, hex),
// GDIST_LAUNCHED=1, GDIST_LAUNCHER_PID, GDIST_RESTART_COUNT and
// GDIST_MAX_RESTARTS (and GDIST_CPUS with s.BindCPUs). The
// children run in their own process group, so a Ctrl-C at the terminal
// reaches the launcher only (which stops them through s.Stop or ctx); on
// Linux they get SIGTERM when the launcher dies (WatchLauncher covers the
// rest).
//
// If a child exits non-zero or is killed by a signal, Run logs it, lets the
// others run for s.GracePeriod and then kills the survivors; then it
// restarts the job if s.MaxRestarts allows. It returns nil if every child
// of the last generation exited 0, an *ExitError naming every failed rank
// otherwise, or, if ctx ends first, an error wrapping ctx.Err() after
// killing every child. Run blocks until every child has exited.
func Run(ctx context.Context, s Spec) error {
	if s.NProc < 1 {
		return comm.InvalidArgf("launch: NProc %d < 1", s.NProc)
	}
	if s.MaxRestarts < 0 {
		return comm.InvalidArgf("launch: MaxRestarts %d < 0", s.MaxRestarts)
	}
	if s.MinProc < 0 || s.MinProc > s.NProc {
		return comm.InvalidArgf("launch: MinProc %d: want 0 or 1 to NProc (%d)", s.MinProc, s.NProc)
	}
	if s.multiNode() {
		switch {
		case s.NodeRank < 0 || s.NodeRank >= s.Nodes:
			return comm.InvalidArgf("launch: node rank %d: want 0 to %d (nodes %d)", s.NodeRank, s.Nodes-1, s.Nodes)
		case s.MasterAddr == "":
			return comm.InvalidArgf("launch: %d nodes need the master address: node 0's, which every node reaches", s.Nodes)
		case s.MasterPort < 1 || s.MasterPort > 65535:
			return comm.InvalidArgf("launch: master port %d: want 1 to 65535", s.MasterPort)
		case len(s.Token) == 0:
			return comm.InvalidArgf("launch: %d nodes need a job token, the same on every node (GDIST_TOKEN, e.g. from `openssl rand -hex 32`, or a token file)", s.Nodes)
		case s.MaxRestarts > 0 || s.MinProc > 0:
			return comm.InvalidArgf("launch: restarts across %d nodes are not coordinated by gdist's launchers: use torchrun --max_restarts or the scheduler's requeue (Slurm --requeue) with -resume auto", s.Nodes)
		}
	}
	if s.Args == nil {
		s.Args = os.Args
	}
	if len(s.Args) == 0 {
		return comm.InvalidArgf("launch: empty Args")
	}
	if s.Stdout == nil {
		s.Stdout = os.Stdout
	}
	if s.Stderr == nil {
		s.Stderr = os.Stderr
	}
	if s.GracePeriod == 0 {
		s.GracePeriod = DefaultGracePeriod
	}
	if s.StopTimeout <= 0 {
		s.StopTimeout = DefaultStopTimeout
	}
	if s.Logf == nil {
		s.Logf = log.Printf
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("launch: finding the executable: %w", err)
	}
	for gen := 0; ; gen++ {
		failed, err := runGeneration(ctx, s, exe, gen, s.NProc)
		for nproc := s.NProc; ; {
			var se *startError
			if !errors.As(err, &se) || s.MinProc == 0 || nproc-se.failed < s.MinProc {
				break
			}
			nproc -= se.failed
			s.Logf("launch: %d rank(s) could not start (%v): going on with %d ranks (at least %d)", se.failed, se.err, nproc, s.MinProc)
			failed, err = runGeneration(ctx, s, exe, gen, nproc)
		}
		if err != nil {
			return err
		}
		if len(failed) == 0 {
			return nil
		}
		ee := &ExitError{Failed: failed, Restarts: gen}
		if ee.Preempted() || stopped(s.Stop) || gen >= s.MaxRestarts {
			return ee
		}
		s.Logf("launch: restarting the job (restart %d of %d) after: %s", gen+1, s.MaxRestarts, causes(failed))
	}
}

// causes describes the failures the launcher did not cause itself.
func causes(failed []RankStatus) string {
	var parts []string
	for _, f := range failed {
		if !f.Killed {
			parts = append(parts, fmt.Sprintf("rank %d %s", f.Rank, f.Status))
		}
	}
	return strings.Join(parts, "; ")
}

// stopped reports whether stop is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// runGeneration runs one generation of the job: it starts every rank and
// waits for all of them. It returns the failed ranks, or an error when the
// generation could not run (ctx ended, a rank did not start, no store).
func runGeneration(ctx context.Context, s Spec, exe string, gen, nproc int) ([]RankStatus, error) {
	con := newConsole(s.Stderr) // serializes writes to s.Stdout and s.Stderr
	logf := con.logf(s.Logf)
	// The store: this launcher's, on loopback, for one node; rank 0's
	// (on node 0), at the master address, for several.
	var token, port, master, storeAddr string
	if s.multiNode() {
		token, port, master = hex.EncodeToString(s.Token), strconv.Itoa(s.MasterPort), s.MasterAddr
	} else {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, fmt.Errorf("launch: generating the job token: %w", err)
		}
		token = hex.EncodeToString(raw)
		srv, err := rendezvous.NewServer("127.0.0.1:0", raw, logf)
		if err != nil {
			return nil, fmt.Errorf("launch: starting the store: %w", err)
		}
		defer srv.Close()
		if _, port, err = net.SplitHostPort(srv.Addr()); err != nil {
			return nil, fmt.Errorf("launch: store address %q: %w", srv.Addr(), err)
		}
		master, storeAddr = "127.0.0.1", net.JoinHostPort("127.0.0.1", port)
	}
	nodes := max(s.Nodes, 1)

	n := strconv.Itoa(nproc)
	cmds := make([]*exec.Cmd, nproc)
	flush := make([]func(), nproc)
	results := make(chan result, nproc)
	started := 0
	var startErr *startError
	var blocks [][]int
	if s.BindCPUs {
		if blocks = cpuBlocks(allowedCPUs(), nproc); blocks == nil {
			logf("launch: not binding %d ranks to CPUs: this launcher may run on %d CPUs", nproc, len(allowedCPUs()))
		}
	}
	for r := range nproc {
		cmd := &exec.Cmd{Path: exe, Args: s.Args, WaitDelay: waitDelay, SysProcAttr: childAttr()}
		cmd.Env = append(append(inheritedEnv(), s.Env...),
			"RANK="+strconv.Itoa(s.NodeRank*nproc+r),
			"WORLD_SIZE="+strconv.Itoa(nodes*nproc),
			"LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+n,
			"GROUP_RANK="+strconv.Itoa(s.NodeRank), // torchrun's name for the node rank
			"MASTER_ADDR="+master,
			"MASTER_PORT="+port,
			"GDIST_TOKEN="+token,
			EnvLaunched+"=1",
			EnvLauncherPID+"="+strconv.Itoa(os.Getpid()),
			EnvRestartCount+"="+strconv.Itoa(gen),
			EnvMaxRestarts+"="+strconv.Itoa(s.MaxRestarts),
			EnvTargetWorldSize+"="+strconv.Itoa(nodes*s.NProc),
		)
		if storeAddr != "" { // one node: this launcher's store (several: rank 0 serves it)
			cmd.Env = append(cmd.Env, "GDIST_STORE_ADDR="+storeAddr)
		}
		cmd.Env = append(cmd.Env, shareGPUEnv(cmd.Env, s.NodeRank*nproc+r, s.multiNode())...) // GDIST_NCCL_SHARE_GPU=1
		var cpus []int
		if blocks != nil {
			cpus = blocks[r]
			cmd.Env = append(cmd.Env, EnvCPUs+"="+cpuList(cpus))
			if !gomaxprocsSet() && !slices.ContainsFunc(s.Env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
				cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(runtime.GOMAXPROCS(0)))
			}
		}
		prefix := fmt.Sprintf("[rank %d] ", s.NodeRank*nproc+r)
		errW := con.writer(s.NodeRank*nproc+r, prefix)
		if r == 0 && s.NodeRank == 0 {
			cmd.Stdout = con.raw(s.Stdout)
			flush[r] = errW.Flush
		} else {
			outW := con.writer(s.NodeRank*nproc+r, prefix)
			cmd.Stdout = outW
			flush[r] = func() { outW.Flush(); errW.Flush() }
		}
		cmd.Stderr = errW
		var err error
		if faultStart(gen, r) {
			err = errors.New(EnvFaultStart + " says this start fails")
		} else {
			err = startChild(cmd, cpus)
		}
		if err != nil {
			if startErr == nil {
				startErr = &startError{err: fmt.Errorf("launch: starting rank %d: %w", r, err)}
			}
			startErr.failed++
			if s.MinProc == 0 {
				break // the launch fails: no need to try the others
			}
			continue
		}
		cmds[r] = cmd
		started++
		go func() {
			err := cmd.Wait()
			flush[r]()
			results <- result{rank: r, err: err, ps: cmd.ProcessState}
		}()
	}

	killed := make([]bool, nproc) // the launcher sent it SIGKILL
	exited := make([]bool, nproc) // its result came in
	killAll := func(why string) {
		for r, cmd := range cmds {
			if cmd != nil && !exited[r] && !killed[r] {
				if err := cmd.Process.Kill(); err == nil {
					killed[r] = true
					logf("launch: killing rank %d (%s)", s.NodeRank*nproc+r, why)
				}
			}
		}
	}
	if startErr != nil {
		killAll("another rank failed to start")
	}

	var failed []RankStatus
	var grace, stopDeadline <-chan time.Time
	// While the grace period runs, a rank stopped by a signal (SIGSTOP,
	// SIGTSTP: frozen) cannot exit by itself: it is killed at once rather
	// than at the end of the grace period.
	var frozenPoll <-chan time.Time
	var frozenTicker *time.Ticker
	defer func() {
		if frozenTicker != nil {
			frozenTicker.Stop()
		}
	}()
	killFrozen := func() {
		for r, cmd := range cmds {
			if cmd != nil && !exited[r] && !killed[r] && processStopped(cmd.Process.Pid) {
				if err := cmd.Process.Kill(); err == nil {
					killed[r] = true
					logf("launch: killing rank %d (stopped by a signal: it cannot exit by itself)", s.NodeRank*nproc+r)
				}
			}
		}
	}
	ctxDone := ctx.Done()
	stop := s.Stop
	for remaining := started; remaining > 0; {
		select {
		case res := <-results:
			remaining--
			exited[res.rank] = true
			if res.err == nil {
				continue
			}
			st := RankStatus{Rank: s.NodeRank*nproc + res.rank, ExitCode: -1, Status: res.err.Error()}
			if res.ps != nil {
				st.ExitCode = res.ps.ExitCode()
				st.Status = res.ps.String()
			}
			// Killed only if our SIGKILL is what ended it.
			st.Killed = killed[res.rank] && st.ExitCode == -1
			failed = append(failed, st)
			if st.Killed || st.ExitCode == ExitPreempted {
				continue
			}
			logf("launch: rank %d failed: %s", st.Rank, st.Status)
			if grace == nil && startErr == nil && ctx.Err() == nil && remaining > 0 {
				if s.GracePeriod < 0 {
					killAll(fmt.Sprintf("rank %d failed", st.Rank))
				} else {
					logf("launch: waiting up to %v for the other ranks to exit", s.GracePeriod)
					grace = time.After(s.GracePeriod)
					frozenTicker = time.NewTicker(frozenPollInterval)
					frozenPoll = frozenTicker.C
					killFrozen()
				}
			}
		case <-frozenPoll:
			killFrozen()
		case <-grace:
			grace = nil
			frozenPoll = nil
			killAll(fmt.Sprintf("grace period of %v after a failure is over", s.GracePeriod))
		case <-stop:
			stop = nil
			logf("launch: stopping the job: every rank finishes its step, saves and exits (up to %v)", s.StopTimeout)
			for r, cmd := range cmds {
				if cmd != nil && !exited[r] {
					cmd.Process.Signal(syscall.SIGTERM)
					// A stopped rank resumes to act on it.
					cmd.Process.Signal(syscall.SIGCONT)
				}
			}
			stopDeadline = time.After(s.StopTimeout)
		case <-stopDeadline:
			stopDeadline = nil
			killAll(fmt.Sprintf("still running %v after the stop", s.StopTimeout))
		case <-ctxDone:
			ctxDone = nil
			killAll("launch cancelled")
		}
	}

	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	if startErr != nil {
		return nil, startErr
	}
	sortStatuses(failed)
	return failed, nil
}

func sortStatuses(s []RankStatus) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Rank < s[j-1].Rank; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
