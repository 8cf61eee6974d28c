package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		cudafake.Setup()
		os.Exit(worker(mode))
	}
	os.Exit(cudafake.Main(m))
}

var token = []byte("nccl-test-token")

// stores returns n clients of a fresh rendezvous store.
func stores(t testing.TB, n int) []comm.Store {
	t.Helper()
	srv, err := rendezvous.NewServer("127.0.0.1:0", token, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	out := make([]comm.Store, n)
	for r := range out {
		s, err := rendezvous.Dial(context.Background(), srv.Addr(), token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out[r] = s
	}
	return out
}

// newWorld builds n ranks of the "nccl" backend, rank r on GPU r.
func newWorld(t testing.TB, n int, opts comm.Options) []comm.Comm {
	t.Helper()
	if ok, why := nccl.Usable(); !ok {
		t.Skipf("no NCCL: %s", why)
	}
	if n > cuda.DeviceCount() {
		t.Skipf("world size %d needs %d GPUs, this machine has %d (NCCL refuses two ranks on one GPU)", n, n, cuda.DeviceCount())
	}
	return commtest.RegistryWorld("nccl", stores, comm.Config{Options: opts})(t, n)
}

func ncclWorld(t testing.TB, n int) []comm.Comm {
	// Send/recv mismatches are detected (every message carries a header).
	if strings.Contains(t.Name(), "/Mismatch/") && !strings.Contains(t.Name(), "/Mismatch/p2p/") {
		t.Skip("NCCL does not detect mismatched collectives (they hang or corrupt data); the host backends do")
	}
	return newWorld(t, n, comm.Options{})
}

func TestConformance(t *testing.T) {
	cudafake.RequireCUDA(t)
	// The fake's ranks are goroutines of this process: sizes 1 to 4 cover
	// the paths (one rank, pairs, odd sizes, a power of two above two), at
	// a large count that keeps the run short.
	cfg := commtest.Config{Sizes: []int{1, 2, 3, 4}, Large: 1<<16 + 3}
	if testing.Short() {
		cfg = commtest.Config{Sizes: []int{1, 3, 4}, Large: 4099}
	}
	if cudafake.Mode() == "real" {
		cfg = commtest.Config{}
		for n := 1; n <= min(4, cuda.DeviceCount()); n++ {
			cfg.Sizes = append(cfg.Sizes, n)
		}
	}
	// NCCL cannot say which rank a timed-out collective waits for.
	cfg.NoStallReport = true
	// ncclAvg on floats pre-multiplies the inputs by 1/n.
	cfg.Avg = commtest.AvgPreMultiply
	commtest.Suite(t, ncclWorld, cfg)
}

func TestRealGPU(t *testing.T) {
	cudafake.RequireReal(t)
	v, path, err := nccl.Version()
	if err != nil {
		t.Fatalf("CUDA works but NCCL does not: %v", err)
	}
	t.Logf("NCCL %s (%s); %s", v, path, cuda.Info())
}

func TestUsable(t *testing.T) {
	cudafake.RequireCUDA(t)
	noGPUAssignment(t)
	if ok, why := nccl.Usable(); !ok {
		t.Fatalf("Usable: %s", why)
	}
	n := cuda.DeviceCount()
	if ok, why := nccl.UsableFor(n); !ok {
		t.Fatalf("UsableFor(%d GPUs) = %v, %q", n, ok, why)
	}
	if ok, why := nccl.UsableFor(n + 1); ok || !strings.Contains(why, "one GPU per rank") || !strings.Contains(why, nccl.EnvShareGPU) {
		t.Fatalf("UsableFor(more ranks than GPUs) = %v, %q", ok, why)
	}
	t.Setenv(nccl.EnvShareGPU, "1")
	if ok, why := nccl.UsableFor(n + 1); ok || !strings.Contains(why, "NCCL_HOSTID") {
		t.Fatalf("UsableFor(more ranks than GPUs) with %s=1 and no NCCL_HOSTID = %v, %q", nccl.EnvShareGPU, ok, why)
	}
	t.Setenv("NCCL_HOSTID", "gdist-test")
	if ok, why := nccl.UsableFor(n + 1); !ok {
		t.Fatalf("UsableFor(more ranks than GPUs) with %s=1 and NCCL_HOSTID set = %v, %q", nccl.EnvShareGPU, ok, why)
	}
	if cudafake.Mode() == "fake" {
		if v, _, err := nccl.Version(); err != nil || v != "2.19.3" {
			t.Fatalf("Version() = %q, %v", v, err)
		}
	}
}

// noGPUAssignment clears, for the test, what says that a launcher gave the
// process its GPU(s) (a GPU machine may set CUDA_VISIBLE_DEVICES or
// NVIDIA_VISIBLE_DEVICES for every process) and GPU sharing.
func noGPUAssignment(t *testing.T) {
	for _, v := range []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", nccl.EnvShareGPU, "NCCL_HOSTID"} {
		t.Setenv(v, "")
	}
}

// swapEnv sets env vars for the duration of a test and reloads the
// libraries before and after.
func swapEnv(t *testing.T, kv ...string) {
	type old struct {
		v   string
		had bool
	}
	saved := map[string]old{}
	for i := 0; i < len(kv); i += 2 {
		v, had := os.LookupEnv(kv[i])
		saved[kv[i]] = old{v, had}
		os.Setenv(kv[i], kv[i+1])
	}
	cuda.Reload()
	nccl.Reload()
	t.Cleanup(func() {
		for k, o := range saved {
			if o.had {
				os.Setenv(k, o.v)
			} else {
				os.Unsetenv(k)
			}
		}
		cuda.Reload()
		nccl.Reload()
	})
}

func TestNoNCCL(t *testing.T) {
	cudafake.RequireCUDA(t)
	swapEnv(t, nccl.EnvLibrary, "/nonexistent/libnccl.so.2")
	_, err := comm.New(context.Background(), "nccl", comm.Config{Rank: 0, Size: 1})
	if !errors.Is(err, nccl.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") {
		t.Fatalf("comm.New without NCCL: %v", err)
	}
	if ok, why := nccl.Usable(); ok || !strings.Contains(why, "cannot load NCCL") {
		t.Fatalf("Usable() = %v, %q", ok, why)
	}
}

func TestNoCUDA(t *testing.T) {
	swapEnv(t, cuda.EnvLibrary, "/nonexistent/libcudart.so")
	_, err := comm.New(context.Background(), "nccl", comm.Config{Rank: 0, Size: 1})
	if !errors.Is(err, nccl.ErrUnavailable) || !strings.Contains(err.Error(), "no CUDA") {
		t.Fatalf("comm.New without CUDA: %v", err)
	}
	if ok, why := nccl.Usable(); ok || !strings.HasPrefix(why, "no CUDA: ") {
		t.Fatalf("Usable() = %v, %q", ok, why)
	}
}

// Issue 26, item 1: a rank whose local rank has no GPU of its own is
// refused, saying why, on a machine with one GPU too; with GPU sharing
// (EnvShareGPU and NCCL_HOSTID) local rank k gets GPU k mod n.
func TestTooFewGPUs(t *testing.T) {
	cudafake.RequireCUDA(t)
	noGPUAssignment(t)
	n := cuda.DeviceCount()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := comm.Config{Rank: 0, Size: 1, LocalRank: n, LocalSize: n + 1}
	_, err := nccl.New(ctx, cfg)
	if !errors.Is(err, nccl.ErrUnavailable) || !strings.Contains(err.Error(), "one GPU per rank") {
		t.Fatalf("more local ranks than GPUs: %v", err)
	}
	t.Setenv(nccl.EnvShareGPU, "1")
	if _, err = nccl.New(ctx, cfg); !errors.Is(err, nccl.ErrUnavailable) || !strings.Contains(err.Error(), "NCCL_HOSTID") {
		t.Fatalf("%s=1 without NCCL_HOSTID: %v", nccl.EnvShareGPU, err)
	}
	t.Setenv("NCCL_HOSTID", "gdist-test-"+strconv.Itoa(os.Getpid()))
	c, err := nccl.New(ctx, cfg)
	if err != nil {
		t.Fatalf("%s=1 with NCCL_HOSTID: %v", nccl.EnvShareGPU, err)
	}
	defer c.Close()
	if c.Device() != 0 {
		t.Fatalf("local rank %d of %d on %d GPU(s) with sharing: Device() = %d, want 0", n, n+1, n, c.Device())
	}
	if err := comm.Run(ctx)(c.Barrier(ctx)); err != nil {
		t.Fatal(err)
	}
}

// The bare Comm takes device buffers and refuses host ones clearly.
func TestBareComm(t *testing.T) {
	cudafake.RequireCUDA(t)
	ctx := context.Background()
	c, err := nccl.New(ctx, comm.Config{Rank: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	host := []int32{1, 2, 3, 4}
	_, err = c.AllReduce(ctx, comm.FromSlice(host), comm.Sum)
	if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "host memory") {
		t.Fatalf("host buffer to the bare Comm: %v", err)
	}
	d, err := staging.Upload(c.Device(), comm.FromSlice(host))
	if err != nil {
		t.Fatal(err)
	}
	defer staging.FreeBuffer(d)
	for _, op := range []comm.ReduceOp{comm.Sum, comm.Max, comm.BXor, comm.Avg} {
		if err := comm.Run(ctx)(c.AllReduce(ctx, d, op)); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
	}
	got := make([]int32, 4)
	if err := staging.Copy(comm.FromSlice(got), d); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(host) {
		t.Fatalf("world-size-1 reductions changed the data: %v", got)
	}
	if cuda.DeviceCount() > 1 {
		other := devBuffer(t, 1, comm.Int32, 4)
		if _, err := c.AllReduce(ctx, other, comm.Sum); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "cuda:1") {
			t.Fatalf("buffer on another GPU: %v", err)
		}
	}
}

// An asynchronous NCCL error (here injected by the fake) fails the pending
// operation and poisons the Comm.
func TestAsyncError(t *testing.T) {
	cudafake.RequireFake(t)
	t.Setenv("FAKE_NCCL_FAIL_AFTER", "1")
	cs := newWorld(t, 1, comm.Options{})
	os.Unsetenv("FAKE_NCCL_FAIL_AFTER")
	c := cs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	x := []float32{1}
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(x), comm.Sum)); err != nil {
		t.Fatal(err)
	}
	err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(x), comm.Sum))
	if err == nil || !strings.Contains(err.Error(), "remote process exited") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("after an async error: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the async error was not noticed before the deadline")
	}
	if _, err := c.Barrier(ctx); err == nil {
		t.Fatal("the Comm still works after an async error")
	}
}

