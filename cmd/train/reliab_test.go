package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/checkpoint"
)

// TestNprocBound: an absurd -nproc is refused before anything starts
// (inproc -nproc 100000 used to grow to gigabytes).
func TestNprocBound(t *testing.T) {
	for _, backend := range []string{"inproc", "tcp", "auto"} {
		_, err := parse([]string{"-nproc", "100000", "-backend", backend, "-data", "synthetic"}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-nproc 100000") {
			t.Errorf("-backend %s -nproc 100000: %v", backend, err)
		}
	}
}

// TestLauncherValidates: settings that would make every worker fail are
// refused by the launcher, once, before any worker starts (no "[rank N]"
// lines), with one "train: " prefix.
func TestLauncherValidates(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"-nproc", "2", "-backend", "tcp", "-data", "synthetic", "-limit", "640", "-progress=false"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-bucket-mb", "-1"}, "-bucket-mb"},
		{[]string{"-bucket-mb", "NaN"}, "-bucket-mb"},
		{[]string{"-first-bucket-mb", "-2"}, "-first-bucket-mb"},
		{[]string{"-strategy", "pipeline", "-stages", "5"}, "-stages 5"},
		{[]string{"-stages", "2", "-microbatches", "2"}, "-microbatches and -stages apply to -strategy pipeline only (this run: ddp)"},
		// A flag of another strategy, given a value, is refused (once
		// -schedule and -bucket-mb were ignored, silently).
		{[]string{"-stages", "2"}, "-stages applies to -strategy pipeline only (this run: ddp)"},
		{[]string{"-schedule", "gpipe"}, "-schedule applies to -strategy pipeline only (this run: ddp)"},
		{[]string{"-strategy", "pipeline", "-bucket-mb", "5"}, "-bucket-mb applies to -strategy ddp, zero1, zero2 or zero3 only (this run: pipeline)"},
		{[]string{"-strategy", "zero2", "-compress", "fp16", "-debug"}, "-compress and -debug apply to -strategy ddp only (this run: zero2)"},
		// The pipeline's replicas (one here) each need a batch too.
		{[]string{"-strategy", "pipeline", "-limit", "32"}, "larger than the 32 samples"},
		{[]string{"-bucket-mb", "0"}, "-bucket-mb 0"},
		{[]string{"-limit", "64"}, "larger than the 64 samples"},
		{[]string{"-save", filepath.Join(dir, "missing", "ck")}, filepath.Join(dir, "missing")},
		{[]string{"-save", filepath.Join(file, "ck")}, file},
		{[]string{"-epochs", "0"}, "bad configuration"},
		{[]string{"-lr", "1e39"}, "-lr 1e+39"}, // Inf as a float32
		{[]string{"-weight-decay", "-1"}, "-weight-decay"},
	}
	for _, tc := range cases {
		_, stderr, err := trainCmd(t, append(common, tc.args...)...)
		if err == nil {
			t.Errorf("%v: exited 0", tc.args)
			continue
		}
		if !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "[rank ") || strings.Contains(stderr, "train: train:") ||
			strings.Count(stderr, "train: ") != 1 {
			t.Errorf("%v: want one message naming %q from the launcher, got:\n%s", tc.args, tc.want, stderr)
		}
	}
}

// TestCtrlC: SIGINT (Ctrl-C) to the launcher stops the job in order:
// every rank finishes its step and exits with exitPreempted, and so does
// the launcher, saying so (not "context canceled").
func TestCtrlC(t *testing.T) {
	stderr, err := signalAfterFirstEpoch(t, syscall.SIGINT, "-backend", "tcp")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitPreempted || !strings.Contains(stderr, "train: preempted") ||
		strings.Contains(stderr, "context canceled") {
		t.Fatalf("after SIGINT: %v, stderr:\n%s", err, stderr)
	}
}

// TestHandleSignals: the first signal stops; a repeat within a second
// (Slurm signals the launcher and its workers together, and the launcher
// forwards it) does not interrupt; a later one does; an orphaned worker
// stops.
func TestHandleSignals(t *testing.T) {
	sigs := make(chan os.Signal, 3)
	stop := make(chan struct{})
	done := make(chan struct{})
	cancelled := make(chan struct{})
	go handleSignals(sigs, nil, stop, func() { close(cancelled) }, done, io.Discard)
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGTERM
	select {
	case <-stop:
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not stop")
	}
	select {
	case <-cancelled:
		t.Fatal("a repeat within a second interrupted")
	case <-time.After(1100 * time.Millisecond):
	}
	sigs <- syscall.SIGINT
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("a second signal did not interrupt")
	}
	close(done)

	orphanExit = func() {} // this test process is no worker to end
	orphaned := make(chan struct{})
	stop = make(chan struct{})
	done = make(chan struct{})
	defer close(done)
	go handleSignals(make(chan os.Signal), orphaned, stop, func() {}, done, io.Discard)
	close(orphaned)
	select {
	case <-stop:
	case <-time.After(5 * time.Second):
		t.Fatal("an orphaned worker did not stop")
	}
}

