package launch

import (
	"context"
	"errors"
	"fmt"
	"github.com/gdist/gdist/comm/commtest"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/comm/rendezvous"
)

// childEnv selects the behaviour of a re-executed test binary.
const childEnv = "GDIST_LAUNCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if w := mainWorkers[mode]; w != nil {
			os.Exit(mainCode(os.Stderr, w)) // a program that calls Main
		}
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child runs as one rank and returns its exit code.
func child(mode string) int {
	if !IsWorker() {
		fmt.Fprintln(os.Stderr, "GDIST_LAUNCHED is not 1")
		return 10
	}
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	switch mode {
	case "ok":
		fmt.Printf("out %d\n", rank)
		fmt.Fprintf(os.Stderr, "err %d\n", rank)
		return 0
	case "fail-rank-1":
		if rank == 1 {
			return 3
		}
		return 0
	case "hang-after-fail":
		if rank == 0 {
			return 1
		}
		time.Sleep(time.Minute)
		return 0
	case "hang":
		time.Sleep(time.Minute)
		return 0
	case "frozen-after-fail":
		// Rank 1 freezes (SIGSTOP to itself), then rank 0 fails.
		if rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			time.Sleep(time.Minute)
			return 0
		}
		time.Sleep(500 * time.Millisecond)
		return 1
	case "term":
		// A worker that stops on SIGTERM as gdist's do.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Println("ready")
		select {
		case <-sig:
			return ExitPreempted
		case <-time.After(time.Minute):
			return 0
		}
	case "fail-first-gen":
		if RestartCount() == 0 {
			if rank == 1 {
				return 3
			}
			time.Sleep(time.Minute) // killed at the end of the grace period
		}
		fmt.Printf("generation %d rank %d\n", RestartCount(), rank)
		return 0
	case "shrink-grow":
		// A worker waits for its peers at the rendezvous first: the ranks
		// of a generation some rank of which could not start are killed
		// there.
		time.Sleep(500 * time.Millisecond)
		if RestartCount() == 0 {
			fmt.Printf("generation 0: %s of %d ranks\n", os.Getenv("WORLD_SIZE"), TargetWorldSize())
			if rank == 1 {
				return 3
			}
			time.Sleep(time.Minute)
		}
		fmt.Printf("generation %d: %s of %d ranks\n", RestartCount(), os.Getenv("WORLD_SIZE"), TargetWorldSize())
		return 0
	case "env":
		fmt.Fprintf(os.Stderr, "RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s MASTER=%s:%s STORE=%q TOKEN=%s\n",
			os.Getenv("RANK"), os.Getenv("WORLD_SIZE"), os.Getenv("LOCAL_RANK"), os.Getenv("LOCAL_WORLD_SIZE"), os.Getenv("GROUP_RANK"),
			os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"), os.Getenv("GDIST_STORE_ADDR"), os.Getenv("GDIST_TOKEN"))
		return 0
	case "always-fail":
		return 4
	case "cpus":
		return childCPUs()
	case "store":
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		env, err := rendezvous.FromEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 11
		}
		if env.Launcher != rendezvous.LauncherGdist || env.TokenDerived || len(env.Token) != 32 {
			fmt.Fprintf(os.Stderr, "env %+v\n", env)
			return 12
		}
		st, closeFn, err := rendezvous.Connect(ctx, env, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 13
		}
		defer closeFn()
		if err := st.Set(ctx, fmt.Sprint("rank/", env.Rank), []byte(strconv.Itoa(env.Rank))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 14
		}
		peer := (env.Rank + 1) % env.Size
		v, err := st.Get(ctx, fmt.Sprint("rank/", peer))
		if err != nil || string(v) != strconv.Itoa(peer) {
			fmt.Fprintln(os.Stderr, "get:", string(v), err)
			return 15
		}
		if env.Rank == 0 {
			fmt.Println(`{"ok":true}`)
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 20
}

func spec(t *testing.T, nproc int, mode string) (Spec, *commtest.Buffer, *commtest.Buffer) {
	out, errOut := &commtest.Buffer{}, &commtest.Buffer{}
	return Spec{
		NProc: nproc,
		Args:  []string{os.Args[0]},
		// No 1 s sleep at exit in race-enabled children.
		Env:    []string{childEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"},
		Stdout: out,
		Stderr: errOut,
		Logf:   t.Logf,
	}, out, errOut
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAllSucceed(t *testing.T) {
	s, out, errOut := spec(t, 2, "ok")
	if err := Run(testCtx(t), s); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errOut)
	}
	if got := out.String(); got != "out 0\n" {
		t.Errorf("stdout %q, want rank 0's output only, unprefixed", got)
	}
	for _, want := range []string{"[rank 1] out 1\n", "[rank 0] err 0\n", "[rank 1] err 1\n"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestOneFails(t *testing.T) {
	s, _, _ := spec(t, 3, "fail-rank-1")
	err := Run(testCtx(t), s)
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v", err)
	}
	if len(ee.Failed) != 1 || ee.Failed[0].Rank != 1 || ee.Failed[0].ExitCode != 3 || ee.Failed[0].Killed {
		t.Fatalf("failed %+v", ee.Failed)
	}
	if !strings.Contains(err.Error(), "rank 1 exit status 3") {
		t.Errorf("error %q does not name rank 1 and its status", err)
	}
}

func TestGracePeriodKillsSurvivors(t *testing.T) {
	s, _, _ := spec(t, 2, "hang-after-fail")
	s.GracePeriod = 200 * time.Millisecond
	start := time.Now()
	err := Run(testCtx(t), s)
	var ee *ExitError
	if !errors.As(err, &ee) || len(ee.Failed) != 2 {
		t.Fatalf("got %v", err)
	}
	if f := ee.Failed[0]; f.Rank != 0 || f.ExitCode != 1 || f.Killed {
		t.Errorf("rank 0: %+v", f)
	}
	if f := ee.Failed[1]; f.Rank != 1 || !f.Killed {
		t.Errorf("rank 1: %+v", f)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v: the hanging rank was not killed", d)
	}
}

// TestFrozenRankKilledAtOnce: after a failure, a rank stopped by a signal
// is killed without waiting for the grace period (it cannot exit by
// itself), so a job with a frozen worker ends at the peer timeout plus a
// moment.
func TestFrozenRankKilledAtOnce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stopped processes are recognised on Linux only (/proc)")
	}
	s, _, _ := spec(t, 2, "frozen-after-fail")
	s.GracePeriod = 30 * time.Second
	var log commtest.Buffer
	s.Logf = func(f string, a ...any) { fmt.Fprintf(&log, f+"\n", a...) }
	start := time.Now()
	err := Run(testCtx(t), s)
	var ee *ExitError
	if !errors.As(err, &ee) || len(ee.Failed) != 2 || !ee.Failed[1].Killed {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: the frozen rank waited for the grace period", d)
	}
	if !strings.Contains(log.String(), "killing rank 1 (stopped by a signal") {
		t.Errorf("log does not say why rank 1 was killed:\n%s", log.String())
	}
}

