package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Issue 17, item 4: the deployment shape of real jobs, one process per
// rank, each seeing one GPU (Slurm's --gpus-per-task=1, a one-GPU pod,
// CUDA_VISIBLE_DEVICES per rank) while its LOCAL_RANK counts the ranks of
// the host. The test binary re-executes itself as the ranks
// ($GDIST_NCCL_TEST_WORKER says what a rank does); the fake's NCCL moves the
// bytes between the processes through a shared rendezvous file.

const workerEnv = "GDIST_NCCL_TEST_WORKER"

// worker runs one rank: "suite" runs commtest.RankChecksRule and prints
// "rank N passed"; "pipeline" runs its stage of the 2-stage pipeline
// checked against the unsplit model; "loop" prints "ready rank N" and
// all-reduces until something fails. A failure prints
// "rank N failed: <error>" and exits 1.
func worker(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	size, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	local, _ := strconv.Atoi(os.Getenv("LOCAL_RANK"))
	peer, _ := time.ParseDuration(os.Getenv("GDIST_NCCL_TEST_PEER_TIMEOUT"))
	fail := func(err error) int {
		fmt.Printf("rank %d failed: %v\n", rank, err)
		return 1
	}
	if want := os.Getenv("GDIST_NCCL_TEST_MODE"); cudafake.Mode() != want {
		return fail(fmt.Errorf("CUDA mode %q, want %q: %s", cudafake.Mode(), want, cudafake.Reason()))
	}
	if n := cuda.DeviceCount(); cudafake.Mode() == "fake" && n != 1 {
		return fail(fmt.Errorf("the process sees %d devices, want 1", n))
	}
	st, err := rendezvous.Dial(ctx, os.Getenv("GDIST_NCCL_TEST_STORE"), token)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	c, err := comm.New(ctx, "nccl", comm.Config{Rank: rank, Size: size, LocalRank: local, LocalSize: size,
		Store: st, Job: "proc", Options: comm.Options{PeerTimeout: peer, Timeout: time.Minute}})
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	switch mode {
	case "suite":
		counts := append(append([]int(nil), commtest.Counts...), 1<<16+3)
		for _, ch := range commtest.RankChecksRule(counts, commtest.AvgPreMultiply) {
			if err := ch.Run(ctx, c); err != nil {
				return fail(fmt.Errorf("%s: %w", ch.Name, err))
			}
		}
	case "pipeline":
		ref, err := pipelineRef()
		if err != nil {
			return fail(err)
		}
		if err := pipelineStage(ctx, c, ref); err != nil {
			return fail(err)
		}
	case "loop":
		buf := make([]float32, 1024)
		fmt.Printf("ready rank %d\n", rank)
		for {
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(buf), comm.Sum)); err != nil {
				var pe *comm.PeerError
				if errors.As(err, &pe) {
					fmt.Printf("lost rank %d\n", pe.Rank)
				}
				return fail(err)
			}
		}
	}
	fmt.Printf("rank %d passed\n", rank)
	return 0
}

// rankProc is one rank's process.
type rankProc struct {
	rank int
	cmd  *exec.Cmd
	out  *commtest.Buffer
	done chan struct{}
	err  error
	end  time.Time
}

// Where the ranks of a process test run.
type placement int

const (
	// ownGPU: each rank a GPU of its own. On the fake, rank r sees only
	// the fake's device r, as its device 0, with LOCAL_RANK r; on a real
	// machine rank r uses GPU r (there must be enough), or the ranks share
	// them as with sharedGPU where there are too few.
	ownGPU placement = iota
	// sharedGPU: every rank on one GPU (the fake set up with one device;
	// on a real machine, GPU LOCAL_RANK mod n), each process posing as its
	// own host (nccl.EnvShareGPU=1, an NCCL_HOSTID per process,
	// NCCL_SOCKET_IFNAME=lo), as a one-GPU machine runs multi-rank NCCL.
	sharedGPU
	// sameHost: as sharedGPU, but every process with the same NCCL_HOSTID:
	// NCCL refuses the ranks ("Duplicate GPU").
	sameHost
)

// startRanks starts n ranks as processes doing mode, placed as where says,
// on the fake or on a real GPU (whichever the tests run on).
func startRanks(t *testing.T, n int, mode string, where placement, env ...string) []*rankProc {
	t.Helper()
	cudafake.RequireCUDA(t)
	if ok, why := nccl.Usable(); !ok {
		t.Skipf("no NCCL: %s", why)
	}
	onReal := cudafake.Mode() == "real"
	if onReal && where == ownGPU && cuda.DeviceCount() < n {
		where = sharedGPU
	}
	srv, err := rendezvous.NewServer("127.0.0.1:0", token, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	dir := t.TempDir()
	ps := make([]*rankProc, n)
	for r := range ps {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+mode, "GDIST_NCCL_TEST_STORE="+srv.Addr(),
			"GDIST_NCCL_TEST_MODE="+cudafake.Mode(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "LOCAL_RANK="+strconv.Itoa(r))
		switch {
		case onReal:
			cmd.Env = append(cmd.Env, "GDIST_CUDA_TEST=real")
		case where == ownGPU:
			cmd.Env = append(cmd.Env, cudafake.ProcessEnv(r, dir)...)
		default:
			cmd.Env = append(cmd.Env, cudafake.SharedProcessEnv(dir)...)
		}
		switch where {
		case sharedGPU:
			cmd.Env = append(cmd.Env, nccl.EnvShareGPU+"=1", fmt.Sprintf("NCCL_HOSTID=gdist-test-%d-rank%d", os.Getpid(), r), "NCCL_SOCKET_IFNAME=lo")
		case sameHost:
			cmd.Env = append(cmd.Env, nccl.EnvShareGPU+"=1", fmt.Sprintf("NCCL_HOSTID=gdist-test-%d", os.Getpid()), "NCCL_SOCKET_IFNAME=lo")
		}
		cmd.Env = append(cmd.Env, env...)
		p := &rankProc{rank: r, cmd: cmd, out: &commtest.Buffer{}, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = p.out, p.out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.err = cmd.Wait()
			p.end = time.Now()
			close(p.done)
		}()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-p.done
		})
		ps[r] = p
	}
	return ps
}

