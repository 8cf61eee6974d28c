//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/rendezvous"
)

// The test binary doubles as a worker: GDIST_SHM_TEST_CHILD selects what
// it does instead of running the tests, GDIST_SHM_TEST_DIR where it leaves
// its pid.
const (
	childEnv    = "GDIST_SHM_TEST_CHILD"
	childDirEnv = "GDIST_SHM_TEST_DIR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

func child(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := os.Getenv(childDirEnv)
	switch mode {
	case "allreduce-loop", "allreduce-loop-alloc":
		// A rank of a job started by the launcher: all-reduce until
		// something fails (with -alloc, 1 MiB from comm.Alloc: the
		// zero-copy path).
		c, closeFn, err := rendezvous.InitComm(ctx, "shm", comm.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "init:", err)
			return 2
		}
		pidFile := filepath.Join(dir, fmt.Sprintf("rank%d.pid", c.Rank()))
		os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o600)
		buf := comm.FromSlice(make([]float32, 64<<10))
		if mode == "allreduce-loop-alloc" {
			b, free, err := comm.Alloc(c, comm.Float32, 256<<10)
			if err != nil {
				fmt.Fprintln(os.Stderr, "alloc:", err)
				return 2
			}
			defer free()
			buf = b
		}
		for ctx.Err() == nil {
			if err := comm.Run(ctx)(c.AllReduce(ctx, buf, comm.Sum)); err != nil {
				fmt.Fprintf(os.Stderr, "rank %d failed: %v\n", c.Rank(), err)
				closeFn()
				return 1
			}
		}
		closeFn()
		return 0
	case "echo":
		return echo()
	case "leader-crash":
		// Rank 0 of a job whose rank 1 never comes: it creates the
		// segment and waits until it is killed.
		_, err := NewWithOptions(ctx, comm.Config{Rank: 0, Size: 2, Store: rendezvous.NewMemStore(), Token: token, Job: "crash"},
			Options{Dir: dir})
		fmt.Fprintln(os.Stderr, "leader returned:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 2
}

// syncBuf is a bytes.Buffer safe for concurrent writers.
type syncBuf = commtest.Buffer

// TestKillRank: three worker processes all-reduce over shm; rank 1 is
// killed with SIGKILL. The other two must fail on their own (not be killed
// by the launcher), quickly, with an error naming rank 1 as lost.
// TestKillRank: SIGKILL one rank of three processes in the middle of a
// loop of all-reduces (ordinary buffers, and buffers from comm.Alloc: the
// zero-copy path); the others fail naming it, within seconds.
func TestKillRank(t *testing.T) {
	for _, mode := range []string{"allreduce-loop", "allreduce-loop-alloc"} {
		t.Run(mode, func(t *testing.T) { killRank(t, mode) })
	}
}

func killRank(t *testing.T, mode string) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncBuf
	done := make(chan error, 1)
	go func() {
		done <- launchRun(ctx, 3, []string{os.Args[0], "-test.run=^$"},
			[]string{childEnv + "=" + mode, childDirEnv + "=" + dir, "GDIST_SHM_DIR=" + dir, "GORACE=atexit_sleep_ms=0"}, &out)
	}()
	var victim int
	waitForPids := time.Now().Add(time.Minute)
	for {
		n := 0
		for r := range 3 {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.pid", r)))
			if err == nil && len(b) > 0 {
				n++
				if r == 1 {
					victim, _ = strconv.Atoi(string(b))
				}
			}
		}
		if n == 3 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("workers ended before all started: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(waitForPids) {
			t.Fatalf("workers did not start; output:\n%s", out.String())
		}
	}
	time.Sleep(300 * time.Millisecond) // well inside the all-reduce loop
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	err := <-done
	took := time.Since(killed)
	text := out.String()
	if !isExitError(err) {
		t.Fatalf("launch: %v, want an ExitError; output:\n%s", err, text)
	}
	if strings.Contains(text, "killed by the launcher") {
		t.Fatalf("survivors had to be killed by the launcher:\n%s", text)
	}
	for _, r := range []string{"0", "2"} {
		re := regexp.MustCompile(`\[rank ` + r + `\] rank ` + r + ` failed: .*rank 1\b`)
		if !re.MatchString(text) {
			t.Errorf("rank %s's error does not name rank 1; output:\n%s", r, text)
		}
	}
	if !strings.Contains(text, "peer lost") {
		t.Errorf("no rank reports a lost peer; output:\n%s", text)
	}
	// The pid check runs every 100 ms; allow for a loaded machine.
	if took > 5*time.Second {
		t.Errorf("the job took %v to fail after the kill", took)
	}
	t.Logf("failed %v after the kill", took)
	if f := segFiles(t, dir); len(f) != 0 {
		t.Errorf("segment files left: %v", f)
	}
}

// TestCrashCleanup: a rank that creates the segment and is killed before
// the others attach leaves the file behind; the next job to start in that
// directory removes it.
func TestCrashCleanup(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=leader-crash", childDirEnv+"="+dir, "GORACE=atexit_sleep_ms=0")
	var out syncBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crashing leader's segment", func() bool { return len(segFiles(t, dir)) == 1 })
	stale := segFiles(t, dir)[0]
	// A file of a live process is left alone.
	if removed := sweep(dir, t.Logf); len(removed) != 0 {
		t.Fatalf("sweep removed %v while its creator runs", removed)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("the killed leader's segment is already gone: %v", err)
	}

	w := mkWorld(t, 2, comm.Options{}, Options{Dir: dir})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale segment %s not removed: %v", stale, err)
	}
	if !strings.Contains(w.logs[0].String(), "removed stale segment "+stale) {
		t.Errorf("removal not logged:\n%s", w.logs[0])
	}
	if f := segFiles(t, dir); len(f) != 0 {
		t.Errorf("segment files left: %v", f)
	}
	// A file without a valid header is removed only once it is old.
	junk := filepath.Join(dir, namePrefix+"junk")
	if err := os.WriteFile(junk, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if removed := sweep(dir, t.Logf); len(removed) != 0 {
		t.Fatalf("sweep removed a fresh file: %v", removed)
	}
	old := time.Now().Add(-2 * staleAge)
	os.Chtimes(junk, old, old)
	if removed := sweep(dir, t.Logf); len(removed) != 1 {
		t.Fatalf("sweep removed %v, want the old junk file", removed)
	}
}

// TestDevShmCleanup: with the default directory the segment lives in
// /dev/shm and is unlinked as soon as every rank has mapped it.
func TestDevShmCleanup(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", "")
	w := newWorld(t, 2)
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() { w.ts[r], errs[r] = New(ctx, w.config(r, 2, comm.Options{})) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	path := w.ts[0].path
	if filepath.Dir(path) != DefaultDir {
		t.Fatalf("segment %s not in %s", path, DefaultDir)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment %s still linked after setup: %v", path, err)
	}
	// It still works, unlinked.
	if err := w.ts[0].Send(ctx, 1, coll(0, 1), []byte{5}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1)
	if err := w.ts[1].Recv(ctx, 0, coll(0, 1), got); err != nil || got[0] != 5 {
		t.Fatal(got, err)
	}
}
