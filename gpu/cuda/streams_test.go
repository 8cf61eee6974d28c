package cuda_test

import (
	"bytes"
	"testing"
	"time"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestNonBlockingStreamsNeedEvents: two non-blocking streams run
// independently: with the first slowed down (cudafake.StreamDelay) a copy
// on the second that does not wait for it reads the buffer before the
// first's memset and copy ran (the fake catches a missing wait); one
// that waits for an event recorded on the first reads their result.
// The legacy default stream does not order them either.
func TestNonBlockingStreamsNeedEvents(t *testing.T) {
	cudafake.RequireFake(t)
	const dev, n = 0, 256
	a, err := cuda.NewStream(dev, true)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Destroy()
	b, err := cuda.NewStream(dev, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	ev, err := cuda.NewEvent(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	buf, err := cuda.Malloc(dev, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.Free(dev, buf)
	pin, err := cuda.HostAlloc(dev, n)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.FreeHost(dev, pin)
	host := uintptr(unsafe.Pointer(&pin[0]))
	run := func(v byte, wait bool) []byte {
		t.Helper()
		if err := cuda.Memset(dev, buf, 0, 2*n); err != nil {
			t.Fatal(err)
		}
		if err := cuda.CopyDtoH(dev, pin, buf); err != nil { // waits for the memset
			t.Fatal(err)
		}
		cudafake.StreamDelay(t, a, 30*time.Millisecond)
		defer cudafake.StreamDelay(t, a, 0)
		if err := a.MemsetAsync(buf+n, v, n); err != nil {
			t.Fatal(err)
		}
		if err := a.CopyAsync(buf, buf+n, n, cuda.DeviceToDevice); err != nil {
			t.Fatal(err)
		}
		if wait {
			if err := ev.Record(a); err != nil {
				t.Fatal(err)
			}
			if err := b.WaitEvent(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.CopyAsync(host, buf, n, cuda.DeviceToHost); err != nil {
			t.Fatal(err)
		}
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
		out := bytes.Clone(pin)
		if err := a.Synchronize(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := run(7, true); !bytes.Equal(got, bytes.Repeat([]byte{7}, n)) {
		t.Errorf("waiting for the event: read %v..., want 7s", got[:4])
	}
	if got := run(9, false); bytes.Equal(got, bytes.Repeat([]byte{9}, n)) {
		t.Errorf("not waiting for the slowed stream: read its result all the same; the fake ordered the non-blocking streams")
	}
}
