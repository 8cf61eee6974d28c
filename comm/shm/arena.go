//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// The areas: after the rings, the segment file holds one area of
// Options.AreaBytes per local rank, mapped by every rank as a second
// mapping (so that Close can unmap the rings while buffers allocated here
// live on). Each rank allocates only from its own area (first fit, 64-byte
// granules, under a lock of this process); the peers only read it. An
// area starts with flagBytes of flag blocks: two counters, each on a cache
// line of its own, that the zero-copy all-reduce publishes its progress
// in (algo.SharedMemory).
//
// The file is sparse: an allocation commits its pages with fallocate (so
// that a full tmpfs is an error from Alloc, not a SIGBUS later), and a
// free gives its whole pages back (FALLOC_FL_PUNCH_HOLE).
const (
	flagBlockSize = 128
	granule       = 64
)

var _ algo.SharedMemory = (*Transport)(nil)

// arena is this rank's view of the areas.
type arena struct {
	t     *Transport
	f     *os.File
	mem   []byte // every rank's area, in local order
	base  uintptr
	size  int // bytes per area
	me    int // this rank's local index
	fileO int // file offset of mem

	mu     sync.Mutex
	free   []span // of this rank's area, offsets in mem, sorted, coalesced
	flags  []int  // free flag blocks (offsets in mem)
	live   int    // allocations and flag blocks taken
	closed bool
}

type span struct{ off, n int }

// mapAreas maps the areas (if the segment has any) and hands them the
// file; without areas it closes the file.
func (t *Transport) mapAreas() error {
	s := t.seg
	if s.areaBytes == 0 {
		s.f.Close()
		s.f = nil
		return nil
	}
	n := s.n * s.areaBytes
	mem, err := syscall.Mmap(int(s.f.Fd()), int64(s.areasOff()), n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("shm: rank %d: mapping the shared-memory areas (%d bytes; Options.AreaBytes or GDIST_SHM_AREA_BYTES sets them, 0 for none): %w",
			t.rank, n, err)
	}
	a := &arena{t: t, f: s.f, mem: mem, base: uintptr(unsafe.Pointer(&mem[0])), size: s.areaBytes, me: t.me, fileO: s.areasOff()}
	s.f = nil
	own := t.me * s.areaBytes
	a.free = []span{{own + flagBytes, s.areaBytes - flagBytes}}
	for i := flagBytes/flagBlockSize - 1; i >= 0; i-- {
		a.flags = append(a.flags, own+i*flagBlockSize)
	}
	t.arena = a
	return nil
}

// close marks the arena closed; the mapping goes when the last
// allocation does.
func (a *arena) close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.release()
}

// release unmaps the areas once closed and unused. a.mu is held.
func (a *arena) release() {
	if a.closed && a.live == 0 && a.mem != nil {
		syscall.Munmap(a.mem)
		a.mem = nil
		a.f.Close()
	}
}

// Alloc returns n zeroed bytes of this rank's area (see
// algo.SharedMemory).
func (t *Transport) Alloc(n int) ([]byte, func(), error) {
	a := t.arena
	if a == nil {
		return nil, nil, fmt.Errorf("shm: rank %d: no shared-memory area (ranks alone, or Options.AreaBytes / GDIST_SHM_AREA_BYTES is 0): %w", t.rank, comm.ErrUnsupported)
	}
	if n <= 0 {
		return nil, nil, comm.InvalidArgf("shm: alloc of %d bytes", n)
	}
	want := (n + granule - 1) &^ (granule - 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, nil, fmt.Errorf("shm: rank %d: alloc after close: %w", t.rank, comm.ErrClosed)
	}
	i := -1
	largest := 0
	for j, s := range a.free {
		if s.n >= want {
			i = j
			break
		}
		largest = max(largest, s.n)
	}
	if i < 0 {
		return nil, nil, fmt.Errorf("shm: rank %d: cannot allocate %d bytes of shared memory: its area of %d bytes has %d bytes free in one piece (raise Options.AreaBytes or GDIST_SHM_AREA_BYTES): %w",
			t.rank, n, a.size, largest, comm.ErrInvalidArgument)
	}
	off := a.free[i].off
	// Commit the pages now: a tmpfs that is full fails here, not with a
	// SIGBUS on first touch.
	lo, hi := a.fileO+off&^(pageSize-1), a.fileO+(off+want+pageSize-1)&^(pageSize-1)
	if err := fallocate(a.f, 0, lo, hi-lo); err != nil {
		return nil, nil, fmt.Errorf("shm: rank %d: cannot commit %d bytes of shared memory in %s: %w (free space there, or set GDIST_SHM_DIR to a larger tmpfs)",
			t.rank, n, t.opts.Dir, err)
	}
	if a.free[i].n == want {
		a.free = append(a.free[:i], a.free[i+1:]...)
	} else {
		a.free[i].off += want
		a.free[i].n -= want
	}
	a.live++
	b := a.mem[off : off+n : off+n]
	clear(b)
	var once atomic.Bool
	return b, func() {
		if once.CompareAndSwap(false, true) {
			a.put(off, want)
		}
	}, nil
}

// put frees the want bytes at off.
func (a *arena) put(off, want int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live--
	if a.mem == nil {
		return
	}
	i := sort.Search(len(a.free), func(j int) bool { return a.free[j].off > off })
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = span{off, want}
	if i+1 < len(a.free) && off+want == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
		i--
	}
	// Give back the whole pages of the free span.
	s := a.free[i]
	lo, hi := (a.fileO+s.off+pageSize-1)&^(pageSize-1), (a.fileO+s.off+s.n)&^(pageSize-1)
	if hi > lo && !a.closed {
		fallocate(a.f, fallocPunchHole|fallocKeepSize, lo, hi-lo)
	}
	a.release()
}

