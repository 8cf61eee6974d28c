package shm

import (
	"slices"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/host"
)

// Defaults.
const (
	// maxLocal bounds the ranks of one segment.
	maxLocal = 256
	// ringBudget: without an explicit ring size, rings shrink (to 64 KiB
	// at least) so that all of a segment's rings fit in this many bytes.
	ringBudget = 256 << 20

	DefaultRingBytes     = 256 << 10
	DefaultFrameBytes    = 64 << 10
	DefaultMaxUnexpected = 1 << 30
	DefaultDir           = "/dev/shm"

	defaultPollFor   = 20 * time.Microsecond
	defaultSpinFor   = 50 * time.Microsecond
	defaultActiveFor = time.Millisecond
	// DefaultAreaBytes is each rank's area of shared memory for Alloc:
	// address space only until a buffer is allocated there (the file is
	// sparse). 1 GiB: with 256 MiB, ZeRO-2 on the 36.8M-parameter mlp-xl
	// at 2 ranks ran out (its gradient buffer and buckets in flight) and
	// its later buckets fell back to ordinary memory and the reduce's
	// ring path: 169 MB moved per step instead of the zero-copy 147.
	DefaultAreaBytes = 1 << 30

	// areaAlign aligns the areas (and their sizes) in the file; each
	// area starts with flagBytes of flag blocks (arena.go).
	areaAlign = 64 << 10
	flagBytes = 64 << 10
)

// Options tunes the shared-memory transport beyond comm.Config. The zero
// value gives the defaults.
type Options struct {
	// Prefix namespaces the transport's rendezvous keys ("shm" if empty).
	Prefix string
	// Ranks lists the world ranks that share the segment, this rank
	// included (nil: every rank). Sends to and receives from other ranks
	// fail with comm.ErrInvalidArgument. Every listed rank must pass the
	// same list.
	Ranks []int
	// Dir is where the segment file is created: $GDIST_SHM_DIR, else
	// /dev/shm. Only the creating rank's Dir matters.
	Dir string
	// RingBytes is the size of each data ring (one per ordered pair of
	// ranks), a power of two of at least 64 KiB: $GDIST_SHM_RING_BYTES,
	// else DefaultRingBytes, halved while the n*(n-1) rings of n ranks
	// would exceed 256 MiB. Only the creating rank's value matters.
	RingBytes int
	// FrameBytes bounds the payload of one ring record, the unit in which
	// a large message is pipelined (the receiver copies one frame while
	// the sender writes the next): $GDIST_SHM_FRAME_BYTES, else
	// DefaultFrameBytes; at most a quarter of the ring.
	FrameBytes int
	// AreaBytes is the size of each rank's area of shared memory, which
	// Alloc (comm.Alloc) takes buffers from, a multiple of 64 KiB:
	// $GDIST_SHM_AREA_BYTES, else DefaultAreaBytes; negative (or 0 in the
	// environment): none, and Alloc gives ordinary memory. The areas
	// cost address space only: the file is sparse, and pages are
	// committed when a buffer is allocated. Only the creating rank's
	// value matters.
	AreaBytes int
	// MaxUnexpected caps the payload bytes one link may hold queued for
	// receives not posted yet (DefaultMaxUnexpected if <= 0). A peer that
	// sends more is a protocol error.
	MaxUnexpected int64
	// HostID identifies this host (HostID() if empty). Ranks that report
	// different hosts cannot share memory and fail at once, naming both.
	HostID string
	// PollFor is how long a waiter polls the shared words without giving
	// up its processor, at most (its adaptive window; see await):
	// $GDIST_SHM_POLL_US microseconds, else 20 us; negative (0 in the
	// environment): never. A message of a peer that is running arrives
	// within a few microseconds, and a yield or a sleep costs more.
	PollFor time.Duration
	// SpinFor is how long a waiter then polls while yielding:
	// $GDIST_SHM_SPIN_US microseconds, else 50 us; negative: never.
	SpinFor time.Duration
	// ActiveFor bounds how long a waiter polls past its window while the
	// peer it waits for is polling too: $GDIST_SHM_ACTIVE_US
	// microseconds, else 1 ms; negative: never.
	ActiveFor time.Duration
	// OnAbort, if not nil, is called when a peer's abort of group
	// arrives, after the transport has failed the group's ops with err.
	// It runs on the control goroutine and must not block. Composite
	// transports use it to fail the group in their other parts too.
	OnAbort func(group uint64, err error)
}

