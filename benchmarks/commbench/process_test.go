package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as commbench: with COMMBENCH_MAIN=1 it runs main.
// That way the process tests need no separate build, and the launcher's
// children (re-executions of the same binary) are commbench too.
func TestMain(m *testing.M) {
	if os.Getenv("COMMBENCH_MAIN") == "1" {
		os.Args = append([]string{os.Args[0]}, stripTestFlags(os.Args[1:])...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func stripTestFlags(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-test.") {
			out = append(out, a)
		}
	}
	return out
}

func selfCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "COMMBENCH_MAIN=1", "GORACE=atexit_sleep_ms=0")
	return cmd
}

func parseRows(t *testing.T, out []byte) []Row {
	var rows []Row
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r Row
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad JSON row %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// checkAllOps: one correct row per op and size.
func checkAllOps(t *testing.T, rows []Row, backend string, world int, sizes int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range rows {
		if r.Backend != backend || r.World != world {
			t.Errorf("row %+v: want backend %s world %d", r, backend, world)
		}
		if !r.Correct {
			t.Errorf("wrong result: %+v", r)
		}
		if r.Op != "barrier" && (r.TimeUS <= 0 || r.AlgBW <= 0 || r.BusBW <= 0) {
			t.Errorf("row without timings: %+v", r)
		}
		seen[r.Op]++
	}
	for _, op := range allOps {
		want := sizes
		if op == "barrier" {
			want = 1
		}
		if seen[op] != want {
			t.Errorf("op %s: %d rows, want %d", op, seen[op], want)
		}
	}
}

func TestAllOpsJSON(t *testing.T) {
	for _, backend := range []string{"inproc", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := selfCmd(ctx, "-backend", backend, "-np", "3", "-sizes", "4K,1M", "-json", "-iters", "3", "-warmup", "1", "-warmup-time", "0")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
			}
			checkAllOps(t, parseRows(t, out), backend, 3, 2)
		})
	}
}

// TestKillRank kills one worker in the middle of a tcp all-reduce run; the
// other ranks must exit non-zero on their own, well within 60 s, with an
// error that names the killed rank.
func TestKillRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := selfCmd(ctx, "-backend", "tcp", "-np", "3", "-ops", "all_reduce", "-sizes", "16M", "-iters", "100000", "-warmup", "0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Find the rank 1 worker among the launcher's children.
	var victim int
	deadline := time.Now().Add(60 * time.Second)
	for victim == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		victim = findChild(cmd.Process.Pid, "RANK=1")
	}
	if victim == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("rank 1 worker not found; output:\n%s", out.String())
	}
	time.Sleep(2 * time.Second) // well inside the all-reduce loop
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	err := cmd.Wait()
	took := time.Since(killed)
	text := out.String()
	if err == nil {
		t.Fatalf("launcher exited 0 after a rank was killed; output:\n%s", text)
	}
	if took > 60*time.Second {
		t.Fatalf("the job took %v to fail after the kill", took)
	}
	if strings.Contains(text, "killed by the launcher") {
		t.Fatalf("survivors had to be killed by the launcher instead of failing on their own:\n%s", text)
	}
	for _, r := range []string{"0", "2"} {
		re := regexp.MustCompile(`\[rank ` + r + `\] .*rank 1\b`)
		if !re.MatchString(text) {
			t.Errorf("rank %s's error does not name rank 1; output:\n%s", r, text)
		}
	}
	t.Logf("failed %v after the kill:\n%s", took, lastLines(text, 8))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// findChild returns the pid of a child of ppid whose environment holds kv.
func findChild(ppid int, kv string) int {
	ents, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range ents {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		dir := filepath.Dir(st)
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil {
			continue
		}
		for _, e := range bytes.Split(env, []byte{0}) {
			if string(e) == kv {
				pid, _ := strconv.Atoi(filepath.Base(dir))
				return pid
			}
		}
	}
	return 0
}

// TestMPIRun starts three commbench workers with Open MPI's mpirun; they
// find each other through the OMPI_COMM_WORLD_* variables and all-reduce
// over our tcp backend.
func TestMPIRun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (Debian: apt-get install openmpi-bin); .ci/run installs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3",
		"-x", "COMMBENCH_MAIN=1", "-x", "GDIST_TOKEN=mpirun-test-token",
		os.Args[0], "-backend", "tcp", "-ops", "all_reduce,broadcast", "-sizes", "4K,1M", "-json", "-iters", "3")
	cmd.Env = append(os.Environ(), "OMPI_MCA_plm_rsh_agent=", "OMPI_MCA_btl_vader_single_copy_mechanism=none")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mpirun: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	rows := parseRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("got %d rows, want 4:\n%s\nstderr:\n%s", len(rows), out, stderr.String())
	}
	for _, r := range rows {
		if r.World != 3 || !r.Correct || r.Backend != "tcp" {
			t.Errorf("row %+v", r)
		}
	}
}

// TestRefill: -refill refills and verifies around every timed iteration,
// every op, on shared buffers (the zero-copy path) and ordinary ones; the
// rows say so and are correct.
func TestRefill(t *testing.T) {
	for _, alloc := range []bool{false, true} {
		t.Run(fmt.Sprintf("alloc=%v", alloc), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := []string{"-backend", "shm", "-np", "2", "-sizes", "4K,1M", "-json", "-iters", "3", "-warmup", "1", "-warmup-time", "0", "-refill"}
			if alloc {
				args = append(args, "-alloc")
			}
			cmd := selfCmd(ctx, args...)
			cmd.Env = append(cmd.Env, "GDIST_SHM_DIR="+t.TempDir())
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
			}
			rows := parseRows(t, out)
			checkAllOps(t, rows, "shm", 2, 2)
			for _, r := range rows {
				if !r.Refill || r.Alloc != alloc {
					t.Errorf("row %+v: want refill, alloc %v", r, alloc)
				}
			}
		})
	}
}
