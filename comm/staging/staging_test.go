package staging_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	_ "github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/comm/staging"
	_ "github.com/gdist/gdist/comm/tcp"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

var token = []byte("staging-test-token")

func TestRealGPU(t *testing.T) {
	cudafake.RequireReal(t)
	t.Log(cuda.Info())
}

// newWorld builds n Comms of backend through the registry and applies
// staging.Adapt: with CUDA (real or fake) they are wrapped with
// staging.Wrap.
func newWorld(t testing.TB, backend string, n int) []comm.Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stores []comm.Store
	if backend == "tcp" {
		srv, err := rendezvous.NewServer("127.0.0.1:0", token, func(string, ...any) {})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		for range n {
			s, err := rendezvous.Dial(ctx, srv.Addr(), token)
			if err != nil {
				t.Fatal(err)
			}
			stores = append(stores, s)
		}
		t.Cleanup(func() {
			for _, s := range stores {
				s.Close()
			}
		})
	}
	if stores == nil {
		stores = make([]comm.Store, n) // inproc needs none
	}
	cs := commtest.RegistryWorld(backend, func(testing.TB, int) []comm.Store { return stores },
		comm.Config{Token: token, Logf: func(string, ...any) {}})(t, n)
	for r, c := range cs {
		cs[r] = staging.Adapt(c)
	}
	return cs
}

// deviceWorld is a commtest.World whose Comms take the suite's host buffers,
// copy them to the GPU (WrapDevice) and hand the device buffers to a host
// backend, which stages them back through pinned memory (the registry's
// Wrap). So the suite exercises the host backends with device buffers.
func deviceWorld(backend string) commtest.World {
	return func(t testing.TB, n int) []comm.Comm {
		cs := newWorld(t, backend, n)
		for r, c := range cs {
			if !staging.DeviceCapable(c) {
				t.Fatalf("staging.Adapt(%q's Comm) with CUDA did not wrap it: %T", backend, c)
			}
			cs[r] = staging.WrapDevice(c, r%cuda.DeviceCount())
		}
		return cs
	}
}

func TestConformanceInprocDevice(t *testing.T) {
	cudafake.RequireCUDA(t)
	cfg := commtest.Config{Sizes: []int{2, 3, 4}, Large: 1<<16 + 3}
	if testing.Short() {
		cfg = commtest.Config{Sizes: []int{2, 4}, Large: 4099}
	}
	commtest.Suite(t, deviceWorld("inproc"), cfg)
}

func TestConformanceTCPDevice(t *testing.T) {
	cudafake.RequireCUDA(t)
	cfg := commtest.Config{Sizes: []int{3}, Large: 4099}
	if testing.Short() {
		cfg.Sizes = []int{2}
	}
	commtest.Suite(t, deviceWorld("tcp"), cfg)
}

func run(t *testing.T, cs []comm.Comm, fn func(ctx context.Context, c comm.Comm) error) {
	t.Helper()
	if err := commtest.RunRanks(context.Background(), cs, 30*time.Second, fn); err != nil {
		t.Fatal(err)
	}
}

// Device buffers given straight to the wrapped host backend, mixed with
// host buffers, in place and not.
func TestDeviceBuffersDirect(t *testing.T) {
	cudafake.RequireCUDA(t)
	const n, k = 3, 1000
	cs := newWorld(t, "inproc", n)
	run(t, cs, func(ctx context.Context, c comm.Comm) error {
		r := c.Rank()
		dev := r % cuda.DeviceCount()
		host := make([]float32, n*k)
		for i := range host {
			host[i] = float32(r*100000 + i)
		}
		d, err := staging.Upload(dev, comm.FromSlice(host))
		if err != nil {
			return err
		}
		defer staging.FreeBuffer(d)
		// In-place all-gather: src is this rank's slice of the device dst.
		if err := comm.Run(ctx)(c.AllGather(ctx, d, d.Slice(r*k, (r+1)*k))); err != nil {
			return err
		}
		got := make([]float32, n*k)
		if err := staging.Copy(comm.FromSlice(got), d); err != nil {
			return err
		}
		for i, v := range got {
			q := i / k
			if want := float32(q*100000 + i); v != want {
				return fmt.Errorf("in-place all_gather element %d: %v, want %v", i, v, want)
			}
		}
		// Device src, host dst.
		out := make([]float32, n*k)
		if err := comm.Run(ctx)(c.AllGather(ctx, comm.FromSlice(out), d.Slice(0, k))); err != nil {
			return err
		}
		for i, v := range out {
			if want := float32(i % k); v != want {
				return fmt.Errorf("mixed all_gather element %d: %v, want %v", i, v, want)
			}
		}
		// Reduce to root 1: the other ranks' device buffers stay as they were.
		x := []int64{int64(r + 1), 7}
		dx, err := staging.Upload(dev, comm.FromSlice(x))
		if err != nil {
			return err
		}
		defer staging.FreeBuffer(dx)
		if err := comm.Run(ctx)(c.Reduce(ctx, dx, comm.Prod, 1)); err != nil {
			return err
		}
		if err := staging.Copy(comm.FromSlice(x), dx); err != nil {
			return err
		}
		want := []int64{int64(r + 1), 7}
		if r == 1 {
			want = []int64{6, 343}
		}
		if x[0] != want[0] || x[1] != want[1] {
			return fmt.Errorf("reduce: %v, want %v", x, want)
		}
		return nil
	})
}

