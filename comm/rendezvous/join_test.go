package rendezvous

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// wantAll fails the test unless err mentions every one of parts.
func wantAll(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one mentioning %q", what, parts)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v\nwant it to mention %q", what, err, p)
		}
	}
}

// Issue 13 #5: rank 1 has the wrong GDIST_TOKEN. It fails at once; rank 0,
// which waits for it, fails within seconds too (it used to wait for the op
// timeout), saying a peer was refused for a wrong token and from where.
func TestWrongTokenFailsEveryRank(t *testing.T) {
	ctx := testCtx(t)
	port := freePort(t)
	lb := &logBuf{}
	start := time.Now()
	took := make([]time.Duration, 2)
	errs := runRanks(2, func(rank int) error {
		env := envFor(rank, 2, port)
		if rank == 1 {
			env.Token = []byte("another token")
			time.Sleep(100 * time.Millisecond) // rank 0 serves first
		}
		_, closeFn, err := initComm(ctx, env, fakeBackend, comm.Options{}, lb.Logf)
		took[rank] = time.Since(start)
		if err == nil {
			closeFn()
		}
		return err
	})
	if !errors.Is(errs[1], comm.ErrAuth) {
		t.Errorf("rank 1: %v, want an auth error", errs[1])
	}
	wantAll(t, "rank 1", errs[1], "GDIST_TOKEN")
	wantAll(t, "rank 0", errs[0], "refused a connection from 127.0.0.1:", "wrong GDIST_TOKEN", "rank(s) [1]", "every rank of a job needs the same GDIST_TOKEN")
	if took[0] > refusalGrace+5*time.Second {
		t.Errorf("rank 0 failed after %v", took[0])
	}
	if t.Failed() {
		t.Logf("log:\n%s", lb)
	}
}

// Issue 13 #6: a second job started on the same port without a token is
// refused by name: its rank 0 cannot serve the store, its rank 1 (a second
// rank 1 on the first job's store) is refused naming the rank, both
// processes and the fix; the first job is unaffected.
func TestSecondJobOnOnePortRefused(t *testing.T) {
	ctx := testCtx(t)
	port := freePort(t)
	lb := &logBuf{}
	type conn struct {
		closeFn func() error
		err     error
	}
	first := make([]conn, 2)
	runRanks(2, func(rank int) error {
		_, c, err := Connect(ctx, envFor(rank, 2, port), lb.Logf)
		first[rank] = conn{c, err}
		return nil
	})
	for r, c := range first {
		if c.err != nil {
			t.Fatalf("first job, rank %d: %v", r, c.err)
		}
	}
	_, _, err := Connect(ctx, envFor(0, 2, port), lb.Logf)
	wantAll(t, "second job, rank 0", err, "port "+strconv.Itoa(port), "MASTER_PORT")
	_, _, err = Connect(ctx, envFor(1, 2, port), lb.Logf)
	if !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("second job, rank 1: %v, want an invalid-argument error", err)
	}
	wantAll(t, "second job, rank 1", err, "rank 1 already joined", "second rank 1", "from 127.0.0.1:", "MASTER_PORT", "GDIST_TOKEN")
	env := envFor(1, 3, port)
	_, _, err = Connect(ctx, env, lb.Logf)
	wantAll(t, "a rank of world size 3", err, "world size 2", "world size 3", "MASTER_PORT")
	env = envFor(1, 2, port)
	env.JobID = "GDIST_JOB_ID=other"
	_, _, err = Connect(ctx, env, lb.Logf)
	wantAll(t, "a rank of another job id", err, "job id GDIST_JOB_ID=other", "no job id")
	for r, err := range runRanks(2, func(rank int) error { return first[rank].closeFn() }) {
		if err != nil {
			t.Errorf("first job, rank %d: close: %v", r, err)
		}
	}
}

// A rank that never comes is named after the join timeout.
func TestJoinTimeout(t *testing.T) {
	env := envFor(0, 3, freePort(t))
	env.JoinTimeout = 300 * time.Millisecond
	start := time.Now()
	_, _, err := Connect(testCtx(t), env, t.Logf)
	if !errors.Is(err, comm.ErrTimeout) {
		t.Errorf("%v, want a timeout", err)
	}
	wantAll(t, "rank 0", err, "rank(s) [1 2] did not join", "GDIST_JOIN_TIMEOUT")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
}

// Issue 13 #11: a hand-started rank 0 with MASTER_ADDR=127.0.0.1 serves
// its store on that address only, not on every interface.
func TestStoreBindsMasterAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	ln.Close()
	port := freePort(t)
	_, closeFn, err := Connect(testCtx(t), envFor(0, 1, port), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	other, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("the store took port %d on other addresses than 127.0.0.1: %v", port, err)
	}
	other.Close()
}

// Issue 13 #11: refused connections are logged one line each, the first
// few only; the rest are counted in a summary.
func TestRefusalLogRateLimited(t *testing.T) {
	s, lb := newTestServer(t)
	const n = 10
	for range n {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.0\r\n" + strings.Repeat("x", 64)))
		expectClosed(t, c)
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.refusals() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	s.Close()
	lines := strings.Split(lb.String(), "\n")
	single := 0
	for _, l := range lines {
		if strings.Contains(l, "refused connection from") {
			single++
		}
	}
	if single != logRefusalsFirst || !lb.Contains("refused 7 more connection(s) (10 in all)") || len(lines) > logRefusalsFirst+2 {
		t.Errorf("%d refusals logged as:\n%s", n, lb)
	}
}
