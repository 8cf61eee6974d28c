//go:build cgo

package cuda

/*
#include "shim.h"
*/
import "C"

import "fmt"

// Stream is a CUDA stream on one device. Work queued on a stream runs in
// order. The zero Stream is not usable; make one with NewStream. A Stream
// may be used from several goroutines.
type Stream struct {
	l   *library
	h   C.uintptr_t
	dev int
}

// NewStream creates a stream on device. A non-blocking stream
// (cudaStreamNonBlocking) does not synchronize with the legacy default
// stream; a blocking one does.
func NewStream(device int, nonBlocking bool) (*Stream, error) {
	l, err := lib()
	if err != nil {
		return nil, err
	}
	flags := C.uint(C.gdcu_cudaStreamDefault)
	if nonBlocking {
		flags = C.gdcu_cudaStreamNonBlocking
	}
	var h C.uintptr_t
	if e := C.gdcu_stream_create(l.c, C.int(device), flags, &h); e != 0 {
		return nil, fmt.Errorf("%w (cuda:%d)", l.err("cudaStreamCreateWithFlags", e), device)
	}
	return &Stream{l: l, h: h, dev: device}, nil
}

// Handle is the cudaStream_t, for passing to other libraries (NCCL).
func (s *Stream) Handle() uintptr { return uintptr(s.h) }

// Device is the stream's device.
func (s *Stream) Device() int { return s.dev }

// Synchronize blocks until all work queued on s is done.
func (s *Stream) Synchronize() error {
	return s.l.err("cudaStreamSynchronize", C.gdcu_stream_sync(s.l.c, C.int(s.dev), s.h))
}

// Destroy releases s; work already queued still runs.
func (s *Stream) Destroy() error {
	return s.l.err("cudaStreamDestroy", C.gdcu_stream_destroy(s.l.c, C.int(s.dev), s.h))
}

// WaitEvent makes later work on s wait until e's last recorded work is done
// (cudaStreamWaitEvent); it does not block the caller.
func (s *Stream) WaitEvent(e *Event) error {
	return s.l.err("cudaStreamWaitEvent", C.gdcu_stream_wait_event(s.l.c, C.int(s.dev), s.h, e.h))
}

// WaitDefault makes later work on s wait for everything queued so far on the
// legacy default stream (where synchronous copies and default-stream kernels
// run), using scratch, an event of s's device, as the marker.
func (s *Stream) WaitDefault(scratch *Event) error {
	if err := scratch.Record(nil); err != nil {
		return err
	}
	return s.WaitEvent(scratch)
}

// CopyAsync queues a copy of n bytes from src to dst on s. Host addresses
// must be pinned memory (HostAlloc), which must stay allocated until the
// copy is done.
func (s *Stream) CopyAsync(dst, src uintptr, n int, kind CopyKind) error {
	if n == 0 {
		return nil
	}
	e := C.gdcu_memcpy_async(s.l.c, C.int(s.dev), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.int(kind), s.h)
	return s.l.err("cudaMemcpyAsync", e)
}

// MemsetAsync queues setting n bytes at device address p to v on s
// (cudaMemsetAsync).
func (s *Stream) MemsetAsync(p uintptr, v byte, n int) error {
	if n == 0 {
		return nil
	}
	return s.l.err("cudaMemsetAsync", C.gdcu_memset_async(s.l.c, C.int(s.dev), C.uintptr_t(p), C.int(v), C.size_t(n), s.h))
}

// DeviceSynchronize blocks until device has done all the work queued
// on it, on every stream (cudaDeviceSynchronize): for tests and tools
// that read or write buffers that non-blocking streams use; a library
// waits for an event or a stream instead.
func DeviceSynchronize(device int) error {
	l, err := lib()
	if err != nil {
		return err
	}
	if l.c.deviceSynchronize == nil {
		return fmt.Errorf("%w: this CUDA runtime has no cudaDeviceSynchronize", ErrUnavailable)
	}
	return l.err("cudaDeviceSynchronize", C.gdcu_device_sync(l.c, C.int(device)))
}

// StreamOf is the stream with handle h (a cudaStream_t) on device, made
// elsewhere (by NCCL, say), for WaitEvent, CopyAsync and Event.Record.
// Its maker owns it: never Destroy it.
func StreamOf(device int, h uintptr) (*Stream, error) {
	l, err := lib()
	if err != nil {
		return nil, err
	}
	return &Stream{l: l, h: C.uintptr_t(h), dev: device}, nil
}

