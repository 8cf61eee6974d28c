package syncbn

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/rtc"
)

// Device is SyncBatchNorm for batch norms that run on a GPU
// (gpu/devmodel's Config.SyncBN takes its Hook), over a Comm that takes
// device buffers (the nccl backend): the statistics never leave the
// device. Per batch-norm layer and step:
//
//   - forward: one all-gather of each rank's [sum x (C), M2 (C), count]
//     (8 (2C+1) bytes a rank), then a kernel that combines the records
//     in rank order exactly as Combine does (the means sum/count, Chan's
//     pairwise formula, in float64, every operation rounded on its own):
//     the same bits as Syncer's host hook;
//   - backward: one all-reduce (sum) of [sum dy (C), sum dy xhat (C)] in
//     place.
//
// Each collective is tied to the model's stream with events
// (cuda.WithOrder), not the host: NCCL's stream waits for an event
// recorded on the model's stream after the statistics, and the model's
// stream for an event recorded after the collective. The host never
// waits: a step queues its whole forward and backward. The collectives
// run in the Comm's order with its other operations (a DDP's gradient
// buckets on the same Comm go first if issued first, as in PyTorch, where
// SyncBatchNorm and DDP share the process group).
//
// A failed collective fails the Comm (NCCL aborts the communicator, which
// ends the kernels the model's stream waits for, with garbage in the
// statistics): the next Hook call returns the error, and so does every
// later operation on the Comm, e.g. the step's gradient all-reduce, whose
// failure the caller sees. Err says whether one failed so far.
//
// A Device is for one model on one device, used by one goroutine at a
// time (a model's steps are). Close it after training (it holds p (2C+1)
// float64s of device memory, two events and the collectives' Works).
type Device struct {
	c       comm.Comm
	dev     int
	fn      *rtc.Function
	mu      sync.Mutex // Close vs Hook
	res     *deviceRes
	pending []comm.Work // collectives issued, not yet seen done
	err     error
}

// deviceRes is what a Device holds on the device (freed by Close, or by a
// cleanup when a Device is dropped unclosed).
type deviceRes struct {
	dev         int
	gather      uintptr // p records of 2C+1 float64s
	gatherN     int     // its size in float64s
	after, done *cuda.Event
}

func (r *deviceRes) free() {
	if r.gather != 0 {
		cuda.Free(r.dev, r.gather) // waits for the device
		r.gather = 0
	}
	for _, e := range []**cuda.Event{&r.after, &r.done} {
		if *e != nil {
			(*e).Destroy()
			*e = nil
		}
	}
}

// combineSource is the forward combine kernel: Combine on the device.
// Compiled with --fmad=false, each operation rounded on its own as Go
// computes it on amd64, so the results equal Combine's bit for bit.
const combineSource = `
// stats[C+C+1] (this rank's [sum x, M2, count], replaced by the union's)
// from all[p][2C+1] (every rank's, gathered in rank order), one thread a
// channel: syncbn.Combine's loop, then sum = mean * count.
extern "C" __global__ void gd_syncbn_combine(double *stats, const double *all, int p, int C) {
	long long rec = 2LL * C + 1;
	for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < C; c += (long long)gridDim.x * blockDim.x) {
		double count = 0.0, mean = 0.0, m2 = 0.0;
		for (int r = 0; r < p; r++) {
			const double *a = all + r * rec;
			double nb = a[2 * C];
			if (nb <= 0.0) continue;
			double mb = a[c] / nb;
			double na = count;
			double n = na + nb;
			double delta = mb - mean;
			mean += delta * nb / n;
			m2 += a[C + c] + delta * delta * na * nb / n;
			count = n;
		}
		stats[c] = mean * count;
		stats[C + c] = m2;
		if (c == 0) stats[2 * C] = count;
	}
}
`

