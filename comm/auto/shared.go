package auto

import (
	"context"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// The shared memory of the ranks on this host (algo.SharedMemory): that of
// the shared-memory part. A Comm whose ranks are all on this host gets
// zero-copy all-reduces of buffers allocated there (comm.Alloc); one that
// spans hosts allocates ordinary memory.
var _ algo.SharedMemory = (*Transport)(nil)

// Alloc returns n zeroed bytes of this rank's shared-memory area.
func (t *Transport) Alloc(n int) ([]byte, func(), error) {
	if t.shm == nil {
		return nil, nil, comm.ErrUnsupported
	}
	return t.shm.Alloc(n)
}

// Shares reports whether world rank r maps this rank's shared memory.
func (t *Transport) Shares(r int) bool {
	return t.shm != nil && r >= 0 && r < t.size && t.onHost[r] && t.shm.Shares(r)
}

// Locate: see algo.SharedMemory.
func (t *Transport) Locate(b []byte) uint64 {
	if t.shm == nil {
		return 0
	}
	return t.shm.Locate(b)
}

// Map: see algo.SharedMemory.
func (t *Transport) Map(h uint64, n int) []byte {
	if t.shm == nil {
		return nil
	}
	return t.shm.Map(h, n)
}

// Flags: see algo.SharedMemory.
func (t *Transport) Flags() (uint64, *uint64, *uint64, func()) {
	if t.shm == nil {
		return 0, nil, nil, nil
	}
	return t.shm.Flags()
}

// Counter: see algo.SharedMemory.
func (t *Transport) Counter(h uint64, i int) *uint64 {
	if t.shm == nil {
		return nil
	}
	return t.shm.Counter(h, i)
}

// Pulse: see algo.Pulser.
func (t *Transport) Pulse() {
	if t.shm != nil {
		t.shm.Pulse()
	}
}

var _ algo.Pulser = (*Transport)(nil)

// Publish: see algo.SharedMemory.
func (t *Transport) Publish(c *uint64, v uint64) {
	if t.shm != nil {
		t.shm.Publish(c, v)
	}
}

// Await: see algo.SharedMemory. A failure of the transport's other part
// ends it too (couple fails the shared-memory part).
func (t *Transport) Await(ctx context.Context, group uint64, peer int, c *uint64, v uint64) error {
	if err := t.checkPeer("await", peer); err != nil {
		return err
	}
	if err := t.failed(); err != nil {
		return err
	}
	if t.shm == nil || !t.onHost[peer] {
		return comm.InvalidArgf("auto: await rank %d: not on this host", peer)
	}
	err := t.shm.Await(ctx, group, peer, c, v)
	t.couple(err)
	return err
}

// Quiesce: see algo.SharedMemory.
func (t *Transport) Quiesce(peer int, c *uint64, v uint64) bool {
	if t.shm == nil || peer < 0 || peer >= t.size || !t.onHost[peer] {
		return false
	}
	return t.shm.Quiesce(peer, c, v)
}
