package staging

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/opcheck"
	"github.com/gdist/gdist/gpu/cuda"
)

// CacheBytes bounds the idle staging memory each world Comm keeps for reuse
// (its sub-groups share it).
const CacheBytes = 512 << 20

type direction uint8

const (
	toHost   direction = iota + 1 // device buffers go through pinned host memory
	toDevice                      // host buffers go through device memory
)

// Comm is a staging wrapper (see the package comment). Its methods follow
// the comm.Comm contract; they are safe for concurrent use.
type Comm struct {
	inner  comm.Comm
	dir    direction
	device int // toDevice: the device of the staging memory
	pools  *pools
	world  bool // closing it closes pools

	mu     sync.Mutex
	tail   <-chan struct{} // completion, as the caller sees it, of the last collective
	failed error
	closed bool
}

// trafficComm is a Comm over a comm.TrafficCounter.
type trafficComm struct{ *Comm }

func (t trafficComm) Traffic() (sent, received int64) {
	return t.inner.(comm.TrafficCounter).Traffic()
}

var (
	_ comm.Comm           = (*Comm)(nil)
	_ comm.TrafficCounter = trafficComm{}
)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Wrap returns a Comm that gives c, a backend that takes host memory only,
// device buffers too: each device buffer is copied into pinned host memory
// when the operation is issued (inputs only), c runs the operation on the
// host copies, and the results are copied back (outputs only) before the
// Work completes. Host buffers go straight to c. When CUDA is not available
// a device buffer is refused with an error saying why.
func Wrap(c comm.Comm) comm.Comm { return wrap(c, toHost, -1, nil) }

// WrapDevice returns a Comm that gives c, a backend that takes device memory
// only (nccl), host buffers too: each host buffer is copied to memory on
// device, and results back. Device buffers go straight to c.
func WrapDevice(c comm.Comm, device int) comm.Comm { return wrap(c, toDevice, device, nil) }

// pools are the staging memory caches of a world Comm and its sub-groups:
// one per device (pinned memory is allocated with the device of the
// buffers it stages current, so that no CUDA context is made on another).
type pools struct {
	pinned  bool
	mu      sync.Mutex
	m       map[int]*cuda.Pool
	waiters waiters // the host's waits for cuda.Order's After (wait.go)
}

func (ps *pools) get(device int) *cuda.Pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[device]
	if p == nil {
		if ps.pinned {
			p = cuda.NewPinnedPool(device, CacheBytes)
		} else {
			p = cuda.NewDevicePool(device, CacheBytes)
		}
		ps.m[device] = p
	}
	return p
}

func (ps *pools) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.m {
		p.Close()
	}
	ps.waiters.close()
}

func wrap(c comm.Comm, dir direction, device int, ps *pools) comm.Comm {
	if c == nil {
		return nil
	}
	s := &Comm{inner: c, dir: dir, device: device, pools: ps, tail: closedChan}
	if ps == nil {
		s.world = true
		s.pools = &pools{pinned: dir == toHost, m: map[int]*cuda.Pool{}}
	}
	if _, ok := c.(comm.TrafficCounter); ok {
		return trafficComm{s}
	}
	return s
}

// New builds the world Comm of one rank with the named backend, as
// comm.New does, and applies Adapt to it: with CUDA present, a host backend
// (inproc, tcp, shm) then takes device buffers too. Importing this package
// changes nothing that comm.New builds: staging is applied here, or with
// Wrap, at the call site.
func New(ctx context.Context, backend string, cfg comm.Config) (comm.Comm, error) {
	c, err := comm.New(ctx, backend, cfg)
	if err != nil || c == nil {
		return c, err
	}
	return Adapt(c), nil
}

// Adapt returns c wrapped with Wrap when CUDA is available and c does not
// take device buffers itself (DeviceCapable), and c otherwise.
func Adapt(c comm.Comm) comm.Comm {
	if c == nil || DeviceCapable(c) {
		return c
	}
	if ok, _ := cuda.Available(); !ok {
		return c
	}
	return Wrap(c)
}

// DeviceCapable reports whether c takes device buffers itself: it has a
// method DeviceCapable() bool that returns true (the nccl backend's Comm and
// the wrappers of this package do).
func DeviceCapable(c comm.Comm) bool {
	d, ok := c.(interface{ DeviceCapable() bool })
	return ok && d.DeviceCapable()
}

// DeviceCapable is true: a staging Comm takes host and device buffers.
func (s *Comm) DeviceCapable() bool { return true }

// Unwrap returns the wrapped Comm.
func (s *Comm) Unwrap() comm.Comm { return s.inner }

// Device is the device that holds the staging memory of a WrapDevice Comm,
// and -1 for a Wrap Comm.
func (s *Comm) Device() int { return s.device }

