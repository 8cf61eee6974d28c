//go:build linux

package multihost

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	_ "github.com/gdist/gdist/comm/auto"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/rendezvous"
	_ "github.com/gdist/gdist/comm/tcp"
)

// The test binary doubles as a worker: GDIST_MH_WORKER names what a rank
// does (see worker); the rank and the rendezvous come from the
// torchrun-style variables set by job.
const workerEnv = "GDIST_MH_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		os.Exit(worker(mode))
	}
	os.Exit(m.Run())
}

// worker runs one rank: "suite:<backend>" runs the conformance checks of
// commtest.RankChecks; "loop:<backend>" says "ready" and all-reduces until
// something fails; "init:<backend>" only builds the Comm. A failure is
// printed as "rank N failed: <error>" and exits 1.
func worker(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	what, backend, _ := strings.Cut(mode, ":")
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	fail := func(err error) int {
		fmt.Printf("rank %d failed: %v\n", rank, err)
		return 1
	}
	peer, _ := time.ParseDuration(os.Getenv("GDIST_MH_PEER_TIMEOUT"))
	c, closeFn, err := rendezvous.InitComm(ctx, backend, comm.Options{PeerTimeout: peer, Timeout: time.Minute})
	if err != nil {
		return fail(err)
	}
	defer closeFn()
	host, _ := os.Hostname()
	switch what {
	case "init":
		fmt.Printf("rank %d up on %s\n", rank, host)
	case "suite":
		large := 1<<16 + 3
		for _, ch := range commtest.RankChecks(append(append([]int(nil), commtest.Counts...), large)) {
			if err := ch.Run(ctx, c); err != nil {
				return fail(fmt.Errorf("%s: %w", ch.Name, err))
			}
		}
		fmt.Printf("rank %d passed on %s\n", rank, host)
	case "loop":
		buf := make([]float32, 16<<10)
		fmt.Printf("ready rank %d on %s\n", rank, host)
		for {
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(buf), comm.Sum)); err != nil {
				return fail(err)
			}
		}
	}
	return 0
}

// proc is one rank's process.
type proc struct {
	rank int
	host *Host
	cmd  *exec.Cmd
	out  *commtest.Buffer
	done chan struct{}
	err  error
	end  time.Time
}

// job starts perHost ranks on each host (rank = host*perHost + local),
// with torchrun-style variables, the store on host 0, and extra variables
// per rank from env. prog and args are what each rank runs.
func job(t testing.TB, ctx context.Context, hosts []*Host, perHost int, masterAddr string, env func(rank int) []string, prog string, args ...string) []*proc {
	t.Helper()
	size := len(hosts) * perHost
	var ps []*proc
	for hi, h := range hosts {
		for l := range perHost {
			r := hi*perHost + l
			vars := []string{
				"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(size),
				"LOCAL_RANK=" + strconv.Itoa(l), "LOCAL_WORLD_SIZE=" + strconv.Itoa(perHost),
				"MASTER_ADDR=" + masterAddr, "MASTER_PORT=29500", "GDIST_TOKEN=multihost-test",
				"GDIST_HOST=", "GDIST_HOST_ID=", "GDIST_SOCKET_IFNAME=", "GDIST_STORE_ADDR=", "GDIST_LAUNCHED=",
				"TORCHELASTIC_RUN_ID=", "GORACE=atexit_sleep_ms=0",
			}
			if env != nil {
				vars = append(vars, env(r)...)
			}
			p := &proc{rank: r, host: h, out: &commtest.Buffer{}, done: make(chan struct{})}
			p.cmd = h.Command(ctx, vars, prog, args...)
			p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
			if err := p.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() {
				p.err = p.cmd.Wait()
				p.end = time.Now()
				close(p.done)
			}()
			ps = append(ps, p)
		}
	}
	t.Cleanup(func() {
		for _, p := range ps {
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			for _, p := range ps {
				t.Logf("rank %d (%s):\n%s", p.rank, p.host.Name, p.out.String())
			}
		}
	})
	return ps
}

// mode makes every rank a worker doing m.
func mode(m string, more ...string) func(int) []string {
	return func(int) []string { return append([]string{workerEnv + "=" + m}, more...) }
}

func waitAll(ps []*proc) {
	for _, p := range ps {
		<-p.done
	}
}

