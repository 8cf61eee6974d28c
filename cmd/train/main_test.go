package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/pp"
)

// stepSleepEnv, set to a duration, makes every step of a test's train
// workers that much longer: a test that kills a worker at a step then
// lands there, not some steps later.
const stepSleepEnv = "GDIST_TEST_STEP_SLEEP"

// The test binary doubles as the train command (TRAIN_MAIN=1), so the
// launcher's workers, re-executions of the same binary, are train too.
func TestMain(m *testing.M) {
	if os.Getenv("TRAIN_MAIN") == "1" {
		var args []string
		for _, a := range os.Args[1:] {
			if !strings.HasPrefix(a, "-test.") {
				args = append(args, a)
			}
		}
		os.Args = append(os.Args[:1], args...)
		if d, err := time.ParseDuration(os.Getenv(stepSleepEnv)); err == nil {
			testAfterStep = func(int, int64) { time.Sleep(d) }
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func trainCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TRAIN_MAIN=1", "GORACE=atexit_sleep_ms=0")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func summary(t *testing.T, out string) train.Summary {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s train.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || s.Event != "summary" {
		t.Fatalf("last line is not a summary (%v):\n%s", err, out)
	}
	return s
}

// TestProcessesMatchOneRank: two worker processes over tcp at batch 16 end
// with the eval loss of one rank at batch 32 (same seed, limit, SGD).
func TestProcessesMatchOneRank(t *testing.T) {
	common := []string{"-data", "synthetic", "-limit", "960", "-epochs", "2", "-seed", "5", "-json", "-progress=false"}
	out2, err2, err := trainCmd(t, append([]string{"-nproc", "2", "-backend", "tcp", "-batch", "16"}, common...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, err2)
	}
	out1, err1, err := trainCmd(t, append([]string{"-nproc", "1", "-batch", "32"}, common...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, err1)
	}
	s2, s1 := summary(t, out2), summary(t, out1)
	if s2.WorldSize != 2 || s2.Backend != "tcp" || s1.WorldSize != 1 {
		t.Fatalf("summaries: %+v / %+v", s2, s1)
	}
	if d := math.Abs(s2.EvalLoss - s1.EvalLoss); d > 1e-4 {
		t.Fatalf("eval loss %v (2 ranks x 16) vs %v (1 rank x 32): differ by %v", s2.EvalLoss, s1.EvalLoss, d)
	}
	if s2.Steps != s1.Steps || s2.GlobalBatch != 32 {
		t.Fatalf("steps %d vs %d, global batch %d", s2.Steps, s1.Steps, s2.GlobalBatch)
	}
}

// TestBLASThreads: each rank's OpenBLAS thread count is cores / local
// ranks by default (workers launched as processes, and ranks as
// goroutines of one process), -blas-threads overrides it, and the summary
// says which.
func TestBLASThreads(t *testing.T) {
	if nn.BLAS != "openblas" {
		t.Skip("built without OpenBLAS")
	}
	for _, k := range nn.BLASThreadEnv {
		t.Setenv(k, "") // unset for the children: ChooseBLASThreads skips empty values
	}
	common := []string{"-data", "synthetic", "-limit", "256", "-epochs", "1", "-batch", "16", "-json", "-progress=false"}
	for _, tc := range []struct {
		args []string
		want int
		from string
	}{
		{[]string{"-nproc", "2", "-backend", "shm"}, max(1, runtime.NumCPU()/2), "default"},
		{[]string{"-nproc", "3", "-backend", "inproc"}, max(1, runtime.NumCPU()/3), "default"},
		{[]string{"-nproc", "2", "-backend", "shm", "-blas-threads", "3"}, 3, "-blas-threads"},
	} {
		out, stderr, err := trainCmd(t, append(tc.args, common...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, stderr)
		}
		if s := summary(t, out); s.BLASThreads != tc.want || s.BLASThreadsFrom != tc.from {
			t.Errorf("%v: blas_threads %d from %q, want %d from %q", tc.args, s.BLASThreads, s.BLASThreadsFrom, tc.want, tc.from)
		}
	}
	t.Setenv("OPENBLAS_NUM_THREADS", "1")
	out, stderr, err := trainCmd(t, append([]string{"-nproc", "2", "-backend", "shm"}, common...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if s := summary(t, out); s.BLASThreads != 1 || s.BLASThreadsFrom != "OPENBLAS_NUM_THREADS" {
		t.Errorf("OPENBLAS_NUM_THREADS=1: blas_threads %d from %q", s.BLASThreads, s.BLASThreadsFrom)
	}
}

// TestSharedMemorySummary: on shm the summary says the gradients lie in
// shared memory (zero-copy all-reduces) and, when the area has no room
// for them, says why not instead of falling back in silence.
func TestSharedMemorySummary(t *testing.T) {
	args := []string{"-nproc", "2", "-backend", "shm", "-data", "synthetic", "-limit", "256", "-epochs", "1", "-batch", "16", "-json", "-progress=false"}
	out, stderr, err := trainCmd(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if s := summary(t, out); !s.SharedMemory || s.SharedMemoryNote != "" {
		t.Errorf("shm: shared_memory %v, note %q; want true and none", s.SharedMemory, s.SharedMemoryNote)
	}
	t.Setenv("GDIST_SHM_AREA_BYTES", "131072")
	out, stderr, err = trainCmd(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if s := summary(t, out); s.SharedMemory || !strings.Contains(s.SharedMemoryNote, "GDIST_SHM_AREA_BYTES") {
		t.Errorf("shm, 128 KiB area: shared_memory %v, note %q; want false and a note naming GDIST_SHM_AREA_BYTES", s.SharedMemory, s.SharedMemoryNote)
	}
}

func TestBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-nproc", "0"}, "-nproc 0"},
		{[]string{"-blas-threads", "-1"}, "-blas-threads -1"},
		{[]string{"-backend", "carrier-pigeon"}, "carrier-pigeon"},
		{[]string{"-data", "/nonexistent/fmnist", "-nproc", "2"}, "/nonexistent/fmnist"},
		{[]string{"-data", "synthetic", "-limit", "100", "-batch", "64", "-nproc", "2"}, "larger than"},
		{[]string{"-model", "transformer"}, "transformer"},
		{[]string{"-resume", "/nonexistent/ckpt", "-data", "synthetic"}, "/nonexistent/ckpt"},
	}
	for _, tc := range cases {
		_, stderr, err := trainCmd(t, tc.args...)
		if err == nil {
			t.Errorf("%v: exited 0", tc.args)
			continue
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: stderr does not mention %q:\n%s", tc.args, tc.want, stderr)
		}
	}
}

// TestMPIRun: two train workers started by Open MPI's mpirun find each
// other through OMPI_COMM_WORLD_* and train together.
func TestMPIRun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (Debian: apt-get install openmpi-bin); .ci/run installs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
		"-x", "TRAIN_MAIN=1", "-x", "GDIST_TOKEN=train-mpirun-test",
		os.Args[0], "-data", "synthetic", "-limit", "640", "-epochs", "1", "-batch", "16", "-json", "-progress=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, stderr.String())
	}
	s := summary(t, string(out))
	if s.WorldSize != 2 || s.Backend != "auto" { // -backend auto (the default): shm on one host
		t.Fatalf("summary %+v", s)
	}
}

// -cpuprofile writes the launcher's profile at the path and each launched
// worker's beside it as <path>.rank<RANK>.
func TestCPUProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("launches workers")
	}
	p := t.TempDir() + "/cpu.prof"
	_, stderr, err := trainCmd(t, "-nproc", "2", "-backend", "shm", "-data", "synthetic", "-limit", "256", "-epochs", "1", "-batch", "16", "-json", "-progress=false", "-cpuprofile", p)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, f := range []string{p, p + ".rank0", p + ".rank1"} {
		if st, err := os.Stat(f); err != nil {
			t.Error(err)
		} else if st.Size() == 0 {
			t.Errorf("%s: empty", f)
		}
	}
}