// Rank is the rank of the wrapped Comm.
func (s *Comm) Rank() int { return s.inner.Rank() }

// Size is the size of the wrapped Comm.
func (s *Comm) Size() int { return s.inner.Size() }

// Close closes the wrapped Comm; staging memory of pending operations is
// freed once they fail.
func (s *Comm) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := s.inner.Close()
	if s.world {
		s.pools.close()
	}
	return err
}

// opTimeout bounds the host's waits for a cuda.Order's After event, as
// the wrapped Comm bounds its operations: its OpTimeout when it says
// (comm/algo's Comms: their Options'), comm.DefaultTimeout otherwise.
func (s *Comm) opTimeout() time.Duration {
	if t, ok := s.inner.(interface{ OpTimeout() time.Duration }); ok {
		return t.OpTimeout()
	}
	return comm.DefaultTimeout
}

// arg is one buffer of an operation and what the operation does with it on
// this rank.
type arg struct {
	b       comm.Buffer
	which   string
	in, out bool // read, written; neither: ignored on this rank
}

func (a arg) ignored() bool { return !a.in && !a.out }

// needs reports whether b must be staged.
func (s *Comm) needs(b comm.Buffer) bool {
	if s.dir == toHost {
		return b.IsDevice()
	}
	return !b.IsDevice() && b.Len() > 0
}

// span is the address range of b's memory.
func span(b comm.Buffer) (lo, hi uintptr) {
	if b.IsDevice() {
		p, _ := b.Device()
		return p, p + uintptr(b.Bytes())
	}
	h := b.Host()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(h)))
	return p, p + uintptr(len(h))
}

type region struct {
	lo, hi uintptr
	dev    int
	pool   *cuda.Pool
	blk    *cuda.Block
}

// op stages args, issues the operation through call with the staged buffers,
// and returns a Work that completes once the results are back in the
// caller's buffers. Collectives (coll) complete in issue order.
func (s *Comm) op(ctx context.Context, name string, coll bool, args []arg, call func(bufs []comm.Buffer) (comm.Work, error)) (comm.Work, error) {
	if err := opcheck.Ctx(name, ctx); err != nil {
		return nil, err
	}
	bufs := make([]comm.Buffer, len(args))
	staged := make([]bool, len(args))
	anyStaged := false
	for i, a := range args {
		bufs[i] = a.b
		if a.ignored() || !s.needs(a.b) {
			continue
		}
		if err := a.b.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, a.which, err)
		}
		if s.dir == toHost && a.b.Len() > 0 {
			if ok, why := cuda.Available(); !ok {
				return nil, comm.InvalidArgf("%s: %s is device memory (%v), but CUDA is not available: %s", name, a.which, a.b, why)
			}
			if err := CheckDevice(a.b); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, a.which, err)
			}
		}
		staged[i], anyStaged = true, true
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &comm.OpError{Op: name, Rank: s.Rank(), Err: comm.ErrClosed}
	}
	if s.failed != nil {
		return nil, &comm.OpError{Op: name, Rank: s.Rank(), Err: s.failed}
	}
	if !anyStaged {
		w, err := call(bufs)
		if err != nil || !coll {
			return w, err
		}
		select {
		case <-s.tail:
			s.tail = w.Done()
			return w, nil
		default:
		}
		return s.chain(w, nil, nil, nil), nil
	}

	// Buffers that overlap share one staging region, so that the wrapped
	// Comm sees the same aliasing (in-place forms, forbidden overlaps).
	var regions []*region
	where := make([]*region, len(args))
	for i, a := range args {
		if !staged[i] || a.b.Len() == 0 {
			continue
		}
		lo, hi := span(a.b)
		_, dev := a.b.Device()
		var r *region
		for _, q := range regions {
			if q.dev == dev && lo < q.hi && q.lo < hi {
				r = q
				r.lo, r.hi = min(r.lo, lo), max(r.hi, hi)
				break
			}
		}
		if r == nil {
			r = &region{lo: lo, hi: hi, dev: dev}
			regions = append(regions, r)
		}
		where[i] = r
	}
	release := func(discard bool) {
		for _, r := range regions {
			if r.blk == nil {
				continue
			}
			if discard {
				r.pool.Discard(r.blk)
			} else {
				r.pool.Put(r.blk)
			}
		}
	}
	for _, r := range regions {
		dev := r.dev
		if s.dir == toDevice {
			dev = s.device
		}
		r.pool = s.pools.get(dev)
		blk, err := r.pool.Get(int(r.hi - r.lo))
		if err != nil {
			release(false)
			return nil, s.poisonLocked(name, fmt.Errorf("staging: %s: allocating %d bytes of staging memory: %w", name, r.hi-r.lo, err))
		}
		r.blk = blk
	}
	for i, a := range args {
		if !staged[i] {
			continue
		}
		var err error
		bufs[i], err = s.stagedBuf(a.b, where[i])
		if err != nil {
			release(false)
			return nil, err
		}
	}
	// A cuda.Order's After event marks the end of the caller's work on
	// the device buffers (on a stream the legacy default stream, where
	// cudaMemcpy runs, does not wait for): the host waits for it before
	// copying them in (only then: a receive does not wait at its issue),
	// and before copying results out, asleep once a brief poll is over
	// (wait.go).
	after := func() error { return nil }
	if o := cuda.OrderOf(ctx); o.After != nil && s.dir == toHost {
		dev := -1
		for i, a := range args {
			if staged[i] && dev < 0 {
				_, dev = a.b.Device()
			}
		}
		after = func() error { return s.pools.waiters.wait(ctx, s.opTimeout(), dev, o.After) }
	}
	for i, a := range args {
		if staged[i] && a.in {
			if err := after(); err != nil {
				release(false)
				return nil, s.poisonLocked(name, fmt.Errorf("staging: %s: waiting for the device buffers' writers: %w", name, err))
			}
			break
		}
	}
	for i, a := range args {
		if staged[i] && a.in {
			if err := Copy(bufs[i], a.b); err != nil {
				release(false)
				return nil, s.poisonLocked(name, fmt.Errorf("staging: %s: copying %s in: %w", name, a.which, err))
			}
		}
	}
	w, err := call(bufs)
	if err != nil {
		release(false)
		return nil, err
	}
	copyOut := func() error {
		if err := after(); err != nil {
			return fmt.Errorf("staging: %s: waiting for the device buffers' readers: %w", name, err)
		}
		for i, a := range args {
			if staged[i] && a.out {
				if err := Copy(a.b, bufs[i]); err != nil {
					return fmt.Errorf("staging: %s: copying %s out: %w", name, a.which, err)
				}
			}
		}
		return nil
	}
	if coll {
		return s.chain(w, copyOut, release, func(err error) error { return s.poison(name, err) }), nil
	}
	req := comm.NewRequest()
	go func() {
		<-w.Done()
		err := w.Err()
		if err == nil {
			if cerr := copyOut(); cerr != nil {
				err = s.poison(name, cerr)
			}
		}
		release(err != nil)
		req.Complete(err)
	}()
	return req, nil
}