// Avg and bfloat16 need NCCL 2.10: older versions say so.
func TestOldNCCL(t *testing.T) {
	cudafake.RequireFake(t)
	swapEnv(t, "FAKE_NCCL_VERSION", "2708")
	cs := newWorld(t, 1, comm.Options{})
	ctx := context.Background()
	if _, err := cs[0].AllReduce(ctx, comm.FromSlice([]float32{1}), comm.Avg); !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "2.7.8") {
		t.Fatalf("avg on NCCL 2.7.8: %v", err)
	}
	if _, err := cs[0].AllReduce(ctx, comm.FromSlice([]comm.BF16{1}), comm.Sum); !errors.Is(err, comm.ErrUnsupported) {
		t.Fatalf("bfloat16 on NCCL 2.7.8: %v", err)
	}
	if err := comm.Run(ctx)(cs[0].AllReduce(ctx, comm.FromSlice([]float32{1}), comm.Sum)); err != nil {
		t.Fatal(err)
	}
}

// Issue 26: two ranks of one host on one GPU (here ranks of one process,
// each told it is alone on its host) are refused by NCCL, both of them and
// at once, not one refused and the other left waiting for it.
func TestDuplicateGPU(t *testing.T) {
	cudafake.RequireFake(t)
	ss := stores(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			c, err := nccl.New(ctx, comm.Config{Rank: r, Size: 2, LocalRank: 0, LocalSize: 1, Store: ss[r], Job: t.Name()})
			if err == nil {
				c.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "Duplicate GPU") {
			t.Errorf("rank %d: %v, want NCCL's \"Duplicate GPU\"", r, err)
		}
	}
}

