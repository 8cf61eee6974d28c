package auto_test // external: package launch imports auto

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/auto"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/launch"
)

// The test binary doubles as a worker: GDIST_AUTO_TEST_CHILD=1 makes it a
// rank of a job started by the launcher, on fake host "host<RANK%2>", that
// all-reduces over the auto backend until something fails; it leaves its
// pid in GDIST_AUTO_TEST_DIR.
const (
	childEnv    = "GDIST_AUTO_TEST_CHILD"
	childDirEnv = "GDIST_AUTO_TEST_DIR"
)

func TestMain(m *testing.M) {
	// These tests are about the host transports: on a machine with GPUs
	// (or CUDA_VISIBLE_DEVICES naming one for every process) the auto
	// backend would pick NCCL instead. comm/nccl's TestAutoPicksNCCL tests
	// that choice.
	os.Setenv(auto.EnvNCCL, "0")
	if os.Getenv(childEnv) == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	os.Setenv("GDIST_HOST_ID", fmt.Sprintf("host%d", rank%2))
	c, closeFn, err := rendezvous.InitComm(ctx, "auto", comm.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 2
	}
	os.WriteFile(filepath.Join(os.Getenv(childDirEnv), fmt.Sprintf("rank%d.pid", rank)), []byte(strconv.Itoa(os.Getpid())), 0o600)
	buf := make([]float32, 64<<10)
	for ctx.Err() == nil {
		if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(buf), comm.Sum)); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d failed: %v\n", rank, err)
			closeFn()
			return 1
		}
	}
	closeFn()
	return 0
}

// syncBuf is a bytes.Buffer safe for concurrent writers.
type syncBuf = commtest.Buffer

// TestKillRank: a mixed job of three processes (ranks 0 and 2 on one fake
// host, rank 1 on another) all-reduces; one rank is killed with SIGKILL.
// The others fail on their own, quickly, naming it: rank 1 is reached over
// TCP by both; rank 2 over shared memory by rank 0 and over TCP by rank 1.
func TestKillRank(t *testing.T) {
	for _, victim := range []int{1, 2} {
		t.Run(fmt.Sprintf("rank%d", victim), func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out syncBuf
			done := make(chan error, 1)
			go func() {
				done <- launch.Run(ctx, launch.Spec{
					NProc: 3,
					Args:  []string{os.Args[0], "-test.run=^$"},
					Env: []string{childEnv + "=1", childDirEnv + "=" + dir, "GDIST_SHM_DIR=" + dir,
						"GORACE=atexit_sleep_ms=0"},
					Stdout: &out, Stderr: &out, GracePeriod: time.Minute,
					Logf: func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) },
				})
			}()
			pid := 0
			deadline := time.Now().Add(time.Minute)
			for {
				n := 0
				for r := range 3 {
					if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.pid", r))); err == nil && len(b) > 0 {
						n++
						if r == victim {
							pid, _ = strconv.Atoi(string(b))
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
				if time.Now().After(deadline) {
					t.Fatalf("workers did not start; output:\n%s", out.String())
				}
			}
			time.Sleep(300 * time.Millisecond)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			err := <-done
			took := time.Since(killed)
			text := out.String()
			var ee *launch.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("launch: %v, want an ExitError; output:\n%s", err, text)
			}
			if strings.Contains(text, "killed by the launcher") {
				t.Fatalf("survivors had to be killed by the launcher:\n%s", text)
			}
			for r := range 3 {
				if r == victim {
					continue
				}
				re := regexp.MustCompile(fmt.Sprintf(`\[rank %d\] rank %d failed: .*rank %d\b`, r, r, victim))
				if !re.MatchString(text) {
					t.Errorf("rank %d's error does not name rank %d; output:\n%s", r, victim, text)
				}
			}
			if took > 5*time.Second {
				t.Errorf("the job took %v to fail after the kill", took)
			}
			t.Logf("failed %v after the kill:\n%s", took, text)
		})
	}
}