// chain returns a Work that completes after w and after the previous
// collective, running copyOut (if w succeeded) and release first. s.mu is
// held.
func (s *Comm) chain(w comm.Work, copyOut func() error, release func(discard bool), poison func(error) error) comm.Work {
	prev := s.tail
	done := make(chan struct{})
	s.tail = done
	req := comm.NewRequest()
	go func() {
		defer close(done)
		<-w.Done()
		err := w.Err()
		<-prev
		if err == nil && copyOut != nil {
			if cerr := copyOut(); cerr != nil {
				err = poison(cerr)
			}
		}
		if release != nil {
			release(err != nil)
		}
		req.Complete(err)
	}()
	return req
}

// stagedBuf is the staging-memory twin of b, inside region r.
func (s *Comm) stagedBuf(b comm.Buffer, r *region) (comm.Buffer, error) {
	if b.Len() == 0 {
		// Nothing to copy: an empty buffer of the other kind.
		return comm.FromBytes(b.DType(), []byte{})
	}
	lo, _ := span(b)
	off := int(lo - r.lo)
	if s.dir == toHost {
		return comm.FromBytes(b.DType(), r.blk.Host[off:off+b.Bytes()])
	}
	return comm.DeviceBuffer(r.blk.Ptr+uintptr(off), s.device, b.DType(), b.Len()), nil
}

func (s *Comm) poison(name string, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poisonLocked(name, err)
}

func (s *Comm) poisonLocked(name string, err error) error {
	if s.failed == nil {
		s.failed = err
	}
	return &comm.OpError{Op: name, Rank: s.inner.Rank(), Err: err}
}

func inOut(b comm.Buffer, which string) arg  { return arg{b: b, which: which, in: true, out: true} }
func in(b comm.Buffer, which string) arg     { return arg{b: b, which: which, in: true} }
func out(b comm.Buffer, which string) arg    { return arg{b: b, which: which, out: true} }
func ignore(b comm.Buffer, which string) arg { return arg{b: b, which: which} }
func inIf(ok bool, b comm.Buffer, w string) arg {
	if ok {
		return in(b, w)
	}
	return ignore(b, w)
}
func outIf(ok bool, b comm.Buffer, w string) arg {
	if ok {
		return out(b, w)
	}
	return ignore(b, w)
}