func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestConformanceAcrossHosts runs the conformance checks with two ranks on
// each of two hosts, over auto (shared memory within a host, TCP across)
// and tcp, with the default address choice: nobody sets GDIST_HOST. The
// tcp run uses IPv6 for the store, so its ranks advertise IPv6 addresses.
func TestConformanceAcrossHosts(t *testing.T) {
	cl := New(t, 2)
	for _, c := range []struct{ backend, master string }{{"auto", cl.Hosts[0].IP}, {"tcp", cl.Hosts[0].IP6}} {
		t.Run(c.backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			ps := job(t, ctx, cl.Hosts, 2, c.master, mode("suite:"+c.backend), self(t))
			waitAll(ps)
			for _, p := range ps {
				if p.err != nil || !strings.Contains(p.out.String(), "passed on "+p.host.Name) {
					t.Errorf("rank %d on %s: %v", p.rank, p.host.Name, p.err)
				}
			}
		})
	}
}

// waitReady waits until every rank of ps printed "ready".
func waitReady(t *testing.T, ps []*proc) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, p := range ps {
		for !strings.Contains(p.out.String(), "ready rank") {
			select {
			case <-p.done:
				t.Fatalf("rank %d ended before it was ready: %v", p.rank, p.err)
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d not ready", p.rank)
			}
		}
	}
}

// wantFailure checks that each of ps reported its failure ("rank N
// failed: ...", printed before it closes) within limit after since, with
// an error matching re.
func wantFailure(t *testing.T, ps []*proc, since time.Time, limit time.Duration, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	reported := regexp.MustCompile(`(?m)^rank \d+ failed: .*\n`) // the worker's own line, whole
	for _, p := range ps {
	poll:
		for !reported.MatchString(p.out.String()) && time.Since(since) < limit+10*time.Second {
			select {
			case <-p.done:
				break poll
			case <-time.After(20 * time.Millisecond):
			}
		}
		took := time.Since(since)
		out := p.out.String()
		if !reported.MatchString(out) {
			t.Errorf("rank %d on %s reported no failure %v after the fault", p.rank, p.host.Name, took)
			continue
		}
		if !rx.MatchString(out) {
			t.Errorf("rank %d on %s: error does not match %q:\n%s", p.rank, p.host.Name, re, out)
		}
		if took > limit {
			t.Errorf("rank %d on %s failed %v after the fault, want within %v", p.rank, p.host.Name, took, limit)
		}
	}
}

const peerTimeout = 3 * time.Second

// TestKilledHost: every rank of host 1 is killed with SIGKILL while the job
// all-reduces; the ranks of host 0 fail within the peer timeout, naming a
// rank of host 1.
func TestKilledHost(t *testing.T) {
	cl := New(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := job(t, ctx, cl.Hosts, 2, cl.Hosts[0].IP, mode("loop:auto", "GDIST_MH_PEER_TIMEOUT="+peerTimeout.String()), self(t))
	waitReady(t, ps)
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	for _, p := range ps[2:] {
		p.cmd.Process.Kill()
	}
	wantFailure(t, ps[:2], killed, peerTimeout+2*time.Second, `rank [01] failed: .*rank [23]\b`)
}

// TestCutLink: host 1's cable is pulled (its port on the switch goes
// down, no reset reaches anyone); every rank fails within about the peer
// timeout, the ranks of each host naming a rank of the other.
func TestCutLink(t *testing.T) {
	cl := New(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := job(t, ctx, cl.Hosts, 2, cl.Hosts[0].IP, mode("loop:auto", "GDIST_MH_PEER_TIMEOUT="+peerTimeout.String()), self(t))
	waitReady(t, ps)
	time.Sleep(200 * time.Millisecond)
	cut := time.Now()
	if err := cl.Hosts[1].CutLink(); err != nil {
		t.Fatal(err)
	}
	limit := 2*peerTimeout + 2*time.Second
	wantFailure(t, ps[:2], cut, limit, `rank [01] failed: .*rank [23]\b`)
	wantFailure(t, ps[2:], cut, limit, `rank [23] failed: .*rank [01]\b`)
}

// TestWrongAddress (issue 14, done-when): a rank that advertises an address
// the others cannot reach makes every rank fail within 30 s, naming the
// rank, the address and the variable to set; a loopback address across
// hosts fails at once.
func TestWrongAddress(t *testing.T) {
	cl := New(t, 2)
	cases := []struct {
		name, host string
		rank       int
		limit      time.Duration
		re         string
	}{
		{"unreachable", "10.77.0.99", 0, 30 * time.Second, `rank \d failed: .*rank 0 at 10\.77\.0\.99:\d+ .*GDIST_HOST`},
		{"loopback", "127.0.0.1", 1, 5 * time.Second, `rank \d failed: .*rank 1 advertised 127\.0\.0\.1:\d+ .*loopback.*GDIST_HOST`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.limit > 10*time.Second {
				t.Skip("waits out the connect timeout (20 s); skipped with -short")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env := func(r int) []string {
				vars := []string{workerEnv + "=init:tcp"}
				if r == c.rank {
					vars = append(vars, "GDIST_HOST="+c.host)
				}
				return vars
			}
			start := time.Now()
			ps := job(t, ctx, cl.Hosts, 2, cl.Hosts[0].IP, env, self(t))
			wantFailure(t, ps, start, c.limit, c.re)
		})
	}
}

// buildTrain builds cmd/train into the test's temporary directory.
func buildTrain(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build cmd/train: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "train")
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/gdist/gdist/cmd/train")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/train: %v\n%s", err, out)
	}
	return bin
}

