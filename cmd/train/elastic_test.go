package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gdist/gdist/comm/commtest"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/train"
)

// job is a train command running in the background (the test binary as
// cmd/train).
type job struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr commtest.Buffer
	done   chan error
}

func startJob(t *testing.T, args ...string) *job {
	t.Helper()
	j := &job{done: make(chan error, 1)}
	j.cmd = exec.Command(os.Args[0], args...)
	j.cmd.Env = append(os.Environ(), "TRAIN_MAIN=1", "GORACE=atexit_sleep_ms=0")
	j.cmd.Stdout = &j.stdout
	j.cmd.Stderr = &j.stderr
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.done <- j.cmd.Wait() }()
	t.Cleanup(func() {
		j.cmd.Process.Kill()
		for _, p := range descendants(j.cmd.Process.Pid) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	return j
}

// wait waits up to d for the job to end.
func (j *job) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-j.done:
		return err
	case <-time.After(d):
		t.Fatalf("still running after %v; stderr:\n%s", d, j.stderr.String())
		return nil
	}
}

// summary is the job's last JSON line.
func (j *job) summary(t *testing.T) train.Summary {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(j.stdout.String()), "\n")
	var s train.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || s.Event != "summary" {
		t.Fatalf("no summary (%v) in:\n%s\nstderr:\n%s", err, j.stdout.String(), j.stderr.String())
	}
	return s
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; parse after ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, p)
			}
		}
	}
	return out
}

