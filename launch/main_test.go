package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// sumRanks all-reduces the rank and checks the sum; rank 0 prints it on
// stdout.
func sumRanks(ctx context.Context, c comm.Comm) error {
	v := []float64{float64(c.Rank())}
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
		return err
	}
	n := c.Size()
	if want := float64(n * (n - 1) / 2); v[0] != want {
		return fmt.Errorf("rank %d: sum of ranks %v, want %v", c.Rank(), v[0], want)
	}
	if c.Rank() == 0 {
		fmt.Printf("sum %v over %d ranks\n", v[0], n)
	}
	return nil
}

// mainWorkers are the workers of the test binary run as a program that
// calls Main (childEnv names one).
var mainWorkers = map[string]Worker{
	"main": sumRanks,
	"main-fail": func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 1 {
			return errors.New("the data file is missing")
		}
		return sumRanks(ctx, c) // fails when rank 1 leaves
	},
	// Ranks that wait for a signal.
	"main-wait": func(ctx context.Context, c comm.Comm) error {
		fmt.Fprintf(os.Stderr, "rank %d ready\n", c.Rank())
		<-ctx.Done()
		return ctx.Err()
	},
	// A vocabulary numbered in map order: rank 1's differs.
	"main-vocab": func(ctx context.Context, c comm.Comm) error {
		vocab := "abcdefgh"
		if c.Rank() == 1 {
			vocab = "abcdefhg"
		}
		if err := comm.CheckSame(ctx, c, "vocabulary", []byte(vocab)); err != nil {
			return err
		}
		return sumRanks(ctx, c)
	},
}