// HasHostFunc reports whether the runtime has cudaLaunchHostFunc (CUDA 10+).
func HasHostFunc() bool {
	s := get()
	return s.lib != nil && s.lib.c.launchHostFunc != nil
}

// LaunchHostFunc queues a call of the C function fn(arg) on s
// (cudaLaunchHostFunc): it runs on a runtime thread once earlier work on s
// is done, and later work waits for it. fn must not call CUDA.
func (s *Stream) LaunchHostFunc(fn, arg uintptr) error {
	if s.l.c.launchHostFunc == nil {
		return fmt.Errorf("%w: this CUDA runtime has no cudaLaunchHostFunc (CUDA 10 or later needed)", ErrUnavailable)
	}
	e := C.gdcu_launch_host_func(s.l.c, C.int(s.dev), s.h, C.uintptr_t(fn), C.uintptr_t(arg))
	return s.l.err("cudaLaunchHostFunc", e)
}

// Event is a CUDA event (created without timing, the cheap kind, but
// by NewTimingEvent). Record
// marks a point in a stream; Query and Synchronize tell when the work before
// it is done.
type Event struct {
	l   *library
	h   C.uintptr_t
	dev int
}

// NewEvent creates an event on device (cudaEventDisableTiming).
func NewEvent(device int) (*Event, error) { return newEvent(device, C.gdcu_cudaEventDisableTiming) }

// NewBlockingEvent creates an event on device whose Synchronize blocks the
// calling thread in the driver until the work is done, instead of spinning
// (cudaEventDisableTiming | cudaEventBlockingSync).
func NewBlockingEvent(device int) (*Event, error) {
	return newEvent(device, C.gdcu_cudaEventDisableTiming|C.gdcu_cudaEventBlockingSync)
}

// NewTimingEvent creates an event on device that records when the work
// before it finished (cudaEventDefault), for ElapsedMs: a profiler's event.
func NewTimingEvent(device int) (*Event, error) { return newEvent(device, C.gdcu_cudaEventDefault) }

func newEvent(device int, flags C.uint) (*Event, error) {
	l, err := lib()
	if err != nil {
		return nil, err
	}
	var h C.uintptr_t
	if e := C.gdcu_event_create(l.c, C.int(device), flags, &h); e != 0 {
		return nil, fmt.Errorf("%w (cuda:%d)", l.err("cudaEventCreateWithFlags", e), device)
	}
	return &Event{l: l, h: h, dev: device}, nil
}

// Handle is the cudaEvent_t.
func (e *Event) Handle() uintptr { return uintptr(e.h) }

// Record marks the current end of s (nil: the legacy default stream).
func (e *Event) Record(s *Stream) error {
	var sh C.uintptr_t
	if s != nil {
		sh = s.h
	}
	return e.l.err("cudaEventRecord", C.gdcu_event_record(e.l.c, C.int(e.dev), e.h, sh))
}

// Query reports whether the work before the last Record is done, without
// blocking. An event never recorded is done.
func (e *Event) Query() (bool, error) {
	switch c := C.gdcu_event_query(e.l.c, C.int(e.dev), e.h); c {
	case C.gdcu_cudaSuccess:
		return true, nil
	case C.gdcu_cudaErrorNotReady:
		return false, nil
	default:
		return false, e.l.err("cudaEventQuery", c)
	}
}

// Synchronize blocks until the work before the last Record is done.
func (e *Event) Synchronize() error {
	return e.l.err("cudaEventSynchronize", C.gdcu_event_sync(e.l.c, C.int(e.dev), e.h))
}

// Destroy releases e (pending work is unaffected).
func (e *Event) Destroy() error {
	return e.l.err("cudaEventDestroy", C.gdcu_event_destroy(e.l.c, C.int(e.dev), e.h))
}

// ElapsedMs is the time in milliseconds between the completion of e's
// last Record and that of end's (cudaEventElapsedTime; resolution about
// half a microsecond). Both must be timing events (NewTimingEvent) of one
// device, recorded and done (Synchronize end first); otherwise it fails.
// It does not block.
func (e *Event) ElapsedMs(end *Event) (float32, error) {
	if e.l.c.eventElapsedTime == nil {
		return 0, fmt.Errorf("%w: this CUDA runtime has no cudaEventElapsedTime", ErrUnavailable)
	}
	var ms C.float
	if c := C.gdcu_event_elapsed(e.l.c, C.int(e.dev), e.h, end.h, &ms); c != 0 {
		return 0, e.l.err("cudaEventElapsedTime", c)
	}
	return float32(ms), nil
}