// signalAfterFirstEpoch runs a 2-rank job that would train for ever (the
// test binary as cmd/train, with args added), sends sig once its first
// epoch's line is out, and returns its stderr and how it ended.
func signalAfterFirstEpoch(t *testing.T, sig os.Signal, args ...string) (stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-nproc", "2", "-data", "synthetic", "-limit", "640",
		"-batch", "16", "-epochs", "100000", "-json", "-progress=false"}, args...)...)
	cmd.Env = append(os.Environ(), "TRAIN_MAIN=1", "GORACE=atexit_sleep_ms=0")
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Training is under way once the first epoch's line is out.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("no first epoch: %v\n%s", err, errb.String())
	}
	cmd.Process.Signal(sig)
	go io.Copy(io.Discard, out)
	err = cmd.Wait()
	return errb.String(), err
}

// TestPreempt: SIGTERM to an inproc run makes every rank finish its step
// and save, and the run exit with exitPreempted.
func TestPreempt(t *testing.T) {
	save := filepath.Join(t.TempDir(), "ck")
	stderr, err := signalAfterFirstEpoch(t, syscall.SIGTERM, "-backend", "inproc", "-save", save, "-resume", "auto")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitPreempted || !strings.Contains(stderr, "preempted after step") {
		t.Fatalf("after SIGTERM: %v, stderr:\n%s", err, stderr)
	}
	if _, err := os.Stat(save); err != nil {
		t.Fatalf("no checkpoint after preemption: %v", err)
	}
}

