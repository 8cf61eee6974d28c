package main

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gdist/gdist/comm"
	_ "github.com/gdist/gdist/comm/nccl" // registers "nccl"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
)

// -device: newCase makes host buffers; devCase hands the Comm a device twin
// of each instead (allocated on first use, with the host buffer's contents),
// so the timed runs move device memory only. upload and download copy every
// twin from and to its host buffer around the checked run.

// backendName is the backend as rows report it.
func backendName(cfg config) string {
	if cfg.device && cfg.backend != "nccl" {
		return cfg.backend + "+device"
	}
	return cfg.backend
}

// deviceComms wraps host-backend Comms (staging.Adapt) so that they take
// device buffers; the nccl Comm (and auto's, with CUDA) takes them already.
func deviceComms(cs []comm.Comm, cfg config) ([]comm.Comm, error) {
	if !cfg.device {
		return cs, nil
	}
	if ok, why := cuda.Available(); !ok {
		return nil, fmt.Errorf("-device: no CUDA: %s", why)
	}
	for r, c := range cs {
		cs[r] = staging.Adapt(c)
	}
	return cs, nil
}

type twin struct {
	host, dev comm.Buffer
}

type devCase struct {
	comm.Comm
	on    bool
	dev   int
	mu    sync.Mutex
	twins map[[2]uintptr]twin
	order []twin
	err   error
}

// newDevCase returns a devCase that does nothing unless cfg.device.
func newDevCase(c comm.Comm, cfg config) (*devCase, error) {
	if !cfg.device {
		return &devCase{Comm: c}, nil
	}
	if ok, why := cuda.Available(); !ok {
		return nil, fmt.Errorf("-device: no CUDA: %s", why)
	}
	dev := c.Rank() % cuda.DeviceCount()
	if d, ok := c.(interface{ Device() int }); ok && d.Device() >= 0 {
		dev = d.Device()
	}
	return &devCase{Comm: c, on: true, dev: dev, twins: map[[2]uintptr]twin{}}, nil
}

// comm is the Comm for newCase: d, or the plain Comm without -device.
func (d *devCase) comm() comm.Comm {
	if !d.on {
		return d.Comm
	}
	return d
}

// twin returns b's device twin, making it on first use.
func (d *devCase) twin(b comm.Buffer) comm.Buffer {
	if b.IsDevice() || b.Len() == 0 {
		return b
	}
	key := [2]uintptr{uintptr(unsafe.Pointer(unsafe.SliceData(b.Host()))), uintptr(b.Bytes())}
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.twins[key]; ok {
		return t.dev
	}
	dev, err := staging.Upload(d.dev, b)
	if err != nil {
		if d.err == nil {
			d.err = err
		}
		return b
	}
	t := twin{b, dev}
	d.twins[key] = t
	d.order = append(d.order, t)
	return dev
}

func (d *devCase) upload() error {
	if !d.on {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return fmt.Errorf("device buffers: %w", d.err)
	}
	for _, t := range d.order {
		if err := staging.Copy(t.dev, t.host); err != nil {
			return err
		}
	}
	return nil
}

func (d *devCase) download() error {
	if !d.on {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return fmt.Errorf("device buffers: %w", d.err)
	}
	for _, t := range d.order {
		if err := staging.Copy(t.host, t.dev); err != nil {
			return err
		}
	}
	return nil
}

func (d *devCase) free() {
	if !d.on {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range d.order {
		staging.FreeBuffer(t.dev)
	}
	d.order, d.twins = nil, map[[2]uintptr]twin{}
}

func (d *devCase) AllReduce(ctx context.Context, buf comm.Buffer, op comm.ReduceOp) (comm.Work, error) {
	return d.Comm.AllReduce(ctx, d.twin(buf), op)
}

func (d *devCase) Broadcast(ctx context.Context, buf comm.Buffer, root int) (comm.Work, error) {
	return d.Comm.Broadcast(ctx, d.twin(buf), root)
}

func (d *devCase) Reduce(ctx context.Context, buf comm.Buffer, op comm.ReduceOp, root int) (comm.Work, error) {
	return d.Comm.Reduce(ctx, d.twin(buf), op, root)
}

func (d *devCase) AllGather(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	return d.Comm.AllGather(ctx, d.twin(dst), d.twin(src))
}

func (d *devCase) Gather(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	return d.Comm.Gather(ctx, d.twin(dst), d.twin(src), root)
}

func (d *devCase) Scatter(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	return d.Comm.Scatter(ctx, d.twin(dst), d.twin(src), root)
}

func (d *devCase) ReduceScatter(ctx context.Context, dst, src comm.Buffer, op comm.ReduceOp) (comm.Work, error) {
	return d.Comm.ReduceScatter(ctx, d.twin(dst), d.twin(src), op)
}

func (d *devCase) AllToAll(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	return d.Comm.AllToAll(ctx, d.twin(dst), d.twin(src))
}

func (d *devCase) Send(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return d.Comm.Send(ctx, d.twin(buf), peer, tag)
}

func (d *devCase) Recv(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return d.Comm.Recv(ctx, d.twin(buf), peer, tag)
}