// NewDevice makes the SyncBatchNorm of a model on GPU device over c,
// which must take device buffers on that device (the nccl backend's
// Comm, or the staging Comm comm.New returns for it): it refuses any
// other (a host backend's, even staged: its collectives would not be
// ordered with the model's stream). It compiles the combine kernel
// (NVRTC, once per process) and makes two events; the device memory for the gathered
// statistics is allocated at the first forward call (and grown once if a
// later layer has more channels).
func NewDevice(c comm.Comm, device int) (*Device, error) {
	if c == nil {
		return nil, comm.InvalidArgf("syncbn: NewDevice needs a Comm")
	}
	if on := commDevice(c); on != device {
		// a Comm through host memory (a host backend, staged) records no
		// Done event: the model's stream would read the statistics
		// before they arrive
		where := "host memory (a host backend)"
		if on >= 0 {
			where = fmt.Sprintf("cuda:%d", on)
		}
		return nil, comm.InvalidArgf("syncbn: rank %d: NewDevice on cuda:%d needs a Comm that takes device buffers there (the nccl backend's, on that GPU); this one works on %s: use Syncer's host hook (gpu/devmodel's HostSyncBN) instead", c.Rank(), device, where)
	}
	m, err := rtc.Load(device, "gdist_syncbn.cu", combineSource, "--fmad=false")
	if err != nil {
		return nil, fmt.Errorf("syncbn: rank %d: compiling the combine kernel for cuda:%d: %w", c.Rank(), device, err)
	}
	fn, err := m.Function("gd_syncbn_combine")
	if err != nil {
		return nil, fmt.Errorf("syncbn: rank %d: %w", c.Rank(), err)
	}
	res := &deviceRes{dev: device}
	if res.after, err = cuda.NewEvent(device); err == nil {
		res.done, err = cuda.NewEvent(device)
	}
	if err != nil {
		res.free()
		return nil, fmt.Errorf("syncbn: rank %d: %w", c.Rank(), err)
	}
	d := &Device{c: c, dev: device, fn: fn, res: res}
	runtime.AddCleanup(d, func(r *deviceRes) { r.free() }, res)
	return d, nil
}

// Hook is the function for gpu/devmodel's Config.SyncBN (a
// devmodel.SyncBNFunc): with stage "forward", buf holds this rank's
// [sum x (C), M2 (C), count] (n = 2C+1 float64s of device memory) as
// queued on s, replaced with the values of every rank's batch; with
// "backward", [sum dy (C), sum dy xhat (C)] (n = 2C), replaced with their
// sums over the ranks. Both are queued on s's order: work queued on s
// after the call sees the result. It does not block (but for the first
// call's allocation). Every rank calls it in the same order. ctx bounds
// the collectives it issues (the training run's context: the hook has no
// context of its own, as HostSyncBN's).
func (d *Device) Hook(ctx context.Context) func(s *cuda.Stream, stage string, buf uintptr, n int) error {
	return func(s *cuda.Stream, stage string, buf uintptr, n int) error {
		return d.sync(ctx, s, stage, buf, n)
	}
}