func TestCancelKillsAll(t *testing.T) {
	s, _, _ := spec(t, 2, "hang")
	ctx, cancel := context.WithCancel(testCtx(t))
	time.AfterFunc(300*time.Millisecond, cancel)
	if err := Run(ctx, s); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestChildrenUseStore(t *testing.T) {
	s, out, errOut := spec(t, 3, "store")
	if err := Run(testCtx(t), s); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errOut)
	}
	if got := out.String(); got != "{\"ok\":true}\n" {
		t.Errorf("stdout %q", got)
	}
}

// TestStopPreempts: closing Spec.Stop sends SIGTERM to every rank and the
// job ends as preempted, not restarted, however many restarts it may use.
func TestStopPreempts(t *testing.T) {
	s, out, errOut := spec(t, 2, "term")
	stop := make(chan struct{})
	s.Stop = stop
	s.MaxRestarts = 2
	go func() {
		for !strings.Contains(out.String(), "ready") {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // rank 1 is ready too by now
		close(stop)
	}()
	err := Run(testCtx(t), s)
	var ee *ExitError
	if !errors.As(err, &ee) || !ee.Preempted() || len(ee.Failed) != 2 || ee.Restarts != 0 {
		t.Fatalf("got %v (%+v)\nstderr:\n%s", err, ee, errOut)
	}
}

// TestRestart: a failed rank makes the launcher stop the others and start
// the job again, numbering the generation; the second generation succeeds.
func TestRestart(t *testing.T) {
	s, out, errOut := spec(t, 3, "fail-first-gen")
	s.MaxRestarts = 1
	s.GracePeriod = 100 * time.Millisecond
	if err := Run(testCtx(t), s); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errOut)
	}
	if got := out.String(); got != "generation 1 rank 0\n" {
		t.Errorf("stdout %q, want rank 0 of generation 1 only", got)
	}
}