// descendants lists pid's children, grandchildren, ...
func descendants(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// reached is the step rank 0 last completed, from the progress file of
// the checkpoint at save.
func reached(save string) int64 {
	b, err := os.ReadFile(save + ".progress")
	if err != nil {
		return -1
	}
	var step int64
	fmt.Sscan(string(b), &step)
	return step
}

// waitReached waits until the job's rank 0 completed step.
func (j *job) waitReached(t *testing.T, save string, step int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for reached(save) < step {
		select {
		case err := <-j.done:
			t.Fatalf("ended (%v) before step %d; stderr:\n%s", err, step, j.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("step %d not reached; stderr:\n%s", step, j.stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killWorker kills the job's worker i (kill -9) once its first
// checkpoint committed (saves are written in the background) and rank 0
// ran step 30, then waits for the job to succeed.
func (j *job) killWorker(t *testing.T, save string, i int) {
	t.Helper()
	j.waitSaved(t, save)
	j.waitReached(t, save, 30)
	workers := children(j.cmd.Process.Pid)
	if len(workers) != 3 {
		t.Fatalf("workers %v", workers)
	}
	syscall.Kill(workers[i], syscall.SIGKILL)
	if err := j.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("%v; stderr:\n%s", err, j.stderr.String())
	}
}

// waitSaved waits until the job saved its first checkpoint at save.
func (j *job) waitSaved(t *testing.T, save string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(save); err == nil {
			return
		}
		select {
		case err := <-j.done:
			t.Fatalf("ended (%v) before saving; stderr:\n%s", err, j.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing saved; stderr:\n%s", j.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameCheckpoints fails unless the model files at a and b hold the same
// tensors within rel (relative to the tensor's largest magnitude).
func sameCheckpoints(t *testing.T, a, b string, rel float64) {
	t.Helper()
	ta, _, err := checkpoint.Read(a)
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := checkpoint.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ta) != len(tb) || len(ta) == 0 {
		t.Fatalf("%d vs %d tensors", len(ta), len(tb))
	}
	for name, x := range ta {
		y, ok := tb[name]
		if !ok {
			t.Fatalf("%s missing in %s", name, b)
		}
		xs, err1 := x.Float64s()
		ys, err2 := y.Float64s()
		if err1 != nil || err2 != nil {
			continue // integer buffers
		}
		var scale, diff float64
		for i := range xs {
			scale = math.Max(scale, math.Abs(xs[i]))
			diff = math.Max(diff, math.Abs(xs[i]-ys[i]))
		}
		if diff > rel*math.Max(scale, 1e-12) {
			t.Errorf("%s: max difference %g (scale %g)", name, diff, scale)
		}
	}
}

// combo is a backend and a strategy.
type combo struct{ backend, strategy string }

// combos are the strategies and backends every elastic case runs with.
var combos = []combo{{"shm", "ddp"}, {"tcp", "ddp"}, {"shm", "zero3"}, {"tcp", "zero3"}}

// eachCombo runs f as a subtest per combo, unless -short (why says what
// makes it long).
func eachCombo(t *testing.T, why string, f func(t *testing.T, c combo)) {
	if testing.Short() {
		t.Skip(why)
	}
	for _, c := range combos {
		t.Run(c.backend+"-"+c.strategy, func(t *testing.T) { f(t, c) })
	}
}

// elasticArgs is a 3-rank job of 124 steps that saves every 20.
func elasticArgs(save, backend, strategy string) []string {
	return []string{"-nproc", "3", "-backend", backend, "-strategy", strategy, "-data", "synthetic", "-limit", "3000",
		"-batch", "16", "-epochs", "2", "-json", "-progress=false", "-seed", "3", "-save", save, "-save-every", "20"}
}

// TestRestartAfterKill: kill -9 of one worker mid-epoch under
// -max-restarts: the job completes (exit 0), recomputes the steps after
// the last checkpoint, and ends with the parameters of an uninterrupted
// run.
func TestRestartAfterKill(t *testing.T) {
	eachCombo(t, "trains 3 ranks twice", func(t *testing.T, c combo) {
		dir := t.TempDir()
		ref := filepath.Join(dir, "ref.safetensors")
		if err := startJob(t, elasticArgs(ref, c.backend, c.strategy)...).wait(t, 3*time.Minute); err != nil {
			t.Fatalf("uninterrupted run: %v", err)
		}
		save := filepath.Join(dir, "run.safetensors")
		t.Setenv(stepSleepEnv, "10ms") // the kill lands at step 30, ten after the first save
		j := startJob(t, append(elasticArgs(save, c.backend, c.strategy), "-max-restarts", "2")...)
		j.killWorker(t, save, 1)
		s := j.summary(t)
		// Saves every 20 steps, each committed a few steps later.
		if s.Restarts != 1 || s.StepsRecomputed < 1 || s.StepsRecomputed > 60 || s.ResumedStep < 20 {
			t.Errorf("restarts %d, steps recomputed %d, resumed at step %d: want 1, 1..60, >= 20", s.Restarts, s.StepsRecomputed, s.ResumedStep)
		}
		if !strings.Contains(j.stderr.String(), "restarting the job (restart 1 of 2)") {
			t.Errorf("no restart logged:\n%s", j.stderr.String())
		}
		sameCheckpoints(t, ref, save, 1e-5)
	})
}

// TestShrink: a worker dies and, at the restart, one rank cannot start
// again (GDIST_FAULT_START): with -min-nproc 2 the job finishes on 2 ranks
// with the global batch kept, equal to a run that switched from 3 ranks to
// 2 at the same step.
func TestShrink(t *testing.T) {
	eachCombo(t, "trains 3 ranks twice", func(t *testing.T, c combo) {
		dir := t.TempDir()
		save := filepath.Join(dir, "run.safetensors")
		t.Setenv("GDIST_FAULT_START", "1:2") // rank 2 of the first restart
		t.Setenv(stepSleepEnv, "10ms")
		j := startJob(t, append(elasticArgs(save, c.backend, c.strategy), "-max-restarts", "2", "-min-nproc", "2")...)
		j.killWorker(t, save, 0)
		os.Unsetenv("GDIST_FAULT_START")
		os.Unsetenv(stepSleepEnv)
		s := j.summary(t)
		if s.WorldSize != 2 || s.GlobalBatch != 48 || s.Restarts != 1 || s.ResumedStep < 20 {
			t.Fatalf("world %d, global batch %d, restarts %d, resumed at %d: want 2, 48, 1, >= 20", s.WorldSize, s.GlobalBatch, s.Restarts, s.ResumedStep)
		}
		for _, want := range []string{"going on with 2 ranks", "batch 24 per rank keeps the global batch 48"} {
			if !strings.Contains(j.stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, j.stderr.String())
			}
		}

		// The reference: 3 ranks up to that step, then 2 at batch 24.
		ref := filepath.Join(dir, "ref.safetensors")
		args := elasticArgs(ref, c.backend, c.strategy)
		if err := startJob(t, append(args, "-max-steps", strconv.FormatInt(s.ResumedStep, 10))...).wait(t, 3*time.Minute); err != nil {
			t.Fatalf("reference, 3 ranks: %v", err)
		}
		args[1], args[11] = "2", "24" // -nproc, -batch
		if err := startJob(t, append(args, "-resume", ref)...).wait(t, 3*time.Minute); err != nil {
			t.Fatalf("reference, 2 ranks: %v", err)
		}
		sameCheckpoints(t, ref, save, 1e-5)
	})
}

// TestPreemptLauncher: SIGTERM mid-epoch, to the launcher (shm) or to one
// worker (tcp), stops every rank after its step, with a checkpoint, within
// 30 s, and the job with exit code 75; the same command with -resume auto
// then finishes the job, equal to an uninterrupted run.
func TestPreemptLauncher(t *testing.T) {
	eachCombo(t, "trains 3 ranks twice", func(t *testing.T, c combo) {
		dir := t.TempDir()
		ref := filepath.Join(dir, "ref.safetensors")
		if err := startJob(t, elasticArgs(ref, c.backend, c.strategy)...).wait(t, 3*time.Minute); err != nil {
			t.Fatalf("uninterrupted run: %v", err)
		}
		save := filepath.Join(dir, "run.safetensors")
		args := append(elasticArgs(save, c.backend, c.strategy), "-resume", "auto")
		j := startJob(t, args...)
		j.waitSaved(t, save)
		if c.backend == "shm" {
			j.cmd.Process.Signal(syscall.SIGTERM)
		} else {
			workers := children(j.cmd.Process.Pid)
			if len(workers) != 3 {
				t.Fatalf("workers %v", workers)
			}
			syscall.Kill(workers[2], syscall.SIGTERM)
		}
		t0 := time.Now()
		err := j.wait(t, 30*time.Second)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitPreempted {
			t.Fatalf("after SIGTERM: %v; stderr:\n%s", err, j.stderr.String())
		}
		t.Logf("stopped %v after SIGTERM", time.Since(t0))
		if strings.Count(j.stderr.String(), "preempted after step") != 3 {
			t.Errorf("want every rank to say it was preempted:\n%s", j.stderr.String())
		}
		j = startJob(t, args...)
		if err := j.wait(t, 3*time.Minute); err != nil {
			t.Fatalf("resumed run: %v; stderr:\n%s", err, j.stderr.String())
		}
		sameCheckpoints(t, ref, save, 1e-5)
	})
}

// TestLauncherKilled: kill -9 of the launcher leaves no worker running
// (they notice and exit); checked by PID.
func TestLauncherKilled(t *testing.T) {
	eachCombo(t, "waits for workers to exit", func(t *testing.T, c combo) {
		save := filepath.Join(t.TempDir(), "run.safetensors")
		// No output at all: the workers never write to a closed pipe.
		j := startJob(t, "-nproc", "2", "-backend", c.backend, "-strategy", c.strategy, "-data", "synthetic", "-limit", "6000", "-batch", "16",
			"-epochs", "1000", "-progress=false", "-save", save, "-save-every", "5")
		j.waitSaved(t, save)
		workers := children(j.cmd.Process.Pid)
		if len(workers) != 2 {
			t.Fatalf("workers %v", workers)
		}
		j.cmd.Process.Kill()
		j.wait(t, 10*time.Second)
		deadline := time.Now().Add(60 * time.Second)
		for {
			var left []int
			for _, p := range workers {
				if alive(p) {
					left = append(left, p)
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("workers %v still running 60 s after the launcher was killed", left)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestFrozenWorker: a worker stopped with SIGSTOP is named by its peers
// at the peer timeout, and the launcher ends the job a few seconds later
// (it kills the stopped rank without waiting for its grace period).
func TestFrozenWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the peer timeout")
	}
	for _, c := range []combo{{"tcp", "ddp"}, {"shm", "zero3"}} {
		t.Run(c.backend+"-"+c.strategy, func(t *testing.T) {
			save := filepath.Join(t.TempDir(), "run.safetensors")
			j := startJob(t, "-nproc", "2", "-backend", c.backend, "-strategy", c.strategy, "-data", "synthetic", "-limit", "6000", "-batch", "16",
				"-epochs", "1000", "-progress=false", "-save", save, "-save-every", "5", "-peer-timeout", "3s")
			j.waitSaved(t, save)
			workers := children(j.cmd.Process.Pid)
			if len(workers) != 2 {
				t.Fatalf("workers %v", workers)
			}
			syscall.Kill(workers[1], syscall.SIGSTOP)
			defer syscall.Kill(workers[1], syscall.SIGKILL)
			t0 := time.Now()
			err := j.wait(t, 40*time.Second)
			took := time.Since(t0)
			if err == nil {
				t.Fatal("exit 0 with a frozen worker")
			}
			// The launcher kills a stopped rank at once after the failure
			// instead of waiting for its grace period.
			if took > 3*time.Second+5*time.Second {
				t.Errorf("ended %v after the freeze: want the peer timeout (3 s) plus a few seconds", took)
			}
			if !strings.Contains(j.stderr.String(), "rank 1") {
				t.Errorf("rank 1 not named:\n%s", j.stderr.String())
			}
			t.Logf("ended %v after the freeze", took)
		})
	}
}