func (d *Device) sync(ctx context.Context, s *cuda.Stream, stage string, buf uintptr, n int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	rank := d.c.Rank()
	switch {
	case ctx == nil:
		return comm.InvalidArgf("syncbn: rank %d: %s statistics without a context", rank, stage)
	case d.res == nil:
		return fmt.Errorf("syncbn: rank %d: %s statistics: %w", rank, stage, comm.ErrClosed)
	case s == nil || s.Device() != d.dev:
		return comm.InvalidArgf("syncbn: rank %d: %s statistics on a stream of another device than cuda:%d", rank, stage, d.dev)
	case stage == "forward" && n%2 != 1, stage == "backward" && n%2 != 0:
		return comm.InvalidArgf("syncbn: rank %d: %s statistics of length %d, want 2C+1 forward, 2C backward", rank, stage, n)
	case stage != "forward" && stage != "backward":
		return comm.InvalidArgf("syncbn: rank %d: unknown stage %q", rank, stage)
	}
	if err := d.check(); err != nil {
		return err
	}
	r := d.res
	if err := r.after.Record(s); err != nil {
		return fmt.Errorf("syncbn: rank %d: %s: %w", rank, stage, err)
	}
	ctx = cuda.WithOrder(ctx, cuda.Order{After: r.after, Done: r.done})
	mine := comm.DeviceBuffer(buf, d.dev, comm.Float64, n)
	var w comm.Work
	var err error
	p := d.c.Size()
	if stage == "backward" {
		w, err = d.c.AllReduce(ctx, mine, comm.Sum)
	} else {
		if err := d.grow(p * n); err != nil {
			return fmt.Errorf("syncbn: rank %d: %w", rank, err)
		}
		w, err = d.c.AllGather(ctx, comm.DeviceBuffer(r.gather, d.dev, comm.Float64, p*n), mine)
	}
	if err != nil {
		return fmt.Errorf("syncbn: rank %d: %s statistics: %w", rank, stage, err)
	}
	d.pending = append(d.pending, w)
	if err := s.WaitEvent(r.done); err != nil {
		return fmt.Errorf("syncbn: rank %d: %s: %w", rank, stage, err)
	}
	if stage == "backward" {
		return nil
	}
	c := n / 2
	err = d.fn.Launch(s, rtc.Config{Grid: rtc.Dim(min((c+255)/256, 1024)), Block: rtc.Dim(256)}, buf, r.gather, int32(p), int32(c))
	if err != nil {
		return fmt.Errorf("syncbn: rank %d: combining the statistics: %w", rank, err)
	}
	return nil
}

// commDevice is the GPU whose buffers c (or a Comm it wraps, through
// Unwrap) takes itself, -1 if none: the nccl backend's Comm, and the
// staging Comm comm.New returns for it, are on their GPU; a host
// backend's, staged or not, on none.
func commDevice(c comm.Comm) int {
	for x := c; x != nil; {
		if d, ok := x.(interface {
			Device() int
			DeviceCapable() bool
		}); ok && d.DeviceCapable() && d.Device() >= 0 {
			return d.Device()
		}
		u, ok := x.(interface{ Unwrap() comm.Comm })
		if !ok {
			break
		}
		x = u.Unwrap()
	}
	return -1
}

// grow makes the gather buffer hold at least n float64s. A buffer that
// is too small is freed once the device is done with it (cudaFree waits):
// this happens at most in the first step, when a layer has more channels
// than the layers before it.
func (d *Device) grow(n int) error {
	r := d.res
	if n <= r.gatherN {
		return nil
	}
	if r.gather != 0 {
		if err := cuda.Free(d.dev, r.gather); err != nil {
			return err
		}
		r.gather, r.gatherN = 0, 0
	}
	p, err := cuda.Malloc(d.dev, 8*n)
	if err != nil {
		return fmt.Errorf("the gathered statistics (%d bytes): %w", 8*n, err)
	}
	r.gather, r.gatherN = p, n
	return nil
}

// check returns the error of a collective issued before that has failed
// (and forgets those done); it does not block.
func (d *Device) check() error {
	if d.err != nil {
		return d.err
	}
	k := 0
	for _, w := range d.pending {
		select {
		case <-w.Done():
			if err := w.Err(); err != nil {
				d.err = fmt.Errorf("syncbn: rank %d: %w", d.c.Rank(), err)
				d.pending = nil
				return d.err
			}
		default:
			d.pending[k] = w
			k++
		}
	}
	d.pending = d.pending[:k]
	return nil
}

// Err is the error of a collective the hook issued that has failed so
// far, or nil. It does not wait for pending ones.
func (d *Device) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check()
}

// Close waits (within ctx) for the collectives issued and frees the
// device memory and events; it returns the first collective's error, if
// any failed. It does not close the Comm. Later Hook calls fail.
func (d *Device) Close(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.res == nil {
		return nil
	}
	var errs []error
	for _, w := range d.pending {
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, err)
			break
		}
	}
	d.pending = nil
	d.res.free()
	d.res = nil
	return errors.Join(errs...)
}