// A device buffer whose memory CUDA does not know, or that names the wrong
// device, is a bad argument; the Comm stays usable.
func TestBadDeviceBuffers(t *testing.T) {
	cudafake.RequireCUDA(t)
	cs := newWorld(t, "inproc", 2)
	run(t, cs, func(ctx context.Context, c comm.Comm) error {
		if _, err := c.AllReduce(ctx, comm.DeviceBuffer(0x1000, 0, comm.Float32, 4), comm.Sum); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("unknown device address: %v", err)
		}
		if cuda.DeviceCount() > 1 {
			d, err := staging.NewBuffer(0, comm.Float32, 4)
			if err != nil {
				return err
			}
			defer staging.FreeBuffer(d)
			p, _ := d.Device()
			if _, err := c.AllReduce(ctx, comm.DeviceBuffer(p, 1, comm.Float32, 4), comm.Sum); !errors.Is(err, comm.ErrInvalidArgument) {
				return fmt.Errorf("wrong device: %v", err)
			}
		}
		return comm.Run(ctx)(c.Barrier(ctx))
	})
}

// Without CUDA the registry does not wrap, and a device buffer given to
// Wrap is refused with the reason.
func TestNoCUDA(t *testing.T) {
	old, had := os.LookupEnv(cuda.EnvLibrary)
	defer func() {
		if had {
			os.Setenv(cuda.EnvLibrary, old)
		} else {
			os.Unsetenv(cuda.EnvLibrary)
		}
		cuda.Reload()
	}()
	os.Setenv(cuda.EnvLibrary, "/nonexistent/libcudart.so")
	cuda.Reload()
	cs := newWorld(t, "inproc", 1)
	if staging.DeviceCapable(cs[0]) {
		t.Fatalf("staging.Adapt wrapped the Comm without CUDA: %T", cs[0])
	}
	w := staging.Wrap(cs[0])
	ctx := context.Background()
	_, err := w.AllReduce(ctx, comm.DeviceBuffer(0x1000, 0, comm.Float32, 4), comm.Sum)
	if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "CUDA is not available") {
		t.Fatalf("device buffer without CUDA: %v", err)
	}
	// Host buffers still work.
	x := []float32{3}
	if err := comm.Run(ctx)(w.AllReduce(ctx, comm.FromSlice(x), comm.Sum)); err != nil || x[0] != 3 {
		t.Fatalf("host all_reduce: %v, %v", x, err)
	}
}

// The wrapper forwards Traffic when the wrapped Comm counts it.
func TestTrafficForwarded(t *testing.T) {
	cudafake.RequireCUDA(t)
	cs := newWorld(t, "inproc", 2)
	run(t, cs, func(ctx context.Context, c comm.Comm) error {
		return comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(make([]float32, 100)), comm.Sum))
	})
	tc, ok := cs[0].(comm.TrafficCounter)
	if !ok {
		t.Fatalf("%T does not count traffic", cs[0])
	}
	if s, r := tc.Traffic(); s == 0 || r == 0 {
		t.Fatalf("Traffic() = %d, %d", s, r)
	}
}

// Importing comm/staging (and comm/nccl, which imports it) changes nothing
// that comm.New builds: staging is applied at the call site (New, Adapt).
func TestNoImportSideEffect(t *testing.T) {
	cudafake.RequireCUDA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := comm.Config{Rank: 0, Size: 1, Job: t.Name()}
	c, err := comm.New(ctx, "inproc", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if staging.DeviceCapable(c) {
		t.Fatalf("comm.New(\"inproc\") returned %T: importing comm/staging wrapped it", c)
	}
	s, err := staging.New(ctx, "inproc", comm.Config{Rank: 0, Size: 1, Job: t.Name() + "/staged"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !staging.DeviceCapable(s) {
		t.Fatalf("staging.New(\"inproc\") with CUDA returned %T, which does not take device buffers", s)
	}
}