// TestRestartsRunOut: a job that keeps failing is restarted MaxRestarts
// times, then its last failure is the error.
func TestRestartsRunOut(t *testing.T) {
	s, _, _ := spec(t, 2, "always-fail")
	s.MaxRestarts = 2
	var logs commtest.Buffer
	s.Logf = func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) }
	err := Run(testCtx(t), s)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Restarts != 2 || !strings.Contains(err.Error(), "after 2 restart") {
		t.Fatalf("got %v", err)
	}
	if n := strings.Count(logs.String(), "restarting the job"); n != 2 {
		t.Errorf("%d restarts logged:\n%s", n, logs.String())
	}
}

// TestShrinkGrow: with MinProc, a generation whose rank 2 cannot start
// runs on the 2 ranks that can, told the target world size; the next
// restart grows back to 3.
func TestShrinkGrow(t *testing.T) {
	s, out, errOut := spec(t, 3, "shrink-grow")
	t.Setenv("GDIST_FAULT_START", "0:2") // read by the launcher
	s.MinProc, s.MaxRestarts = 2, 1
	s.GracePeriod = 100 * time.Millisecond
	var logs commtest.Buffer
	s.Logf = func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) }
	if err := Run(testCtx(t), s); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errOut)
	}
	if got := out.String(); got != "generation 0: 2 of 3 ranks\ngeneration 1: 3 of 3 ranks\n" {
		t.Errorf("stdout %q", got)
	}
	if !strings.Contains(logs.String(), "1 rank(s) could not start") || !strings.Contains(logs.String(), "going on with 2 ranks") {
		t.Errorf("the shrink is not logged:\n%s", logs.String())
	}

	// Without MinProc the launch fails.
	s, _, _ = spec(t, 3, "shrink-grow")
	if err := Run(testCtx(t), s); err == nil || !strings.Contains(err.Error(), "starting rank 2") {
		t.Errorf("without MinProc: %v", err)
	}
}

// TestMultiNode: the launcher of node 1 of 2 starts global ranks 2 and 3
// with the torchrun variables of a two-node job, the shared token and no
// store of its own (rank 0, on node 0, serves it).
func TestMultiNode(t *testing.T) {
	s, _, errOut := spec(t, 2, "env")
	s.Nodes, s.NodeRank, s.MasterAddr, s.MasterPort, s.Token = 2, 1, "10.0.0.1", 29500, []byte{0xab, 0xcd}
	if err := Run(testCtx(t), s); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errOut)
	}
	for _, want := range []string{
		`[rank 2] RANK=2 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER=10.0.0.1:29500 STORE="" TOKEN=abcd`,
		`[rank 3] RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER=10.0.0.1:29500 STORE="" TOKEN=abcd`,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	for _, bad := range []func(*Spec){
		func(s *Spec) { s.Token = nil },
		func(s *Spec) { s.MasterAddr = "" },
		func(s *Spec) { s.NodeRank = 2 },
		func(s *Spec) { s.MaxRestarts = 1 },
	} {
		b := s
		bad(&b)
		if err := Run(testCtx(t), b); err == nil {
			t.Errorf("%+v accepted", b)
		}
	}
}

func TestBadSpec(t *testing.T) {
	if err := Run(testCtx(t), Spec{NProc: 0}); err == nil {
		t.Fatal("NProc 0 accepted")
	}
}
