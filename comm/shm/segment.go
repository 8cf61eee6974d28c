//go:build linux

package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// Segment layout. All offsets are from the start of the mapping; every
// word that two processes write sits on its own cache line.
//
//	header      headerSize bytes: magic, version, geometry, creator, nonce,
//	            the world rank of every local index
//	slots       n x slotSize: one per local rank (pid, proof of the token,
//	            state, futex words, heartbeat, goodbye reason)
//	pairs       n x n x pairSize: pair (i, j) carries i -> j: a control
//	            page (ring indices, waiter counts), the control ring
//	            (aborts) and the data ring. The diagonal is unused.
//	areas       from areasOff (64 KiB aligned): n x areaBytes, the shared
//	            memory each rank allocates from (arena.go), mapped apart.
const (
	segMagic   = "GDSHMSEG"
	segVersion = 2
	namePrefix = "gdist-shm-"

	headerSize  = 4096
	hdrMagic    = 0   // [8]byte
	hdrVersion  = 8   // u32
	hdrN        = 12  // u32: local ranks
	hdrRing     = 16  // u64: data ring bytes
	hdrCtrl     = 24  // u64: control ring bytes
	hdrPid      = 32  // u64: creator pid
	hdrStart    = 40  // u64: creator start time
	hdrCreated  = 48  // u64: unix nanos
	hdrWorld    = 56  // u32: world size
	hdrNonce    = 64  // [32]byte
	hdrArea     = 96  // u64: area bytes per rank
	hdrAttached = 60  // u32: ranks that attached
	hdrRanks    = 128 // [n]u32

	slotSize      = 8192
	slotPid       = 0  // u64
	slotStart     = 8  // u64
	slotProof     = 16 // [32]byte
	slotState     = 48 // u32
	slotReasonLen = 52 // u32
	slotDoorbell  = 64
	slotSleepers  = 128
	slotCtrlBell  = 192
	slotHeartbeat = 256 // u64
	slotPulse     = 320 // u64: bumped while the rank polls (see await)
	slotReason    = 4096

	pairCtlSize      = 512
	pairTail         = 0   // u64, written by the producer
	pairDataWaiters  = 64  // u32, consumers asleep waiting for data
	pairHead         = 128 // u64, written by the consumer
	pairSpaceWaiters = 192 // u32, producers asleep waiting for space
	pairCtrlTail     = 256 // u64
	pairCtrlHead     = 320 // u64

	ctrlRingBytes = 16 << 10
)

// Slot states.
const (
	stateFree      = 0
	stateAttaching = 1
	stateAttached  = 2
	stateClosed    = 3 // said goodbye; the reason is in the slot
)

// geometry describes a segment's size.
type geometry struct {
	n         int
	ringBytes int
	ctrlBytes int
	areaBytes int // per rank; 0: no areas
}

func (g geometry) pairSize() int     { return pairCtlSize + g.ctrlBytes + g.ringBytes }
func (g geometry) slotOff(i int) int { return headerSize + i*slotSize }
func (g geometry) pairOff(i, j int) int {
	return headerSize + g.n*slotSize + (i*g.n+j)*g.pairSize()
}

// ctlSize is the size of the part mapped as the segment proper.
func (g geometry) ctlSize() int { return headerSize + g.n*slotSize + g.n*g.n*g.pairSize() }

// areasOff is the file offset of the areas.
func (g geometry) areasOff() int { return (g.ctlSize() + areaAlign - 1) &^ (areaAlign - 1) }

// size is the file's size.
func (g geometry) size() int {
	if g.areaBytes == 0 {
		return g.ctlSize()
	}
	return g.areasOff() + g.n*g.areaBytes
}

// segment is one mapping of a job's shared-memory file. f stays open
// while the areas need it (arena.go).
type segment struct {
	geometry
	mem []byte
	f   *os.File
}

func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }

// unmap unmaps the segment proper and closes the file unless the areas
// took it (arena.go).
func (s *segment) unmap() {
	if s.mem != nil {
		syscall.Munmap(s.mem)
		s.mem = nil
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

func mapFile(f *os.File, size int) ([]byte, error) {
	// MAP_POPULATE maps every page now, so the first messages through a
	// ring do not pay a page fault per 4 KiB.
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
}

// createSegment creates the file (exclusively, mode 0600), sizes and maps
// it, and writes the header; the magic goes last, so a reader that sees it
// sees a complete header.
func createSegment(path string, g geometry, world int, nonce []byte, ranks []int) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	if err := f.Chmod(0o600); err != nil { // whatever the umask did
		os.Remove(path)
		return nil, err
	}
	if err := f.Truncate(int64(g.size())); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("sizing %s to %d bytes: %w", path, g.size(), err)
	}
	mem, err := mapFile(f, g.ctlSize())
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	keep = true
	s := &segment{geometry: g, mem: mem, f: f}
	le := binary.LittleEndian
	h := mem[:headerSize]
	le.PutUint32(h[hdrVersion:], segVersion)
	le.PutUint32(h[hdrN:], uint32(g.n))
	le.PutUint64(h[hdrRing:], uint64(g.ringBytes))
	le.PutUint64(h[hdrCtrl:], uint64(g.ctrlBytes))
	le.PutUint64(h[hdrArea:], uint64(g.areaBytes))
	pid := os.Getpid()
	le.PutUint64(h[hdrPid:], uint64(pid))
	le.PutUint64(h[hdrStart:], procStart(pid))
	le.PutUint64(h[hdrCreated:], uint64(time.Now().UnixNano()))
	le.PutUint32(h[hdrWorld:], uint32(world))
	copy(h[hdrNonce:hdrNonce+32], nonce)
	for i, r := range ranks {
		le.PutUint32(h[hdrRanks+4*i:], uint32(r))
	}
	copy(h[hdrMagic:hdrMagic+8], segMagic)
	return s, nil
}