// TestRanksGoroutines: Backend inproc runs NProc ranks as goroutines of
// this process, each with its Comm; the first rank to fail cancels the
// others (blocked in a collective) and its error, naming it, is returned.
func TestRanksGoroutines(t *testing.T) {
	ctx := testCtx(t)
	seen := make([]bool, 3)
	err := Ranks(ctx, Job{NProc: 3, Backend: "inproc"}, func(ctx context.Context, c comm.Comm) error {
		seen[c.Rank()] = c.Size() == 3
		return sumRanks(ctx, c)
	})
	if err != nil || !seen[0] || !seen[1] || !seen[2] {
		t.Fatalf("Ranks: %v, ranks seen %v", err, seen)
	}
	err = Ranks(ctx, Job{NProc: 3, Backend: "inproc"}, func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 1 {
			return errors.New("bad shard")
		}
		_, err := c.Barrier(ctx)
		if err == nil {
			<-ctx.Done() // the barrier never completes: rank 1 left
			return ctx.Err()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "rank 1: bad shard") {
		t.Fatalf("Ranks: %v, want rank 1's failure", err)
	}
	// Alone: a world of one.
	if err := Ranks(ctx, Job{}, func(ctx context.Context, c comm.Comm) error {
		if c.Size() != 1 {
			return fmt.Errorf("size %d", c.Size())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// runMain runs the test binary as a program whose main calls Main, with
// args, and returns its exit code, stdout and stderr.
func runMain(t *testing.T, mode string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	var env []string
	for _, kv := range os.Environ() {
		// Not under a launcher, whatever runs the test.
		if k, _, _ := strings.Cut(kv, "="); k != "WORLD_SIZE" && k != "OMPI_COMM_WORLD_SIZE" && k != "SLURM_NTASKS" && k != EnvLaunched {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, childEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestMain_Processes: a program calling Main, started plainly with
// -nproc 2, launches 2 processes of itself that join as ranks (tcp) and
// exits 0; with -backend inproc its ranks are goroutines; a rank's
// failure makes it exit 1 naming the rank and the error; a vocabulary
// that differs on rank 1 (comm.CheckSame) fails every rank naming rank 1.
func TestMain_Processes(t *testing.T) {
	for _, backend := range []string{"tcp", "inproc"} {
		code, out, errOut := runMain(t, "main", "-nproc", "2", "-backend", backend)
		if code != 0 || out != "sum 1 over 2 ranks\n" {
			t.Fatalf("%s: exit %d, stdout %q, want 0 and rank 0's sum\nstderr:\n%s", backend, code, out, errOut)
		}
	}
	code, _, errOut := runMain(t, "main-fail", "-nproc", "2", "-backend", "tcp")
	if code != 1 || !strings.Contains(errOut, "[rank 1] ") || !strings.Contains(errOut, "the data file is missing") || !strings.Contains(errOut, "rank 1 exit status 1") {
		t.Fatalf("exit %d, want 1 naming rank 1 and its error\nstderr:\n%s", code, errOut)
	}
	// comm.CheckSame across processes: every rank fails naming rank 1.
	code, _, errOut = runMain(t, "main-vocab", "-nproc", "3", "-backend", "tcp")
	for r := range 3 {
		if want := fmt.Sprintf(`[rank %d] launch.test: comm: rank %d: vocabulary differs between ranks: rank 1 has "abcdefhg" where rank 0 has "abcdefgh": first difference at byte 6`, r, r); code != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("exit %d, want 1 and %s\nstderr:\n%s", code, want, errOut)
		}
	}
	code, _, errOut = runMain(t, "main", "-nproc", "x")
	if code != 2 || !strings.Contains(errOut, "-nproc") {
		t.Fatalf("-nproc x: exit %d\nstderr:\n%s", code, errOut)
	}
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestMain_UnderOtherLaunchers: a program calling Main, started by
// torchrun, mpirun or srun (their environment, set here by hand), joins
// as one rank of their job whatever its -nproc says: 2 processes, one
// world of 2.
func TestMain_UnderOtherLaunchers(t *testing.T) {
	for _, l := range []struct {
		name string
		env  func(rank int) []string
	}{
		{"torchrun", func(r int) []string {
			return []string{"TORCHELASTIC_RUN_ID=job7", "RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=2"}
		}},
		{"mpirun", func(r int) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_MCA_ess_base_jobid=7"}
		}},
		{"srun", func(r int) []string {
			return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=2", "SLURM_LOCALID=" + strconv.Itoa(r), "SLURM_TASKS_PER_NODE=2", "SLURM_JOB_ID=7"}
		}},
	} {
		t.Run(l.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			port := strconv.Itoa(freePort(t))
			var base []string
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "OMPI_") && !strings.HasPrefix(k, "SLURM_") && !strings.HasPrefix(k, "GDIST_") &&
					k != "RANK" && k != "WORLD_SIZE" && k != "LOCAL_RANK" && k != "LOCAL_WORLD_SIZE" && k != "TORCHELASTIC_RUN_ID" && k != "MASTER_PORT" && k != "MASTER_ADDR" {
					base = append(base, kv)
				}
			}
			outs := make([]*strings.Builder, 2)
			errs := make([]*strings.Builder, 2)
			cmds := make([]*exec.Cmd, 2)
			for r := range cmds {
				cmd := exec.CommandContext(ctx, os.Args[0], "-nproc", "5", "-backend", "tcp")
				cmd.Env = append(append(append([]string(nil), base...), l.env(r)...),
					childEnv+"=main", "GORACE=atexit_sleep_ms=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port, "GDIST_STORE_PORT="+port, "GDIST_TOKEN=00112233")
				outs[r], errs[r] = &strings.Builder{}, &strings.Builder{}
				cmd.Stdout, cmd.Stderr = outs[r], errs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
			}
			for r, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Errorf("rank %d: %v\nstderr:\n%s", r, err, errs[r])
				}
			}
			if outs[0].String() != "sum 1 over 2 ranks\n" || outs[1].String() != "" {
				t.Fatalf("stdout %q and %q, want rank 0's sum over 2 ranks", outs[0], outs[1])
			}
		})
	}
}

// TestMain_Mpirun: the same under a real mpirun (Open MPI), where
// installed.
func TestMain_Mpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("no mpirun")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--oversubscribe", "-np", "2", "-x", childEnv, "-x", "GORACE",
		os.Args[0], "-nproc", "5", "-backend", "tcp")
	cmd.Env = append(os.Environ(), childEnv+"=main", "GORACE=atexit_sleep_ms=0",
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun: %v\nstderr:\n%s", err, errOut.String())
	}
	if out.String() != "sum 1 over 2 ranks\n" {
		t.Fatalf("stdout %q, want rank 0's sum over 2 ranks\nstderr:\n%s", out.String(), errOut.String())
	}
}

// syncBuffer is a strings.Builder safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMain_Stop: SIGTERM to a program that launched its ranks with Main
// stops them (their ctx ends, they return) and it exits ExitPreempted.
func TestMain_Stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-nproc", "2", "-backend", "tcp")
	cmd.Env = append(os.Environ(), childEnv+"=main-wait", "GORACE=atexit_sleep_ms=0")
	var errOut syncBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(errOut.String(), "[rank 0] rank 0 ready") || !strings.Contains(errOut.String(), "[rank 1] rank 1 ready") {
		if ctx.Err() != nil {
			t.Fatalf("the ranks never got ready\nstderr:\n%s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != ExitPreempted {
		t.Fatalf("exit %d, want %d (ExitPreempted)\nstderr:\n%s", code, ExitPreempted, errOut.String())
	}
}