// processLimit is how long the ranks of a process test may take: longer
// on a real GPU (NCCL's initializations, over sockets when shared).
func processLimit(fake time.Duration) time.Duration {
	if cudafake.Mode() == "real" {
		return 3 * time.Minute
	}
	return fake
}

// waitRanks waits for every rank to end, failing t for each that failed.
func waitRanks(t *testing.T, ps []*rankProc, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for _, p := range ps {
		select {
		case <-p.done:
		case <-deadline:
			t.Fatalf("rank %d still running after %v:\n%s", p.rank, limit, p.out)
		}
		if p.err != nil || !strings.Contains(p.out.String(), fmt.Sprintf("rank %d passed", p.rank)) {
			t.Errorf("rank %d: %v\n%s", p.rank, p.err, p.out)
		}
	}
}

// TestConformanceProcesses: the conformance checks that need only each
// rank's own Comm (every collective, dtype and op, send/recv, split,
// sub-groups, bad arguments), with each rank a process that sees one GPU
// and has LOCAL_RANK > 0, at world sizes 2 and 4 (3 too without -short);
// and with every rank on one GPU, each process posing as its own host
// (issue 26: how a one-GPU machine runs multi-rank NCCL), at world size 2
// (3 too without -short). On a real GPU: world size 2 (3 too without
// -short), the ranks sharing the GPUs where there are too few.
func TestConformanceProcesses(t *testing.T) {
	sizes, shared := []int{2, 3, 4}, []int{2, 3}
	if testing.Short() {
		sizes, shared = []int{2, 4}, []int{2}
	}
	if cudafake.Mode() == "real" {
		sizes, shared = shared, nil
	}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			waitRanks(t, startRanks(t, n, "suite", ownGPU), processLimit(90*time.Second))
		})
	}
	for _, n := range shared {
		t.Run(fmt.Sprintf("%d-on-one-GPU", n), func(t *testing.T) {
			waitRanks(t, startRanks(t, n, "suite", sharedGPU), processLimit(90*time.Second))
		})
	}
}

// TestSharedGPURefused: ranks of one host on one GPU (here processes with
// the same NCCL_HOSTID) are refused by NCCL, every one of them, at once
// ("Duplicate GPU detected"), not one refused and the other left waiting.
func TestSharedGPURefused(t *testing.T) {
	ps := startRanks(t, 2, "suite", sameHost)
	deadline := time.After(processLimit(20 * time.Second))
	for _, p := range ps {
		select {
		case <-p.done:
		case <-deadline:
			t.Fatalf("rank %d still running: NCCL should refuse two ranks of one host on one GPU:\n%s", p.rank, p.out)
		}
		if out := p.out.String(); p.err == nil || !strings.Contains(out, "Duplicate GPU") {
			t.Errorf("rank %d: %v, want a failure saying \"Duplicate GPU\":\n%s", p.rank, p.err, out)
		}
	}
}

// TestPipelineProcesses: a 2-stage 1F1B pipeline, one process per stage,
// trains as the unsplit model does over NCCL's per-pair communicators.
func TestPipelineProcesses(t *testing.T) {
	waitRanks(t, startRanks(t, 2, "pipeline", ownGPU), processLimit(60*time.Second))
}

// TestKilledRankProcess: kill -9 one rank's process mid-training; the
// fake's NCCL gives the others no error (their kernels wait for the dead
// peer), and the host heartbeat makes them fail within the peer timeout,
// naming the killed rank.
func TestKilledRankProcess(t *testing.T) {
	const n, victim = 3, 1
	const peerTimeout = 500 * time.Millisecond
	ps := startRanks(t, n, "loop", ownGPU, "GDIST_NCCL_TEST_PEER_TIMEOUT="+peerTimeout.String())
	for _, p := range ps {
		for deadline := time.Now().Add(processLimit(30 * time.Second)); !strings.Contains(p.out.String(), fmt.Sprintf("ready rank %d", p.rank)); {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d not ready:\n%s", p.rank, p.out)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond) // all-reducing
	start := time.Now()
	if err := ps[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`rank \d failed: .*rank 1`)
	for _, p := range ps {
		if p.rank == victim {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Fatalf("rank %d still running 20s after rank %d was killed:\n%s", p.rank, victim, p.out)
		}
		took := p.end.Sub(start)
		out := p.out.String()
		if !re.MatchString(out) || !strings.Contains(out, fmt.Sprintf("lost rank %d", victim)) {
			t.Errorf("rank %d after %v: want a failure naming lost rank %d:\n%s", p.rank, took, victim, out)
		}
		if took > 10*peerTimeout {
			t.Errorf("rank %d ended %v after rank %d was killed (peer timeout %v)", p.rank, took, victim, peerTimeout)
		}
		t.Logf("rank %d ended after %v: %s", p.rank, took.Round(time.Millisecond), strings.TrimSpace(out))
	}
}