// workersOf lists the processes whose environment names launcher as
// their GDIST_LAUNCHER_PID (its workers, orphaned or not).
func workersOf(launcher int) []int {
	ents, _ := os.ReadDir("/proc")
	want := []byte("GDIST_LAUNCHER_PID=" + strconv.Itoa(launcher) + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestLauncherKill9Saves: kill -9 of the launcher while the progress bar
// is on (the default): the workers, whose progress now goes to a pipe
// nobody reads, still finish their step, save and exit (they used to die
// of SIGPIPE writing the bar, before saving).
func TestLauncherKill9Saves(t *testing.T) {
	if testing.Short() {
		t.Skip("launches workers and waits for them")
	}
	save := filepath.Join(t.TempDir(), "run.safetensors")
	cmd := exec.Command(os.Args[0], "-nproc", "2", "-backend", "shm", "-data", "synthetic", "-limit", "6000",
		"-batch", "16", "-epochs", "100000", "-save", save)
	cmd.Env = append(os.Environ(), "TRAIN_MAIN=1", "GORACE=atexit_sleep_ms=0", stepSleepEnv+"=20ms")
	errp, err := cmd.StderrPipe()
	must(t, err)
	must(t, cmd.Start())
	defer cmd.Process.Kill()
	// Training is under way once the bar shows a step.
	r := bufio.NewReader(errp)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "epoch 1/") {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("no progress bar: %v\n%s", err, seen.String())
		}
		seen.WriteByte(b)
	}
	workers := workersOf(cmd.Process.Pid)
	if len(workers) != 2 {
		t.Fatalf("workers %v, want 2", workers)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	defer func() {
		for _, p := range workersOf(cmd.Process.Pid) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for len(workersOf(cmd.Process.Pid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("workers %v still running 90 s after the launcher died", workersOf(cmd.Process.Pid))
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts, meta, err := checkpoint.Read(save)
	if err != nil || len(ts) == 0 {
		t.Fatalf("no stop-save after kill -9 of the launcher: %v", err)
	}
	t.Logf("saved at step %s", meta["step"])
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestNaNMetricFails: an evaluation whose loss is not finite (parameters
// blown up by a huge -lr, still finite themselves) is an error: exit 1,
// the epoch's JSON line printed with null for it, and nothing saved.
func TestNaNMetricFails(t *testing.T) {
	save := filepath.Join(t.TempDir(), "run.safetensors")
	out, stderr, err := trainCmd(t, "-nproc", "1", "-data", "synthetic", "-limit", "32", "-batch", "32", "-epochs", "1",
		"-lr", "1e20", "-json", "-progress=false", "-save", save)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want 1\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	if !strings.Contains(stderr, "eval_loss") || !strings.Contains(stderr, "not finite") {
		t.Errorf("stderr does not name the metric:\n%s", stderr)
	}
	var ev map[string]any
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil || ev["event"] != "epoch" {
		t.Fatalf("first line is no epoch event (%v):\n%s", err, out)
	}
	if v, ok := ev["eval_loss"]; !ok || v != nil {
		t.Errorf("eval_loss %v (present %v), want null:\n%s", v, ok, out)
	}
	if _, err := os.Stat(save); err == nil {
		t.Errorf("a checkpoint was saved after a non-finite evaluation")
	}
	t.Logf("stdout: %sstderr: %s", out, stderr)
}

// TestCorruptCheckpointRefused: resuming from a checkpoint whose tensor
// data changed after it was written (one flipped bit) fails, naming the
// checksum, instead of training on the damaged values.
func TestCorruptCheckpointRefused(t *testing.T) {
	save := filepath.Join(t.TempDir(), "run.safetensors")
	common := []string{"-nproc", "1", "-data", "synthetic", "-limit", "64", "-batch", "32", "-epochs", "1", "-json", "-progress=false"}
	if _, stderr, err := trainCmd(t, append(common, "-save", save)...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	raw, err := os.ReadFile(save)
	must(t, err)
	raw[len(raw)-100] ^= 0x40
	must(t, os.WriteFile(save, raw, 0o644))
	_, stderr, err := trainCmd(t, append(common, "-resume", save, "-epochs", "2")...)
	if err == nil || !strings.Contains(stderr, "checksum") || !strings.Contains(stderr, save) {
		t.Fatalf("resuming a damaged checkpoint: %v\n%s", err, stderr)
	}
	t.Log(stderr)
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestTwoJobsOnOnePort: the repro. Two token-less jobs started by
// hand (torchrun's variables) on one MASTER_PORT: job A's rank 0 serves
// the store; job B's rank 0 cannot bind it; job B's rank 1 (another
// -seed) is refused at the door, naming both jobs; job A's rank 1 then
// joins, and job A ends as an honest run does.
func TestTwoJobsOnOnePort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five trainings")
	}
	port := freePort(t)
	common := []string{"-data", "synthetic", "-limit", "640", "-epochs", "1", "-batch", "16", "-json", "-progress=false", "-seed", "7"}
	start := func(rank int, extra ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], append(append([]string{}, common...), extra...)...)
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GDIST_") && !strings.HasPrefix(kv, "TORCHELASTIC_") && !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "OMPI_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, "TRAIN_MAIN=1", "GORACE=atexit_sleep_ms=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port), "RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(rank), "GDIST_JOIN_TIMEOUT=60s")
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		must(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, &o, &e
	}
	a0, a0out, a0err := start(0)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job A's rank 0 serves no store:\n%s", a0err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b0, _, b0err := start(0, "-seed", "99")
	if err := b0.Wait(); err == nil {
		t.Errorf("job B's rank 0 on a port in use exited 0:\n%s", b0err)
	}
	b1, _, b1err := start(1, "-seed", "99")
	done := make(chan error, 1)
	go func() { done <- b1.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(b1err.String(), "job id") {
			t.Errorf("job B's rank 1: %v, want a refusal naming the job ids:\n%s", err, b1err)
		}
		t.Logf("job B's rank 1: %s", b1err)
	case <-time.After(60 * time.Second):
		t.Fatalf("job B's rank 1 was not refused within 60 s (it joined job A?):\n%s", b1err)
	}
	a1, _, a1err := start(1)
	if err := a0.Wait(); err != nil {
		t.Fatalf("job A's rank 0: %v\n%s", err, a0err)
	}
	if err := a1.Wait(); err != nil {
		t.Fatalf("job A's rank 1: %v\n%s", err, a1err)
	}
	honest, stderr, err := trainCmd(t, append([]string{"-nproc", "2", "-backend", "shm"}, common...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if got, want := summary(t, a0out.String()).EvalLoss, summary(t, honest).EvalLoss; math.Abs(got-want) > 1e-5 {
		t.Errorf("job A's eval loss %v, an honest run's %v", got, want)
	}
}

// TestFlagChecks: issue 25 items 6 and 9. -nnodes 2 -nproc 1 keeps the
// default backend (auto), not inproc behind the user's back; settings
// that would do nothing are refused, saying why: -keep 0 (the latest
// checkpoint is always kept), -keep without -save, -min-nproc without
// -max-restarts.
func TestFlagChecks(t *testing.T) {
	o, err := parse([]string{"-nnodes", "2", "-node-rank", "0", "-nproc", "1", "-master-addr", "127.0.0.1", "-data", "synthetic"}, io.Discard)
	if err != nil || o.backend != "auto" {
		t.Errorf("-nnodes 2 -nproc 1: backend %q, %v; want auto and no error", o.backend, err)
	}
	_, err = parse([]string{"-nnodes", "2", "-node-rank", "0", "-nproc", "1", "-master-addr", "127.0.0.1", "-backend", "inproc", "-data", "synthetic"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-backend inproc") || !strings.Contains(err.Error(), "processes") {
		t.Errorf("-nnodes 2 -backend inproc: %v", err)
	}
	save := filepath.Join(t.TempDir(), "ck")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-keep", "0", "-save", save}, "-keep 0"},
		{[]string{"-keep", "3"}, "-keep 3 needs -save"},
		{[]string{"-min-nproc", "1", "-save", save}, "-min-nproc 1 needs -max-restarts"},
	} {
		_, err := parse(append(tc.args, "-data", "synthetic"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	if _, err := parse([]string{"-keep", "2", "-save", save, "-min-nproc", "1", "-max-restarts", "1", "-data", "synthetic"}, io.Discard); err != nil {
		t.Errorf("valid -keep and -min-nproc: %v", err)
	}
}