// withDefaults fills o's zero fields from the environment (withEnv), then
// from the defaults, and checks them.
func (o Options) withDefaults(cfg comm.Config) (Options, error) {
	o, err := o.withEnv()
	if err != nil {
		return o, err
	}
	if o.Prefix == "" {
		o.Prefix = "shm"
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Ranks == nil {
		o.Ranks = make([]int, cfg.Size)
		for i := range o.Ranks {
			o.Ranks[i] = i
		}
	} else {
		o.Ranks = slices.Clone(o.Ranks)
		slices.Sort(o.Ranks)
		for i, r := range o.Ranks {
			if r < 0 || r >= cfg.Size {
				return o, comm.InvalidArgf("shm: rank %d in Ranks is out of range [0, %d)", r, cfg.Size)
			}
			if i > 0 && o.Ranks[i-1] == r {
				return o, comm.InvalidArgf("shm: rank %d listed twice in Ranks", r)
			}
		}
		if _, ok := slices.BinarySearch(o.Ranks, cfg.Rank); !ok {
			return o, comm.InvalidArgf("shm: Ranks %v does not include this rank, %d", o.Ranks, cfg.Rank)
		}
	}
	if len(o.Ranks) > maxLocal {
		return o, comm.InvalidArgf("shm: %d ranks share a segment; at most %d can", len(o.Ranks), maxLocal)
	}
	if o.RingBytes == 0 {
		o.RingBytes = DefaultRingBytes
		if n := len(o.Ranks); n > 1 {
			for o.RingBytes > 64<<10 && n*(n-1)*o.RingBytes > ringBudget {
				o.RingBytes /= 2
			}
		}
	}
	if o.RingBytes < 64<<10 || o.RingBytes > 1<<30 || o.RingBytes&(o.RingBytes-1) != 0 {
		return o, comm.InvalidArgf("shm: ring size %d is not a power of two in [64 KiB, 1 GiB]", o.RingBytes)
	}
	if o.FrameBytes == 0 {
		o.FrameBytes = DefaultFrameBytes
	}
	if o.FrameBytes < 1024 {
		return o, comm.InvalidArgf("shm: frame size %d < 1024", o.FrameBytes)
	}
	if o.AreaBytes == 0 {
		o.AreaBytes = DefaultAreaBytes
	}
	if o.AreaBytes < 0 {
		o.AreaBytes = 0
	} else if o.AreaBytes%areaAlign != 0 || o.AreaBytes < 2*flagBytes || o.AreaBytes > 1<<40 {
		return o, comm.InvalidArgf("shm: area size %d is not a multiple of 64 KiB in [128 KiB, 1 TiB] (Options.AreaBytes, GDIST_SHM_AREA_BYTES)", o.AreaBytes)
	}
	if o.MaxUnexpected <= 0 {
		o.MaxUnexpected = DefaultMaxUnexpected
	}
	if o.HostID == "" {
		o.HostID = HostID()
	}
	for _, w := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.PollFor, defaultPollFor}, {&o.SpinFor, defaultSpinFor}, {&o.ActiveFor, defaultActiveFor}} {
		if *w.v == 0 {
			*w.v = w.def
		}
		*w.v = max(*w.v, 0)
	}
	return o, nil
}

// HostID identifies this host for the purpose of sharing memory:
// $GDIST_HOST_ID if set, else the hostname and the kernel's boot id, so
// that two containers or two boots never look alike.
func HostID() string { return host.ID() }
