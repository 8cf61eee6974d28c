package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/rendezvous"
	"golang.org/x/sync/errgroup"

	// The backends a job's ranks join with: Job.Backend names one.
	_ "github.com/gdist/gdist/comm/auto"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
)

// Worker is one rank's program: c is its world (rank c.Rank() of
// c.Size()). It returns when its work is done, or when ctx ends.
type Worker func(ctx context.Context, c comm.Comm) error

// Job says how Ranks runs a program's ranks.
type Job struct {
	// NProc is the number of ranks Ranks starts when this process was
	// not started by a launcher (UnderLauncher): 0 or 1 runs this process
	// alone, a world of one. Under a launcher the launcher decided it.
	NProc int
	// Backend is the comm backend of the ranks: "tcp", "shm" or "auto"
	// (the default: shm on one host, tcp across hosts, NCCL where asked);
	// "inproc" runs NProc ranks as goroutines of this process (tests,
	// debugging), launcher or not.
	Backend string
	// Options are the Comm's options.
	Options comm.Options
	// Spec is the launcher's settings when Ranks starts NProc processes
	// of this program (its NProc is Job's; by default the children get
	// this process's arguments, os.Args).
	Spec Spec
}

// Ranks runs worker as the ranks of one job, whichever way this program
// was started:
//
//   - as one rank of a job a launcher started (UnderLauncher: ours,
//     torchrun, mpirun, srun): it joins the others (rendezvous.InitComm
//     with j.Backend) and runs worker on that Comm;
//   - plainly, with j.NProc > 1: it starts j.NProc copies of this program
//     (Run), each of which, under this launcher, takes the case above,
//     and waits for them;
//   - plainly with j.NProc 0 or 1: worker runs here, a world of one;
//   - with j.Backend "inproc": j.NProc ranks as goroutines, each with its
//     Comm; the first to fail cancels the others' ctx.
//
// It returns worker's error (a goroutine rank's wrapped with its rank),
// the launch's (*ExitError names each failed process), or the Comm's
// failure to start or close. Blocking.
func Ranks(ctx context.Context, j Job, worker Worker) error {
	if worker == nil {
		return comm.InvalidArgf("launch: Ranks: nil worker")
	}
	if j.NProc < 0 {
		return comm.InvalidArgf("launch: Ranks: NProc %d < 0", j.NProc)
	}
	backend := j.Backend
	if backend == "" {
		backend = "auto"
	}
	switch {
	case backend == "inproc":
		return goroutines(ctx, max(j.NProc, 1), j.Options, worker)
	case UnderLauncher():
		c, closeComm, err := rendezvous.InitComm(ctx, backend, j.Options)
		if err != nil {
			return err
		}
		err = worker(ctx, c)
		return errors.Join(err, closeComm())
	case j.NProc > 1:
		s := j.Spec
		s.NProc = j.NProc
		return Run(ctx, s)
	default:
		return goroutines(ctx, 1, j.Options, worker)
	}
}

// goroutines runs n ranks over inproc.
func goroutines(ctx context.Context, n int, opts comm.Options, worker Worker) error {
	cs, err := inproc.New(n, opts)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	for r, c := range cs {
		g.Go(func() error {
			defer c.Close()
			if err := worker(gctx, c); err != nil {
				if n > 1 {
					return fmt.Errorf("rank %d: %w", r, err)
				}
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

// Main is Ranks for a program's main function, configured by its command
// line: -nproc N (default 1) and -backend B (default auto; inproc: ranks
// as goroutines), flags Main defines on flag.CommandLine unless the
// program defined flags of those names already (then it reads theirs).
// Define the program's own flags before calling Main: Main parses the
// command line if the program has not. Started plainly (`prog -nproc 4`)
// it launches 4 processes of the program, which join as ranks; under
// torchrun, mpirun or srun (`mpirun -np 4 prog`) each process is a rank.
//
// The first SIGINT or SIGTERM cancels worker's ctx (a rank should save
// and return) or, in the launching process, stops the ranks that way
// (Spec.Stop). Main exits: 0 when every rank succeeded, ExitPreempted
// when they stopped on request, 1 after printing the error otherwise. It
// does not return.
func Main(worker Worker) {
	os.Exit(mainCode(os.Stderr, worker))
}

// mainCode is Main without the exit: it returns the exit code, and
// writes the error to errOut.
func mainCode(errOut io.Writer, worker Worker) int {
	nprocFlag := flag.Lookup("nproc")
	if nprocFlag == nil {
		flag.Int("nproc", 1, "number of ranks (processes) to start when not under a launcher")
		nprocFlag = flag.Lookup("nproc")
	}
	backendFlag := flag.Lookup("backend")
	if backendFlag == nil {
		flag.String("backend", "auto", "comm backend: tcp, shm, auto, or inproc (ranks as goroutines)")
		backendFlag = flag.Lookup("backend")
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	name := filepath.Base(os.Args[0])
	nproc, err := strconv.Atoi(nprocFlag.Value.String())
	if err != nil || nproc < 0 {
		fmt.Fprintf(errOut, "%s: -nproc %q: want a number of ranks, 1 or more\n", name, nprocFlag.Value.String())
		return 2
	}
	j := Job{NProc: nproc, Backend: backendFlag.Value.String()}

	sigs, stopSigs := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSigs()
	ctx := sigs
	if !UnderLauncher() && j.Backend != "inproc" && nproc > 1 {
		// The launching process: a signal stops the ranks (they get
		// SIGTERM, save and exit); ctx stays, so Run waits for them.
		ctx = context.Background()
		j.Spec.Stop = sigs.Done()
	}
	if gone := WatchLauncher(time.Second); gone != nil {
		// A worker whose launcher died stops as on a signal.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-gone:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	err = Ranks(ctx, j, worker)
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Preempted(), sigs.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintf(errOut, "%s: stopped: %v\n", name, err)
		return ExitPreempted
	}
	fmt.Fprintf(errOut, "%s: %v\n", name, err)
	return 1
}
