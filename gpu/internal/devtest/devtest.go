// Package devtest holds the helpers that the tests of the GPU packages
// share: device buffers of float32 or int32 filled from and read back into
// Go slices, freed when the test ends.
package devtest

import (
	"testing"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Bytes views v's memory as bytes (no copy).
func Bytes[T float32 | int32 | uint16](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(z)))
}

// Alloc allocates n elements of size bytes each on dev, freed when t ends.
func Alloc(t testing.TB, dev, n, size int) uintptr {
	t.Helper()
	return cudafake.Malloc(t, dev, max(n, 1)*size)
}

// Upload copies v to a new device buffer on dev (freed when t ends). The
// copy is queued on the legacy default stream: work on blocking streams
// (cuda.NewStream(dev, false)) sees it.
func Upload[T float32 | int32 | uint16](t testing.TB, dev int, v []T) uintptr {
	t.Helper()
	var z T
	p := Alloc(t, dev, len(v), int(unsafe.Sizeof(z)))
	Put(t, dev, p, v)
	return p
}

// Put copies v to the device buffer p and waits until it is there, for
// the work queued later on any stream of dev (non-blocking ones too:
// cudaDeviceSynchronize after the copy).
func Put[T float32 | int32 | uint16](t testing.TB, dev int, p uintptr, v []T) {
	t.Helper()
	if err := cuda.CopyHtoD(dev, p, Bytes(v)); err != nil {
		t.Fatal(err)
	}
	if err := cuda.DeviceSynchronize(dev); err != nil {
		t.Fatal(err)
	}
}

// Floats reads n float32s at device address p, after the work queued before
// on every stream of dev (non-blocking ones too, such as a placed model's:
// cudaDeviceSynchronize first).
func Floats(t testing.TB, dev int, p uintptr, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if n == 0 {
		return out
	}
	if err := cuda.DeviceSynchronize(dev); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyDtoH(dev, Bytes(out), p); err != nil {
		t.Fatal(err)
	}
	return out
}

// Int32s reads n int32s at device address p, as Floats does.
func Int32s(t testing.TB, dev int, p uintptr, n int) []int32 {
	t.Helper()
	out := make([]int32, n)
	if err := cuda.DeviceSynchronize(dev); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyDtoH(dev, Bytes(out), p); err != nil {
		t.Fatal(err)
	}
	return out
}

// Stream makes a blocking stream on dev (ordered with the legacy default
// stream, so Upload and Floats need no other synchronization), destroyed
// when t ends.
func Stream(t testing.TB, dev int) *cuda.Stream {
	t.Helper()
	return cudafake.NewStream(t, dev, false)
}