// evalLoss runs cmd/train as a job of perHost ranks on each of hosts and
// returns the eval_loss of rank 0's summary (its last JSON line).
func evalLoss(t *testing.T, bin string, hosts []*Host, perHost int) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ps := job(t, ctx, hosts, perHost, hosts[0].IP, nil, bin,
		"-model", "mlp", "-limit", "1280", "-epochs", "1", "-json", "-progress=false", "-backend", "auto", "-seed", "7")
	waitAll(ps)
	for _, p := range ps {
		if p.err != nil {
			t.Fatalf("%d host(s) x %d: rank %d on %s: %v\n%s", len(hosts), perHost, p.rank, p.host.Name, p.err, p.out)
		}
	}
	var loss *float64
	for _, line := range strings.Split(ps[0].out.String(), "\n") {
		var v struct {
			EvalLoss *float64 `json:"eval_loss"`
		}
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &v) == nil && v.EvalLoss != nil {
			loss = v.EvalLoss
		}
	}
	if loss == nil {
		t.Fatalf("%d host(s) x %d: no eval_loss in rank 0's output:\n%s", len(hosts), perHost, ps[0].out)
	}
	return *loss
}

// trainHosts is two simulated hosts and cmd/train built, for the tests
// that train across hosts (skipped with -short or without the data).
func trainHosts(t *testing.T) (*Cluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs cmd/train twice (about a minute); skipped with -short")
	}
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist"); err != nil {
		t.Skipf("no Fashion-MNIST: %v", err)
	}
	return New(t, 2), buildTrain(t)
}

// TestTrainAcrossHosts: cmd/train with two ranks on each of two hosts
// (torchrun-style variables, default backend auto, no GDIST_HOST) ends
// with the eval loss of four ranks on one host.
func TestTrainAcrossHosts(t *testing.T) {
	cl, bin := trainHosts(t)
	one := evalLoss(t, bin, cl.Hosts[:1], 4)
	two := evalLoss(t, bin, cl.Hosts, 2)
	t.Logf("eval_loss: 1 host x 4 ranks %.6f, 2 hosts x 2 ranks %.6f", one, two)
	if math.Abs(one-two) > 1e-4 {
		t.Errorf("eval_loss %.6f on 2 hosts x 2 ranks, %.6f on 1 host x 4", two, one)
	}
}

