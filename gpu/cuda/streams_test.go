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
	a, b := cudafake.NewStream(t, dev, true), cudafake.NewStream(t, dev, true)
	ev := cudafake.NewEvent(t, dev)
	buf, pin := cudafake.Malloc(t, dev, 2*n), cudafake.HostAlloc(t, dev, n)
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

// TestWaitIsForItsRecord: a stream's wait for an event is for the
// record made before the wait was queued, not for a later one: recorded
// on a slowed stream, waited for by a second, then recorded again on a
// fast third whose record completes first, the second stream still runs
// after the slowed one's work (CUDA's semantics; the fake once let the
// later record release the wait).
func TestWaitIsForItsRecord(t *testing.T) {
	cudafake.RequireFake(t)
	const dev, n = 0, 64
	slow, waiter, fast := cudafake.NewStream(t, dev, true), cudafake.NewStream(t, dev, true), cudafake.NewStream(t, dev, true)
	ev := cudafake.NewEvent(t, dev)
	buf, pin := cudafake.Malloc(t, dev, 2*n), cudafake.HostAlloc(t, dev, n)
	if err := cuda.Memset(dev, buf, 0, 2*n); err != nil {
		t.Fatal(err)
	}
	if err := cuda.DeviceSynchronize(dev); err != nil {
		t.Fatal(err)
	}
	cudafake.StreamDelay(t, slow, 50*time.Millisecond)
	if err := slow.MemsetAsync(buf, 5, n); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(slow); err != nil {
		t.Fatal(err)
	}
	if err := waiter.WaitEvent(ev); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(fast); err != nil { // done at once
		t.Fatal(err)
	}
	if err := waiter.CopyAsync(uintptr(unsafe.Pointer(&pin[0])), buf, n, cuda.DeviceToHost); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pin, bytes.Repeat([]byte{5}, n)) {
		t.Fatalf("read %v...: the wait ended with the later record, before the slowed stream's memset", pin[:4])
	}
}