// AllReduce: see comm.Comm.
func (s *Comm) AllReduce(ctx context.Context, buf comm.Buffer, op comm.ReduceOp) (comm.Work, error) {
	return s.op(ctx, "all_reduce", true, []arg{inOut(buf, "buf")}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.AllReduce(ctx, b[0], op)
	})
}

// Broadcast: see comm.Comm.
func (s *Comm) Broadcast(ctx context.Context, buf comm.Buffer, root int) (comm.Work, error) {
	a := out(buf, "buf")
	if s.Rank() == root {
		a = in(buf, "buf")
	}
	return s.op(ctx, "broadcast", true, []arg{a}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.Broadcast(ctx, b[0], root)
	})
}

// Reduce: see comm.Comm.
func (s *Comm) Reduce(ctx context.Context, buf comm.Buffer, op comm.ReduceOp, root int) (comm.Work, error) {
	a := in(buf, "buf")
	if s.Rank() == root {
		a = inOut(buf, "buf")
	}
	return s.op(ctx, "reduce", true, []arg{a}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.Reduce(ctx, b[0], op, root)
	})
}

// AllGather: see comm.Comm.
func (s *Comm) AllGather(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	return s.op(ctx, "all_gather", true, []arg{out(dst, "dst"), in(src, "src")}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.AllGather(ctx, b[0], b[1])
	})
}

// Gather: see comm.Comm.
func (s *Comm) Gather(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	args := []arg{outIf(s.Rank() == root, dst, "dst"), in(src, "src")}
	return s.op(ctx, "gather", true, args, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.Gather(ctx, b[0], b[1], root)
	})
}

// Scatter: see comm.Comm.
func (s *Comm) Scatter(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	args := []arg{out(dst, "dst"), inIf(s.Rank() == root, src, "src")}
	return s.op(ctx, "scatter", true, args, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.Scatter(ctx, b[0], b[1], root)
	})
}

// ReduceScatter: see comm.Comm.
func (s *Comm) ReduceScatter(ctx context.Context, dst, src comm.Buffer, op comm.ReduceOp) (comm.Work, error) {
	return s.op(ctx, "reduce_scatter", true, []arg{out(dst, "dst"), in(src, "src")}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.ReduceScatter(ctx, b[0], b[1], op)
	})
}

// AllToAll: see comm.Comm.
func (s *Comm) AllToAll(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	return s.op(ctx, "all_to_all", true, []arg{out(dst, "dst"), in(src, "src")}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.AllToAll(ctx, b[0], b[1])
	})
}

// Barrier: see comm.Comm.
func (s *Comm) Barrier(ctx context.Context) (comm.Work, error) {
	return s.op(ctx, "barrier", true, nil, func([]comm.Buffer) (comm.Work, error) {
		return s.inner.Barrier(ctx)
	})
}

// Send: see comm.Comm.
func (s *Comm) Send(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return s.op(ctx, "send", false, []arg{in(buf, "buf")}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.Send(ctx, b[0], peer, tag)
	})
}

// Recv: see comm.Comm.
func (s *Comm) Recv(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	return s.op(ctx, "recv", false, []arg{out(buf, "buf")}, func(b []comm.Buffer) (comm.Work, error) {
		return s.inner.Recv(ctx, b[0], peer, tag)
	})
}

// Split: see comm.Comm. The new Comm stages like s and shares its memory
// cache.
func (s *Comm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	s.mu.Lock()
	closed, failed := s.closed, s.failed
	s.mu.Unlock()
	if closed {
		return nil, &comm.OpError{Op: "split", Rank: s.Rank(), Err: comm.ErrClosed}
	}
	if failed != nil {
		return nil, &comm.OpError{Op: "split", Rank: s.Rank(), Err: failed}
	}
	child, err := s.inner.Split(ctx, color, key)
	if err != nil || child == nil {
		return nil, err
	}
	return wrap(child, s.dir, s.device, s.pools), nil
}

// Abort fails the wrapped Comm with cause and tells its other members
// (comm.Abort on it).
func (s *Comm) Abort(cause error) { comm.Abort(s.inner, cause) }

var _ comm.Aborter = (*Comm)(nil)

// ConnectPeers forwards to the wrapped Comm if it is a comm.PeerConnector
// (nothing to do otherwise).
func (s *Comm) ConnectPeers(ctx context.Context, peers []int) error {
	if pc, ok := s.inner.(comm.PeerConnector); ok {
		return pc.ConnectPeers(ctx, peers)
	}
	return nil
}

var _ comm.PeerConnector = (*Comm)(nil)