// TestMasterAddrLoopbackOnRankZero: rank 0 reaches its own store only over
// loopback (its MASTER_ADDR is its hostname, which does not resolve here,
// like a name that resolves to 127.0.1.1); it advertises the address the
// other hosts reached the store at, and the job starts.
func TestMasterAddrLoopbackOnRankZero(t *testing.T) {
	cl := New(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := func(r int) []string {
		vars := []string{workerEnv + "=init:tcp"}
		if r == 0 {
			vars = append(vars, "MASTER_ADDR="+cl.Hosts[0].Name)
		}
		return vars
	}
	ps := job(t, ctx, cl.Hosts, 2, cl.Hosts[0].IP, env, self(t))
	waitAll(ps)
	for _, p := range ps {
		if p.err != nil || !strings.Contains(p.out.String(), "up on "+p.host.Name) {
			t.Errorf("rank %d on %s: %v", p.rank, p.host.Name, p.err)
		}
	}
}

// BenchmarkCommbenchHosts runs benchmarks/commbench (all_reduce) on four
// ranks: one host over shm, then two hosts x two ranks whose links are
// shaped with tc (GDIST_MH_LINK; by default 1 Gbit/s with 100 us of delay
// under netem, or 1 Gbit/s alone under tbf where there is no netem): auto
// (shm within a host, tcp across) with the cost model's choice (the
// hierarchical all-reduce), auto with a flat all-reduce forced
// (GDIST_ALGO=all_reduce=hd, the flat model's choice from 1 MiB on), and
// flat tcp; it logs rank 0's tables. Numbers from a shared machine are
// noisy; see benchmarks/NOTES.md.
func BenchmarkCommbenchHosts(b *testing.B) {
	cl := New(b, 2)
	goTool, err := exec.LookPath("go")
	if err != nil {
		b.Skipf("no go tool: %v", err)
	}
	bin := filepath.Join(b.TempDir(), "commbench")
	if out, err := exec.Command(goTool, "build", "-o", bin, "github.com/gdist/gdist/benchmarks/commbench").CombinedOutput(); err != nil {
		b.Fatalf("go build commbench: %v\n%s", err, out)
	}
	// The link: GDIST_MH_LINK (a tc qdisc), else netem's rate and delay,
	// else tbf's rate alone where the kernel has no netem.
	link := os.Getenv("GDIST_MH_LINK")
	tries := []string{link}
	if link == "" {
		tries = []string{"netem rate 1gbit delay 100us", "tbf rate 1gbit burst 128kb latency 5ms"}
	}
	var serr error
	for _, link = range tries {
		if serr = cl.Hosts[0].Shape(link); serr == nil {
			break
		}
	}
	if serr != nil {
		b.Skipf("cannot shape links: %v", serr)
	}
	for _, h := range cl.Hosts[1:] {
		if err := h.Shape(link); err != nil {
			b.Fatal(err)
		}
	}
	sizes := os.Getenv("GDIST_MH_SIZES")
	if sizes == "" {
		sizes = "4K,64K,1M,16M"
	}
	for _, c := range []struct {
		name, backend string
		hosts         []*Host
		perHost       int
		algo          string // GDIST_ALGO
	}{
		{"1host-shm", "shm", cl.Hosts[:1], 4, ""},
		{"2hosts-auto", "auto", cl.Hosts, 2, ""},
		{"2hosts-auto-flat", "auto", cl.Hosts, 2, "all_reduce=hd"},
		{"2hosts-tcp", "tcp", cl.Hosts, 2, ""},
	} {
		if only := os.Getenv("GDIST_MH_ROWS"); only != "" && !strings.Contains(","+only+",", ","+c.name+",") {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			env := func(int) []string { return []string{"GDIST_ALGO=" + c.algo} }
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				ps := job(b, ctx, c.hosts, c.perHost, c.hosts[0].IP, env, bin,
					"-backend", c.backend, "-ops", "all_reduce", "-sizes", sizes)
				waitAll(ps)
				cancel()
				for _, p := range ps {
					if p.err != nil {
						b.Fatalf("rank %d: %v\n%s", p.rank, p.err, p.out)
					}
				}
				b.Logf("%s, links %q:\n%s", c.name, link, ps[0].out)
			}
		})
	}
}

// TestLauncherAcrossHosts: gdist's own launcher on each of two hosts
// (-nnodes 2 -node-rank i -master-addr <host 0>, two ranks each, the job
// token from GDIST_TOKEN) ends with the eval loss of one launcher running
// four ranks on one host.
func TestLauncherAcrossHosts(t *testing.T) {
	cl, bin := trainHosts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"-model", "mlp", "-limit", "1280", "-epochs", "1", "-json", "-progress=false", "-seed", "7"}
	run := func(hosts []*Host, extra func(i int) []string) float64 {
		cmds := make([]*exec.Cmd, len(hosts))
		outs := make([]*strings.Builder, len(hosts))
		for i, h := range hosts {
			outs[i] = &strings.Builder{}
			cmds[i] = h.Command(ctx, []string{"GDIST_TOKEN=0123456789abcdef0123456789abcdef"}, bin, append(args, extra(i)...)...)
			cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("launcher on %s: %v\n%s", hosts[i].Name, err, outs[i])
			}
		}
		var loss *float64
		for _, line := range strings.Split(outs[0].String(), "\n") {
			var v struct {
				Event    string   `json:"event"`
				EvalLoss *float64 `json:"eval_loss"`
			}
			if json.Unmarshal([]byte(line), &v) == nil && v.Event == "summary" {
				loss = v.EvalLoss
			}
		}
		if loss == nil {
			t.Fatalf("no summary from node 0:\n%s", outs[0])
		}
		return *loss
	}
	one := run(cl.Hosts[:1], func(int) []string { return []string{"-nproc", "4"} })
	two := run(cl.Hosts, func(i int) []string {
		return []string{"-nproc", "2", "-nnodes", "2", "-node-rank", fmt.Sprint(i), "-master-addr", cl.Hosts[0].IP, "-master-port", "29517"}
	})
	t.Logf("eval_loss: 1 launcher x 4 ranks %.6f, 2 launchers x 2 ranks %.6f", one, two)
	if math.Abs(one-two) > 1e-4 {
		t.Errorf("eval_loss %.6f on 2 hosts x 2 ranks, %.6f on 1 host x 4", two, one)
	}
}
