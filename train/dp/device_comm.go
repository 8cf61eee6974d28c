package dp

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/train/internal/rankdev"
)

// devComm runs a device strategy's collectives on float32 buffers in its
// model's device memory. With a Comm that takes device buffers (the nccl
// backend) they go to it as they are (comm.DeviceBuffer); with a host
// backend (shm, tcp, inproc) they are copied down into a host buffer,
// reduced there and copied back up: correct, and slower than NCCL by two
// copies of the buffer per collective. Every call is blocking and
// collective. The caller synchronizes the model's stream (bind's) before
// a call (the copies down and NCCL's stream wait on the legacy default
// stream only, which the model's non-blocking stream is not ordered
// with), and the model's stream waits for the copies up (an event
// recorded on the legacy default stream after them: unstage).
type devComm struct {
	c      comm.Comm
	dev    int
	direct bool      // c takes device buffers
	host   []float32 // staging for a host backend, grown on demand
	s      *cuda.Stream
	up     *cuda.Event // marks the legacy stream after unstage's copy
}

// close destroys bind's event.
func (x *devComm) close() error {
	if x.up == nil {
		return nil
	}
	err := x.up.Destroy()
	x.up = nil
	return err
}

// bind makes s, the model's stream, wait for unstage's copies.
func (x *devComm) bind(s *cuda.Stream) (err error) {
	x.s = s
	x.up, err = cuda.NewEvent(x.dev)
	return err
}

// checkNCCLDevice refuses -device cuda:N (N > 0) with -backend nccl,
// which puts each rank on the GPU of its LOCAL_RANK, not on GPU N: the
// way to choose the GPUs there is CUDA_VISIBLE_DEVICES.
func checkNCCLDevice(device string, first int, backend string) error {
	if first > 0 && backend == "nccl" {
		return fmt.Errorf("-device %s with -backend nccl: NCCL puts each rank on the GPU of its LOCAL_RANK, not on GPU %d: use -device cuda, and CUDA_VISIBLE_DEVICES to choose the GPUs", device, first)
	}
	return nil
}

func newDevComm(c comm.Comm, first int) *devComm {
	dev, direct := rankdev.Device(c, first)
	return &devComm{c: c, dev: dev, direct: direct}
}

// backendNote says how the collectives run, for the doc and errors.
func (x *devComm) backendNote() string {
	if x.direct {
		return "on the device"
	}
	return "through host memory"
}

func (x *devComm) buf(p uintptr, n int) comm.Buffer {
	return comm.DeviceBuffer(p, x.dev, comm.Float32, n)
}

// stage copies n floats at p down into the host buffer and returns it.
func (x *devComm) stage(p uintptr, n int) ([]float32, error) {
	if len(x.host) < n {
		x.host = make([]float32, n)
	}
	h := x.host[:n]
	if n == 0 {
		return h, nil
	}
	if err := cuda.CopyDtoH(x.dev, f32bytes(h), p); err != nil {
		return nil, fmt.Errorf("train: rank %d: copying %d values from the device: %w", x.c.Rank(), n, err)
	}
	return h, nil
}

// unstage copies h up to p.
func (x *devComm) unstage(p uintptr, h []float32) error {
	if len(h) == 0 {
		return nil
	}
	if err := cuda.CopyHtoD(x.dev, p, f32bytes(h)); err != nil {
		return fmt.Errorf("train: rank %d: copying %d values to the device: %w", x.c.Rank(), len(h), err)
	}
	if x.s != nil {
		return x.s.WaitDefault(x.up)
	}
	return nil
}

func f32bytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// run runs op on the n floats at p: on that device memory (direct), or
// on a host copy whose [lo, hi) (what op leaves this rank) is then
// copied back up.
func (x *devComm) run(ctx context.Context, p uintptr, n, lo, hi int, op func(b comm.Buffer) (comm.Work, error)) error {
	if x.direct {
		return comm.Run(ctx)(op(x.buf(p, n)))
	}
	h, err := x.stage(p, n)
	if err != nil {
		return err
	}
	if err := comm.Run(ctx)(op(comm.FromSlice(h))); err != nil {
		return err
	}
	return x.unstage(p+uintptr(4*lo), h[lo:hi])
}

// allReduceAvg averages the n floats at p over the ranks, in place.
func (x *devComm) allReduceAvg(ctx context.Context, p uintptr, n int) error {
	if x.c.Size() == 1 || n == 0 {
		return nil
	}
	return x.run(ctx, p, n, 0, n, func(b comm.Buffer) (comm.Work, error) { return x.c.AllReduce(ctx, b, comm.Avg) })
}

// reduceScatterAvg averages the Size()*s floats at p over the ranks and
// leaves this rank's part, [rank*s, (rank+1)*s), in place (the rest of
// the buffer is left as it was, or, staged, as the reduction left it).
func (x *devComm) reduceScatterAvg(ctx context.Context, p uintptr, s int) error {
	w, r := x.c.Size(), x.c.Rank()
	if w == 1 || s == 0 {
		return nil
	}
	return x.run(ctx, p, w*s, r*s, (r+1)*s, func(all comm.Buffer) (comm.Work, error) {
		return x.c.ReduceScatter(ctx, all.Slice(r*s, (r+1)*s), all, comm.Avg)
	})
}

// allGather gives every rank every rank's part of the Size()*s floats at
// p (rank r's part being [r*s, (r+1)*s)), in place.
func (x *devComm) allGather(ctx context.Context, p uintptr, s int) error {
	w, r := x.c.Size(), x.c.Rank()
	if w == 1 || s == 0 {
		return nil
	}
	return x.run(ctx, p, w*s, 0, w*s, func(all comm.Buffer) (comm.Work, error) {
		return x.c.AllGather(ctx, all, all.Slice(r*s, (r+1)*s))
	})
}

// broadcast gives every rank root's n floats at p.
func (x *devComm) broadcast(ctx context.Context, p uintptr, n, root int) error {
	if x.c.Size() == 1 || n == 0 {
		return nil
	}
	return x.run(ctx, p, n, 0, n, func(b comm.Buffer) (comm.Work, error) { return x.c.Broadcast(ctx, b, root) })
}