// TestKeepGlobalBatch: a generation on fewer (or more) ranks than the job
// was launched on keeps the global batch over the model's replicas, as
// the strategy counts them: every rank for DDP, every -stages ranks for a
// pipeline (whose batch per replica once stayed whatever -stages, so a
// pipeline with data-parallel replicas lost half its global batch on half
// its ranks), and a replica of all ranks stays one.
func TestKeepGlobalBatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		strategy      string
		opts          train.Options
		batch, target int
		world, want   int
		msg           string
	}{
		{"ddp 4 to 2", "ddp", nil, 16, 4, 2, 32, "batch 32 per rank keeps the global batch 64"},
		{"ddp 4 to 3", "ddp", nil, 16, 4, 3, 22, "the global batch 64 does not split over 3 ranks; batch 22 per rank (global 66)"},
		{"pipeline", "pipeline", nil, 16, 4, 2, 16, "1 replica(s) either way: the batch per replica stays 16"},
		{"pipeline x 2 replicas", "pipeline", &pp.Options{Stages: 2}, 16, 4, 2, 32, "batch 32 per replica keeps the global batch 32"},
		{"same world", "ddp", nil, 16, 4, 4, 16, ""},
	} {
		cfg := train.Config{Model: "mlp", Epochs: 1, Batch: tc.batch, LR: 0.1, Strategy: tc.strategy, Options: tc.opts}
		msg := keepGlobalBatch(&cfg, tc.target, tc.world)
		if cfg.Batch != tc.want || !strings.Contains(msg, tc.msg) || (tc.msg == "") != (msg == "") {
			t.Errorf("%s: batch %d (%q), want %d (%q)", tc.name, cfg.Batch, msg, tc.want, tc.msg)
		}
	}
}