// openSegment opens and maps an existing segment, after checking that it
// is a regular file of this user with mode 0600 and that its header
// describes the job the caller expects.
func openSegment(path string, g geometry, world int, nonce []byte, ranks []int) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid != uint32(os.Getuid()) || st.Mode&0o077 != 0 {
		return nil, fmt.Errorf("%s is not a private regular file of this user (mode %o, uid %d)", path, st.Mode, st.Uid)
	}
	if st.Size != int64(g.size()) {
		return nil, fmt.Errorf("%s has %d bytes, want %d", path, st.Size, g.size())
	}
	mem, err := mapFile(f, g.ctlSize())
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	s := &segment{geometry: g, mem: mem}
	if err := s.checkHeader(world, nonce, ranks); err != nil {
		s.unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	keep = true
	s.f = f
	return s, nil
}

func (s *segment) checkHeader(world int, nonce []byte, ranks []int) error {
	le := binary.LittleEndian
	h := s.mem[:headerSize]
	switch {
	case string(h[hdrMagic:hdrMagic+8]) != segMagic:
		return errors.New("not a gdist segment")
	case le.Uint32(h[hdrVersion:]) != segVersion:
		return fmt.Errorf("segment version %d, want %d", le.Uint32(h[hdrVersion:]), segVersion)
	case int(le.Uint32(h[hdrN:])) != s.n || int(le.Uint64(h[hdrRing:])) != s.ringBytes ||
		int(le.Uint64(h[hdrCtrl:])) != s.ctrlBytes || int(le.Uint64(h[hdrArea:])) != s.areaBytes || int(le.Uint32(h[hdrWorld:])) != world:
		return errors.New("segment geometry differs from the one announced")
	case !bytes.Equal(h[hdrNonce:hdrNonce+32], nonce):
		return errors.New("segment belongs to another job")
	}
	for i, r := range ranks {
		if int(le.Uint32(h[hdrRanks+4*i:])) != r {
			return errors.New("segment lists other ranks")
		}
	}
	return nil
}

// staleAge is how old a segment file without a valid header must be
// before the sweep removes it (its creator may still be writing it).
const staleAge = 10 * time.Minute

// sweep removes the segment files in dir that belong to dead jobs: files
// of this user named gdist-shm-* whose creating process no longer runs
// (or, without a valid header, that are older than staleAge). Segments are
// unlinked as soon as every rank has mapped them, so only a job that died
// while starting up leaves one behind. It returns the paths removed.
func sweep(dir string, logf func(string, ...any)) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), namePrefix) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if why := staleReason(path); why != "" {
			if err := os.Remove(path); err == nil {
				removed = append(removed, path)
				logf("shm: removed stale segment %s (%s)", path, why)
			}
		}
	}
	return removed
}

// staleReason says why the segment file at path is stale, or "" if it
// may be in use.
func staleReason(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Uid != uint32(os.Getuid()) {
		return ""
	}
	h := make([]byte, headerSize)
	n, _ := f.ReadAt(h, 0)
	if n < headerSize || string(h[hdrMagic:hdrMagic+8]) != segMagic {
		// Its creator died before writing the header, or it is still
		// writing it; the name says who created it.
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(path), namePrefix), "-")
		if p, err := strconv.Atoi(pid); ok && err == nil && !pidAlive(p, 0) {
			return fmt.Sprintf("no header, and its creator, process %d, is gone", p)
		}
		if age := time.Since(time.Unix(st.Mtim.Unix())); age > staleAge {
			return fmt.Sprintf("no valid header, %v old", age.Round(time.Second))
		}
		return ""
	}
	le := binary.LittleEndian
	pid, start := int(le.Uint64(h[hdrPid:])), le.Uint64(h[hdrStart:])
	if !pidAlive(pid, start) {
		return fmt.Sprintf("its creator, process %d, is gone", pid)
	}
	return ""
}
