package cuda_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

func TestRealGPU(t *testing.T) {
	cudafake.RequireReal(t)
	t.Log(cuda.Info())
	if cuda.DeviceCount() < 1 {
		t.Fatal("no device")
	}
}

func TestAvailable(t *testing.T) {
	cudafake.RequireCUDA(t)
	ok, why := cuda.Available()
	if !ok {
		t.Fatalf("Available: %s", why)
	}
	t.Logf("mode %s: %s", cudafake.Mode(), cuda.Info())
	if _, err := cuda.PCIBusID(0); err != nil {
		t.Fatal(err)
	}
}

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
	os.Setenv(cuda.EnvLibrary, "/nonexistent/libcudart.so.12")
	cuda.Reload()
	ok, why := cuda.Available()
	if strings.Contains(why, "without cgo") {
		t.Skip(why)
	}
	if ok || !strings.Contains(why, "/nonexistent/libcudart.so.12") {
		t.Fatalf("Available() = %v, %q; want false naming the library", ok, why)
	}
	if _, err := cuda.Malloc(0, 16); !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), "nonexistent") {
		t.Fatalf("Malloc without CUDA: %v", err)
	}
	if got := cuda.Info(); !strings.HasPrefix(got, "no CUDA: ") {
		t.Fatalf("Info() = %q", got)
	}
}

func TestPointerInfo(t *testing.T) {
	cudafake.RequireCUDA(t)
	p := cudafake.Malloc(t, 0, 64)
	if typ, dev, err := cuda.PointerInfo(0, p); err != nil || typ != cuda.DeviceMemory || dev != 0 {
		t.Fatalf("PointerInfo(device) = %v, %d, %v", typ, dev, err)
	}
	h := cudafake.HostAlloc(t, 0, 64)
	if typ, _, err := cuda.PointerInfo(0, uintptr(ptrOf(h))); err != nil || typ != cuda.HostPinned {
		t.Fatalf("PointerInfo(pinned) = %v, %v", typ, err)
	}
	g := make([]byte, 64)
	if typ, _, err := cuda.PointerInfo(0, uintptr(ptrOf(g))); err != nil || typ != cuda.Unregistered {
		t.Fatalf("PointerInfo(Go memory) = %v, %v", typ, err)
	}
}

// The fake catches misuse that real CUDA would turn into corruption.
func TestFakeCatchesMisuse(t *testing.T) {
	cudafake.RequireFake(t)
	ptr, err := cuda.Malloc(0, 16)
	if err != nil {
		t.Fatal(err)
	}
	var ce *cuda.Error
	err = cuda.CopyHtoD(0, ptr, make([]byte, 17))
	if !errors.As(err, &ce) || ce.Code != 1 || !strings.Contains(err.Error(), "cudaMemcpy") {
		t.Fatalf("copy past the end: %v", err)
	}
	if err := cuda.CopyHtoD(0, ptr+8, make([]byte, 8)); err != nil {
		t.Fatalf("copy to the last 8 bytes: %v", err)
	}
	s := cudafake.NewStream(t, 0, true)
	g := make([]byte, 16)
	if err := s.CopyAsync(uintptr(ptrOf(g)), ptr, 16, cuda.DeviceToHost); err == nil {
		t.Fatal("async copy to pageable memory accepted")
	}
	if err := cuda.Free(0, ptr); err != nil {
		t.Fatal(err)
	}
	if err := cuda.Free(0, ptr); err == nil {
		t.Fatal("double free accepted")
	}
	if err := cuda.CopyDtoH(0, g, ptr); err == nil {
		t.Fatal("copy from freed memory accepted")
	}
	if _, err := cuda.Malloc(cuda.DeviceCount(), 16); err == nil || !strings.Contains(err.Error(), "cudaErrorInvalidDevice") {
		t.Fatalf("Malloc on a device past the last: %v", err)
	}
}

func TestStreamsAndEvents(t *testing.T) {
	cudafake.RequireCUDA(t)
	const n = 1 << 20
	s := cudafake.NewStream(t, 0, true)
	ev := cudafake.NewEvent(t, 0)
	scratch := cudafake.NewEvent(t, 0)
	if done, err := ev.Query(); !done || err != nil {
		t.Fatalf("a fresh event: done %v, %v", done, err)
	}
	in := cudafake.HostAlloc(t, 0, n)
	out := cudafake.HostAlloc(t, 0, n)
	for i := range in {
		in[i] = byte(i * 7)
	}
	d := cudafake.Malloc(t, 0, n)
	if err := s.WaitDefault(scratch); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyAsync(d, uintptr(ptrOf(in)), n, cuda.HostToDevice); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyAsync(uintptr(ptrOf(out)), d, n, cuda.DeviceToHost); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := ev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := ev.Query(); !done || err != nil {
		t.Fatalf("after Synchronize: done %v, %v", done, err)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("async round trip changed the data")
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

func TestPool(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, p := range []*cuda.Pool{cuda.NewPinnedPool(0, 1<<20), cuda.NewDevicePool(0, 1<<20)} {
		b, err := p.Get(1000)
		if err != nil {
			t.Fatal(err)
		}
		if b.Bytes != 1000 || (b.Host != nil && len(b.Host) != 1000) {
			t.Fatalf("block %+v", b)
		}
		ptr := b.Ptr
		p.Put(b)
		b2, err := p.Get(700)
		if err != nil {
			t.Fatal(err)
		}
		if b2.Ptr != ptr {
			t.Fatal("a block of the same size class was not reused")
		}
		big, err := p.Get(2 << 20) // larger than the limit: freed on Put
		if err != nil {
			t.Fatal(err)
		}
		p.Put(big)
		p.Put(b2)
		p.Close()
		if _, err := p.Get(1); err == nil {
			t.Fatal("Get on a closed pool")
		}
	}
}