// onTmpfs reports whether dir is on a tmpfs (or hugetlbfs): memory, not
// a disk that dirty pages of the areas would be written back to.
func onTmpfs(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return true // nothing to say
	}
	const tmpfsMagic, hugetlbfsMagic = 0x01021994, 0x958458f6
	return st.Type == tmpfsMagic || st.Type == hugetlbfsMagic
}

// pageSize is the granule of fallocate's commit and punch.
var pageSize = syscall.Getpagesize()

const (
	fallocKeepSize  = 0x1
	fallocPunchHole = 0x2
)

func fallocate(f *os.File, mode uint32, off, n int) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), mode, int64(off), int64(n))
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// Shares reports whether world rank r maps this rank's areas.
func (t *Transport) Shares(r int) bool {
	return t.arena != nil && r >= 0 && r < t.size && t.links[r] != nil
}

// Locate returns the handle of b if it lies in the areas, else 0.
func (t *Transport) Locate(b []byte) uint64 {
	a := t.arena
	if a == nil || len(b) == 0 {
		return 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < a.base || p-a.base+uintptr(len(b)) > uintptr(len(a.mem)) {
		return 0
	}
	return uint64(p-a.base) + 1
}

// Map returns the n bytes at handle h (nil if not all in the areas).
func (t *Transport) Map(h uint64, n int) []byte {
	a := t.arena
	if a == nil || h == 0 || n < 0 || h-1 > uint64(len(a.mem)) || uint64(n) > uint64(len(a.mem))-(h-1) {
		return nil
	}
	off := int(h - 1)
	return a.mem[off : off+n : off+n]
}

// Flags takes a flag block of this rank's area for one op.
func (t *Transport) Flags() (uint64, *uint64, *uint64, func()) {
	a := t.arena
	if a == nil {
		return 0, nil, nil, nil
	}
	a.mu.Lock()
	if a.closed || len(a.flags) == 0 {
		a.mu.Unlock()
		return 0, nil, nil, nil
	}
	off := a.flags[len(a.flags)-1]
	a.flags = a.flags[:len(a.flags)-1]
	a.live++
	a.mu.Unlock()
	return uint64(off) + 1, a.word(off), a.word(off + 64), func() {
		a.mu.Lock()
		a.flags = append(a.flags, off)
		a.live--
		a.release()
		a.mu.Unlock()
	}
}

func (a *arena) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&a.mem[off])) }

// Counter returns counter i of the flag block at handle h.
func (t *Transport) Counter(h uint64, i int) *uint64 {
	a := t.arena
	if a == nil || h == 0 || (i != 0 && i != 1) {
		return nil
	}
	off := int(h - 1)
	if h-1 >= uint64(len(a.mem)) || off%a.size >= flagBytes || off%flagBlockSize != 0 {
		return nil
	}
	return a.word(off + 64*i)
}

// Pulse tells the peers' waiters that this rank is working for them
// (algo.Pulser): it bumps the pulse word they watch while they poll.
func (t *Transport) Pulse() {
	if t.pulse != nil {
		atomic.AddUint64(t.pulse, 1)
	}
}

// Publish sets this rank's counter c to v and wakes the peers that sleep.
func (t *Transport) Publish(c *uint64, v uint64) {
	raceRelease()
	atomic.StoreUint64(c, v)
	if !t.enter() {
		return
	}
	defer t.exit()
	for _, l := range t.peers {
		if atomic.LoadUint32(l.peerSleepers) != 0 {
			ring(l.peerDoorbell)
		}
	}
}

// Await waits until world rank peer's counter c reaches v.
func (t *Transport) Await(ctx context.Context, group uint64, peer int, c *uint64, v uint64) error {
	if peer < 0 || peer >= t.size || t.links[peer] == nil {
		return comm.InvalidArgf("shm: await rank %d: that rank does not share this segment (ranks %v)", peer, t.local)
	}
	if !t.enter() {
		return errTransportClosed
	}
	defer t.exit()
	l := t.links[peer]
	ready := func() bool { return atomic.LoadUint64(c) >= v }
	for {
		ep := t.epoch.Load()
		if ready() {
			raceAcquire()
			return nil
		}
		if err := t.state(group); err != nil {
			return err
		}
		if err := l.closedErr(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		if t.await(ctx, ep, nil, nil, l.peerPulse, ready) {
			raceAcquire()
			return nil
		}
	}
}

// Quiesce waits until world rank peer's counter c reaches v, or the peer
// is gone (it said goodbye, its process died), for at most the peer
// deadline, whatever else failed (see algo.SharedMemory).
func (t *Transport) Quiesce(peer int, c *uint64, v uint64) bool {
	if peer < 0 || peer >= t.size || t.links[peer] == nil || peer == t.rank {
		return false
	}
	if !t.enter() {
		return false
	}
	defer t.exit()
	l := t.links[peer]
	deadline := time.Now().Add(t.peerDL)
	nap := 20 * time.Microsecond
	for {
		if atomic.LoadUint64(c) >= v {
			raceAcquire()
			return true
		}
		if atomic.LoadUint32(l.peerState) == stateClosed || (l.watch != nil && !l.watch.alive()) || time.Now().After(deadline) {
			return false
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
	}
}
