package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// freePort returns a port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func envFor(rank, size, port int) Env {
	return Env{Rank: rank, Size: size, LocalRank: rank, LocalSize: size, MasterAddr: "127.0.0.1",
		MasterPort: port, StorePort: port, Token: testToken, Launcher: LauncherManual}
}

// runRanks runs f for size ranks as goroutines and returns their errors.
func runRanks(size int, f func(rank int) error) []error {
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

func TestConnectThreeRanks(t *testing.T) {
	ctx := testCtx(t)
	port := freePort(t)
	lb := &logBuf{}
	const size = 3
	errs := runRanks(size, func(rank int) error {
		st, closeFn, err := Connect(ctx, envFor(rank, size, port), lb.Logf)
		if err != nil {
			return err
		}
		if err := st.Set(ctx, fmt.Sprint("addr/", rank), []byte(strconv.Itoa(rank*10))); err != nil {
			return err
		}
		for p := range size {
			v, err := st.Get(ctx, fmt.Sprint("addr/", p))
			if err != nil {
				return err
			}
			if string(v) != strconv.Itoa(p*10) {
				return fmt.Errorf("rank %d read %q for rank %d", rank, v, p)
			}
		}
		return closeFn()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", lb.String())
	}
	// Rank 0 shut the server down after everyone was done.
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		c.Close()
		t.Error("the store still listens after every rank closed")
	}
}

func TestConnectStoreAddr(t *testing.T) {
	s, _ := newTestServer(t)
	ctx := testCtx(t)
	env := envFor(1, 2, 1)
	env.StoreAddr = s.Addr()
	st, closeFn, err := Connect(ctx, env, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	// The external server is not closed by a client.
	st2 := dialTest(t, ctx, s.Addr())
	if v, err := st2.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("%q %v", v, err)
	}
}

// fakeComm implements just enough of comm.Comm for InitComm's test.
type fakeComm struct {
	comm.Comm
	rank, size int
	closed     *atomic.Int32
}

func (f *fakeComm) Rank() int    { return f.rank }
func (f *fakeComm) Size() int    { return f.size }
func (f *fakeComm) Close() error { f.closed.Add(1); return nil }

const fakeBackend = "rendezvous-test-fake"

var fakeClosed atomic.Int32

func init() {
	comm.Register(fakeBackend, func(ctx context.Context, cfg comm.Config) (comm.Comm, error) {
		if cfg.Store == nil || len(cfg.Token) == 0 {
			return nil, errors.New("no store or token")
		}
		// Meet the other ranks through the store, as a real backend would.
		key := fmt.Sprint("fake/", cfg.Rank)
		if err := cfg.Store.Set(ctx, key, []byte("here")); err != nil {
			return nil, err
		}
		var keys []string
		for r := range cfg.Size {
			keys = append(keys, fmt.Sprint("fake/", r))
		}
		if err := cfg.Store.Wait(ctx, keys...); err != nil {
			return nil, err
		}
		return &fakeComm{rank: cfg.Rank, size: cfg.Size, closed: &fakeClosed}, nil
	})
}

func TestInitCommFakeBackend(t *testing.T) {
	ctx := testCtx(t)
	port := freePort(t)
	lb := &logBuf{}
	fakeClosed.Store(0)
	const size = 3
	errs := runRanks(size, func(rank int) error {
		env := envFor(rank, size, port)
		env.TokenDerived = true
		c, closeFn, err := initComm(ctx, env, fakeBackend, comm.Options{}, lb.Logf)
		if err != nil {
			return err
		}
		if c.Rank() != rank || c.Size() != size {
			return fmt.Errorf("comm is rank %d of %d", c.Rank(), c.Size())
		}
		return closeFn()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if n := fakeClosed.Load(); n != size {
		t.Errorf("%d comms closed, want %d", n, size)
	}
	lb.WaitFor(t, "not secret")

	// An unknown backend fails cleanly (and closes the store it opened).
	_, _, err := initComm(ctx, envFor(0, 1, freePort(t)), "no-such-backend", comm.Options{}, lb.Logf)
	if !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("unknown backend: %v", err)
	}
}

func TestInitCommFromEnv(t *testing.T) {
	port := freePort(t)
	for _, k := range []string{"GDIST_LAUNCHED", "GDIST_STORE_ADDR", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK",
		"OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GDIST_STORE_PORT", "MASTER_ADDR"} {
		t.Setenv(k, "")
	}
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "1")
	t.Setenv("MASTER_PORT", strconv.Itoa(port))
	t.Setenv("GDIST_TOKEN", "abcd")
	c, closeFn, err := InitComm(testCtx(t), fakeBackend, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Size() != 1 {
		t.Fatalf("size %d", c.Size())
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
}

// A rank that dies (kill -9) never reports done: rank 0's close then
// stops waiting once no client has been connected for a moment, rather
// than lingering DoneTimeout (10 s) after the job already failed (seen in
// the GPU verification's kill step), and says why.
func TestCloseDoesNotWaitForDeadRank(t *testing.T) {
	ctx := testCtx(t)
	port := freePort(t)
	lb := &logBuf{}
	stores := make([]comm.Store, 2)
	closers := make([]func() error, 2)
	errs := runRanks(2, func(rank int) error {
		var err error
		stores[rank], closers[rank], err = Connect(ctx, envFor(rank, 2, port), lb.Logf)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	stores[1].(*Client).Close() // rank 1 dies: its connection drops, no done
	start := time.Now()
	err := closers[0]()
	took := time.Since(start)
	if took > 3*time.Second {
		t.Errorf("rank 0's close took %v with rank 1 gone (DoneTimeout %v)", took, DoneTimeout)
	}
	if err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("rank 0's close: %v, want an error saying 1 of 2 ranks reported done", err)
	}
	t.Logf("close after %v: %v", took.Round(time.Millisecond), err)
}
