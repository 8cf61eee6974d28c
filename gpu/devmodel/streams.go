package devmodel

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
)

// Streams and events.
//
// The model's work is queued on its own stream (Stream), a non-blocking
// one (cudaStreamNonBlocking): nothing orders it with the legacy default
// stream, where cudaMemcpy and cudaMemset run, so every dependency
// between it and other work is an explicit event or a host wait:
//
//   - In a step, the batch and labels go up from pinned host memory on
//     the stream itself (CopyAsync), and an event recorded after them is
//     waited for before that memory is written again; the loss (and
//     Eval's counts, GradNorm's norm) comes down into pinned memory on
//     the stream, the step's one host wait (on a blocking-sync event,
//     spinning only briefly: no host core busy for the step). Gradients are zeroed on the
//     stream (MemsetAsync).
//   - Outside a step (placement, CopyFromHost, OptimStateFromHost,
//     Unshard, Reshard, HostSyncBN's result), data goes up with cudaMemcpy
//     on the legacy stream after the host waited for the model's stream,
//     and the stream then waits for an event recorded on the legacy
//     stream (afterLegacy) before its next work. Copies down synchronize
//     the stream first.
//   - Collectives on the model's buffers (train/dp, train/pp) are tied to
//     the stream with a cuda.Order: the collective's stream waits for an
//     event recorded on the model's stream when it is issued, and the
//     model's stream for an event recorded after the collective
//     (OnGradsReady, ReduceGrads and GatherParams say which).

// hostIO is the model's pinned host memory for a step's copies and the
// events that order them.
type hostIO struct {
	pool     *cuda.Pool  // pinned
	up, down *cuda.Block // uploads (batch, labels); readbacks
	upEv     *cuda.Event // after the last uploads from up
	upQueued bool        // upEv was recorded
	legacy   *cuda.Event // scratch: marks the legacy default stream
	downEv   *cuda.Event // after a readback (cudaEventBlockingSync)
	wait     cuda.Waiter // the host's wait for downEv: spins briefly, then sleeps
}

// openIO makes the model's pinned buffers' pool and events (open).
func (d *Model) openIO() (err error) {
	d.io.pool = cuda.NewPinnedPool(d.dev, 1<<20)
	if d.io.upEv, err = cuda.NewEvent(d.dev); err != nil {
		return err
	}
	if d.io.legacy, err = cuda.NewEvent(d.dev); err != nil {
		return err
	}
	if d.io.downEv, err = cuda.NewBlockingEvent(d.dev); err != nil {
		return err
	}
	return nil
}

// closeIO gives the pinned buffers back and destroys the events (Close,
// after the stream is synchronized).
func (d *Model) closeIO() {
	io := &d.io
	for _, b := range []**cuda.Block{&io.up, &io.down} {
		if *b != nil {
			io.pool.Put(*b)
			*b = nil
		}
	}
	if io.pool != nil {
		io.pool.Close()
		io.pool.Flush()
		io.pool = nil
	}
	for _, e := range []**cuda.Event{&io.upEv, &io.legacy, &io.downEv} {
		if *e != nil {
			(*e).Destroy()
			*e = nil
		}
	}
}

// pinned makes *b a pinned block of at least n bytes (a block too small
// goes back to the pool: the caller made sure no copy uses it).
func (d *Model) pinned(b **cuda.Block, n int) error {
	if *b != nil && (*b).Bytes >= n {
		return nil
	}
	if *b != nil {
		d.io.pool.Put(*b)
		*b = nil
	}
	blk, err := d.io.pool.Get(max(n, 256))
	if err != nil {
		return fmt.Errorf("devmodel: %s: %d bytes of pinned host memory: %w", d.Host.Name, n, err)
	}
	*b = blk
	return nil
}

// upload queues copies of srcs (host memory) to dsts (device addresses)
// on the model's stream, through pinned memory: it returns once the
// sources may be reused, and work queued on the stream after it sees
// the data.
func (d *Model) upload(dsts []uintptr, srcs ...[]byte) error {
	io := &d.io
	if io.upQueued {
		// the last uploads read the pinned memory (long done: a step's
		// loss came down since)
		if err := io.upEv.Synchronize(); err != nil {
			return err
		}
		io.upQueued = false
	}
	total := 0
	for _, s := range srcs {
		total += (len(s) + 255) &^ 255
	}
	if err := d.pinned(&io.up, total); err != nil {
		return err
	}
	off := 0
	for i, s := range srcs {
		copy(io.up.Host[off:], s)
		if err := d.s.CopyAsync(dsts[i], io.up.Ptr+uintptr(off), len(s), cuda.HostToDevice); err != nil {
			return err
		}
		off += (len(s) + 255) &^ 255
	}
	if err := io.upEv.Record(d.s); err != nil {
		return err
	}
	io.upQueued = true
	return nil
}

// download copies len(dst) bytes at device address src into dst after
// the work queued on the model's stream (through pinned memory, on the
// stream): the host waits for an event recorded after the copy, with a
// cuda.Waiter, as comm/nccl's watcher waits for collectives: a brief
// poll, then asleep in the driver (cudaEventBlockingSync). A step ends
// here, and cudaStreamSynchronize would spin a host core for the whole
// step under CUDA's default scheduling (TestStepWaitCostsNoCPU).
func (d *Model) download(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := d.pinned(&d.io.down, len(dst)); err != nil {
		return err
	}
	if err := d.s.CopyAsync(d.io.down.Ptr, src, len(dst), cuda.DeviceToHost); err != nil {
		return err
	}
	if err := d.io.downEv.Record(d.s); err != nil {
		return err
	}
	if err := d.io.wait.Wait(d.io.downEv, nil); err != nil {
		return err
	}
	copy(dst, d.io.down.Host[:len(dst)])
	return nil
}

// memset queues zeroing n bytes at p on the model's stream.
func (d *Model) memset(p uintptr, n int) error { return d.s.MemsetAsync(p, 0, n) }

// afterLegacy makes the model's stream wait for the work queued so far
// on the legacy default stream (cudaMemcpy's uploads, outside a step).
func (d *Model) afterLegacy() error { return d.s.WaitDefault(d.io.legacy) }