// Issue 26, seen on an H200: a killed peer comes back from NCCL (over
// sockets) as an asynchronous ncclRemoteError that names no rank. In a
// world of two ranks the error names the other rank, as the heartbeat's
// would, instead of leaving the user to guess.
func TestAsyncErrorNamesPeer(t *testing.T) {
	cudafake.RequireFake(t)
	t.Setenv("FAKE_NCCL_FAIL_AFTER", "2") // #0 is New's connecting all-reduce
	cs := newWorld(t, 2, comm.Options{})
	os.Unsetenv("FAKE_NCCL_FAIL_AFTER")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := []float32{1}
			if errs[r] = comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(x), comm.Sum)); errs[r] != nil {
				return
			}
			errs[r] = comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(x), comm.Sum))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		// The fake fails both ranks at once, so a rank may hear of it
		// first from the other's notice ("rank 1-r reported it lost"),
		// which names the other rank too.
		var pe *comm.PeerError
		named := errors.As(err, &pe) && (pe.Rank == 1-r || strings.Contains(err.Error(), fmt.Sprintf("rank %d reported it lost", 1-r)))
		if !named || !strings.Contains(err.Error(), "remote process exited") {
			t.Errorf("rank %d: want a PeerError naming rank %d with NCCL's message, got %v", r, 1-r, err)
		}
	}
}
