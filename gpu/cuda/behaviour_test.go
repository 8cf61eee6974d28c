package cuda_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Issue 17, item 1: every call that needs a CUDA context makes the caller's
// device current first. Each step runs on a thread whose current device is
// 0 (set by a Malloc there), so a call that does not set the device would
// make (or use) a context on device 0, which the fake reports.
func TestCallsSetTheDevice(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 3
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := cudafake.Malloc(t, dev, 64)
	ev, err := cuda.NewEvent(dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cudafake.NewStream(t, dev, true)
	var pinned []byte
	steps := []struct {
		name string
		fn   func() error
	}{
		{"HostAlloc", func() (err error) { pinned, err = cuda.HostAlloc(dev, 64); return }},
		{"PointerInfo", func() error { _, _, err := cuda.PointerInfo(dev, d); return err }},
		{"CopyHtoD", func() error { return cuda.CopyHtoD(dev, d, make([]byte, 64)) }},
		{"CopyDtoH", func() error { return cuda.CopyDtoH(dev, make([]byte, 64), d) }},
		{"Memset", func() error { return cuda.Memset(dev, d, 1, 64) }},
		{"Event.Record", func() error { return ev.Record(s) }},
		{"Event.Query", func() error { _, err := ev.Query(); return err }},
		{"Event.Synchronize", ev.Synchronize},
		{"Stream.Synchronize", s.Synchronize},
		{"Event.Destroy", ev.Destroy},
		{"FreeHost", func() error { return cuda.FreeHost(dev, pinned) }},
	}
	for _, st := range steps {
		p0, err := cuda.Malloc(0, 16) // this thread's device is now 0
		if err != nil {
			t.Fatal(err)
		}
		cudafake.ResetContexts(t)
		if err := st.fn(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		mask, implicit, last := cudafake.Contexts(t)
		if mask != 1<<dev || implicit != 0 {
			t.Errorf("%s on cuda:%d used contexts %b (implicit %d, %s), want only device %d's", st.name, dev, mask, implicit, last, dev)
		}
		if err := cuda.Free(0, p0); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 17, item 6: the host slice of a synchronous copy stays alive while
// C reads or writes it, even when the caller holds no other reference (a
// temporary). The fake slows the copy down while the garbage collector runs.
func TestCopyKeepsHostMemoryAlive(t *testing.T) {
	cudafake.RequireFake(t)
	const n = 1 << 20
	d := cudafake.Malloc(t, 0, n)
	cudafake.CopyDelay(t, 300*time.Millisecond)
	defer cudafake.CopyDelay(t, 0)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	for _, dir := range []string{"host to device", "device to host"} {
		freed := make(chan struct{})
		copyTemp(t, dir, d, n, freed)
		select {
		case <-freed:
			t.Errorf("copy %s: the garbage collector freed the host slice while cudaMemcpy used it", dir)
		default:
		}
	}
}

// copyTemp copies between d and a fresh slice that nothing else references,
// and closes freed when the slice is collected.
//
//go:noinline
func copyTemp(t *testing.T, dir string, d uintptr, n int, freed chan struct{}) {
	b := make([]byte, n)
	runtime.AddCleanup(&b[0], func(ch chan struct{}) { close(ch) }, freed)
	var err error
	if dir == "host to device" {
		err = cuda.CopyHtoD(0, d, b)
	} else {
		err = cuda.CopyDtoH(0, b, d)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Issue 17, item 7: Put, Discard and Close never wait for the device (a
// real cudaFree does), since they run where the device's work may wait for
// this rank: here a stream holds the device busy until the test opens the
// gate, and the pools, which are full (limit 0), must still return at once.
func TestPoolNeverWaitsForTheDevice(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 1
	s := cudafake.NewStream(t, dev, true)
	cudafake.Gate(t, false)
	opened := false
	open := func() {
		if !opened {
			opened = true
			cudafake.Gate(t, true)
		}
	}
	defer open()
	for _, p := range []*cuda.Pool{cuda.NewPinnedPool(dev, 0), cuda.NewDevicePool(dev, 0)} {
		a, err := p.Get(1000)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.Get(1000)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.LaunchHostFunc(cudafake.HoldFunc(t), 0); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			p.Put(a) // the pool is full: a is freed
			p.Discard(b)
			p.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Errorf("Pool.Put/Discard/Close waited for the busy device (cudaFree on the completion path)")
			open()
			<-done
		}
		open()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		p.Flush()
		opened = false
		cudafake.Gate(t, false)
	}
}

// Issue 17, item 5: the CUDA 13 runtime is tried by name, and the runtimes
// of NVIDIA's pip wheels in the active virtualenv are found (CUDA 13's under
// nvidia/cu13/lib), before the system's.
func TestFindsCUDA13Wheel(t *testing.T) {
	cudafake.RequireFake(t)
	found := false
	for _, n := range cuda.DefaultLibraries {
		found = found || n == "libcudart.so.13"
	}
	if !found {
		t.Errorf("DefaultLibraries = %v: no libcudart.so.13", cuda.DefaultLibraries)
	}
	t.Cleanup(cuda.Reload) // after the environment is restored
	venv := t.TempDir()
	dir := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wheel := filepath.Join(dir, "libcudart.so.13")
	if err := os.Symlink(cudafake.Path(), wheel); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VIRTUAL_ENV", venv)
	t.Setenv("CONDA_PREFIX", "")
	t.Setenv(cuda.EnvLibrary, "")
	os.Unsetenv(cuda.EnvLibrary)
	cuda.Reload()
	if path, _ := cuda.Loaded(); path != wheel {
		_, why := cuda.Available()
		t.Fatalf("with a CUDA 13 wheel in $VIRTUAL_ENV, loaded %q (%s), want %s", path, why, wheel)
	}
}

// Issue 17, item 10: copies to the device and memsets are asynchronous to
// the host (queued on the legacy default stream), as with the real runtime,
// and the copies back to the host see them: here they complete 200 ms after
// the call returns, so a copy to the host that did not wait would read
// stale bytes.
func TestDeviceCopiesAreAsynchronous(t *testing.T) {
	cudafake.RequireFake(t)
	const dev, n = 2, 4096
	a := cudafake.Malloc(t, dev, n)
	b := cudafake.Malloc(t, dev, n)
	ev := cudafake.NewEvent(t, dev)
	cudafake.CopyDelay(t, 200*time.Millisecond)
	defer cudafake.CopyDelay(t, 0)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	if err := cuda.Memset(dev, a, 7, n); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyHtoD(dev, b, src); err != nil {
		t.Fatal(err)
	}
	clear(src) // the source may be reused once the call returns
	if err := cuda.CopyDtoD(dev, a, b, n/2); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(nil); err != nil {
		t.Fatal(err)
	}
	if done, err := ev.Query(); err != nil || done {
		t.Fatalf("the default stream is done (%v, %v) right after a delayed memset and copies: they ran synchronously", done, err)
	}
	got := make([]byte, n)
	if err := cuda.CopyDtoH(dev, got, a); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		want := byte(7)
		if i < n/2 {
			want = byte(i)
		}
		if v != want {
			t.Fatalf("byte %d after memset 7, a copy from the host and half of it copied on the device: %d, want %d", i, v, want)
		}
	}
}
