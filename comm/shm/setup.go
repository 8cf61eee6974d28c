//go:build linux

package shm

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/wire"
)

// segInfo is what the creating rank publishes in the store.
type segInfo struct {
	Nonce []byte // 32 random bytes; the file name derives from them
	Dir   string
	Ring  int
	Ctrl  int
	Frame int
	Area  int
	Ranks []int
	World int
	Host  string
	PID   int
	MAC   []byte // HMAC of everything above with the job token
}

func (si *segInfo) mac(token []byte) []byte {
	m := hmac.New(sha256.New, token)
	fmt.Fprintf(m, "gdist-shm/2 segment\x00%x\x00%s\x00%d\x00%d\x00%d\x00%d\x00%v\x00%d\x00%s\x00%d",
		si.Nonce, si.Dir, si.Ring, si.Ctrl, si.Frame, si.Area, si.Ranks, si.World, si.Host, si.PID)
	return m.Sum(nil)
}

// segName is the file name: the creator's pid (so that a sweep can tell
// a dead job's file even before its header is written) and a hash of the
// nonce with the token, so that only holders of the token can find it.
func segName(token, nonce []byte, pid int) string {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("gdist-shm/1 name\x00"))
	m.Write(nonce)
	return namePrefix + strconv.Itoa(pid) + "-" + hex.EncodeToString(m.Sum(nil)[:16])
}

// rankProof is what a rank writes into its slot to show it holds the token.
func rankProof(token, nonce []byte, rank int) []byte {
	m := hmac.New(sha256.New, token)
	fmt.Fprintf(m, "gdist-shm/1 rank\x00%x\x00%d", nonce, rank)
	return m.Sum(nil)
}

// ctrlTickMax bounds the control goroutine's tick (PeerDeadline()/4).
// Tests raise it to show that rings of the control bell wake it.
var ctrlTickMax = 100 * time.Millisecond

// New builds the shared-memory transport of rank cfg.Rank over all ranks
// (see the package documentation). It blocks until every rank has mapped
// the segment, ctx ends, or cfg.OpTimeout() passes.
func New(ctx context.Context, cfg comm.Config) (*Transport, error) {
	return NewWithOptions(ctx, cfg, Options{})
}

// NewWithOptions is New with transport options.
func NewWithOptions(ctx context.Context, cfg comm.Config, o Options) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o, err := o.withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	peerDL := cfg.PeerDeadline()
	t := &Transport{
		rank: cfg.Rank, size: cfg.Size, cfg: cfg, opts: o,
		peerDL:   peerDL,
		tick:     min(max(peerDL/4, time.Millisecond), ctrlTickMax),
		logf:     cfg.Logger(),
		local:    o.Ranks,
		dead:     make(chan struct{}),
		aborted:  map[uint64]error{},
		abortCh:  make(chan struct{}),
		links:    make([]*link, cfg.Size),
		ctrlDone: make(chan struct{}),
	}
	t.poll.Store(int64(o.PollFor))
	t.me, _ = slices.BinarySearch(t.local, t.rank)
	t.links[t.rank] = newLink(t, t.rank)
	if len(t.local) == 1 {
		// Alone: no segment, only the mailbox; the waiters' words live in
		// this process.
		w := new(soloWords)
		t.doorbell, t.sleepers, t.ctrlBell, t.myState, t.reasonLen = &w.doorbell, &w.sleepers, &w.ctrlBell, &w.state, &w.reasonLen
		t.heartbeat, t.pulse = &w.heartbeat, &w.pulse
		close(t.ctrlDone)
		return t, nil
	}
	if cfg.Store == nil {
		return nil, comm.InvalidArgf("shm: %d ranks need a Store", len(t.local))
	}
	if d := cfg.OpTimeout(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	if err := t.setup(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// setup runs the rendezvous: the lowest local rank creates and announces
// the segment, the others open it, every rank claims its slot, the last
// one to attach unlinks the file, and all wait for each other.
func (t *Transport) setup(ctx context.Context) (err error) {
	cfg, o := t.cfg, t.opts
	leader := t.local[0]
	gen, err := cfg.Store.Add(ctx, o.Prefix+"/"+cfg.Job+"/gen/"+strconv.Itoa(t.rank), 1)
	if err != nil {
		return fmt.Errorf("shm: rank %d: rendezvous: %w", t.rank, err)
	}
	ns := fmt.Sprintf("%s/%s/%d/%d", o.Prefix, cfg.Job, gen, leader)

	var si segInfo
	var seg *segment
	if t.rank == leader {
		si, seg, err = t.create(ctx, ns)
	} else {
		si, seg, err = t.join(ctx, ns)
	}
	if err != nil {
		if !errors.Is(err, comm.ErrAuth) {
			// Tell the others at once rather than let them wait for us.
			t.reportFailure(ns, err)
		}
		return err
	}
	t.seg, t.path = seg, filepath.Join(si.Dir, segName(cfg.Token, si.Nonce, si.PID))
	t.opts.FrameBytes = si.Frame
	defer func() {
		if err != nil {
			t.goodbye("setup failed: " + err.Error())
			os.Remove(t.path) // nobody can join any more; ignore ENOENT
			seg.unmap()
			t.seg = nil
			t.arena.close()
			t.arena = nil
			t.reportFailure(ns, err)
		}
	}()
	t.bindSlot()
	t.nonce = si.Nonce
	if err := t.ctrlWake.listen(ctrlName(cfg.Token, si.Nonce, t.rank)); err != nil {
		t.logf("shm: rank %d: no control socket (%v); its control goroutine sleeps on a futex", t.rank, err)
	}
	defer func() {
		if err != nil {
			t.ctrlWake.close()
		}
	}()
	if err := t.attach(ctx, ns, si); err != nil {
		return err
	}
	t.buildLinks()
	t.checkCtrlPeers()
	if err := t.mapAreas(); err != nil {
		return err
	}
	go t.ctrlLoop()
	return nil
}

// reportFailure tells the other ranks of the segment (waiting in join or
// attach) that this rank's setup failed, so that they fail at once.
func (t *Transport) reportFailure(ns string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg := fmt.Sprintf("rank %d: %v", t.rank, err)
	t.cfg.Store.CompareAndSet(ctx, ns+"/fail", nil, []byte(msg))
}

// create makes and announces the segment (the lowest local rank).
func (t *Transport) create(ctx context.Context, ns string) (segInfo, *segment, error) {
	o := t.opts
	sweep(o.Dir, t.logf)
	if o.AreaBytes > 0 && !onTmpfs(o.Dir) {
		t.logf("shm: rank %d: %s is not a tmpfs: the shared buffers of comm.Alloc will be written back to its disk (set GDIST_SHM_DIR to a tmpfs such as /dev/shm)", t.rank, o.Dir)
	}
	si := segInfo{
		Nonce: make([]byte, 32), Dir: o.Dir, Ring: o.RingBytes, Ctrl: ctrlRingBytes,
		Frame: min(o.FrameBytes, o.RingBytes/4, wire.MaxFrame), Area: o.AreaBytes, Ranks: t.local, World: t.size,
		Host: o.HostID, PID: os.Getpid(),
	}
	if _, err := rand.Read(si.Nonce); err != nil {
		return si, nil, fmt.Errorf("shm: rank %d: no randomness: %w", t.rank, err)
	}
	si.MAC = si.mac(t.cfg.Token)
	g := geometry{n: len(t.local), ringBytes: si.Ring, ctrlBytes: si.Ctrl, areaBytes: si.Area}
	path := filepath.Join(si.Dir, segName(t.cfg.Token, si.Nonce, si.PID))
	seg, err := createSegment(path, g, t.size, si.Nonce, t.local)
	if err != nil {
		return si, nil, fmt.Errorf("shm: rank %d: creating the segment (%d bytes) in %s: %w", t.rank, g.size(), si.Dir, err)
	}
	b, _ := json.Marshal(si)
	got, err := t.cfg.Store.CompareAndSet(ctx, ns+"/seg", nil, b)
	if err == nil && !bytes.Equal(got, b) {
		err = fmt.Errorf("another process announced a segment for this job and generation first")
	}
	if err != nil {
		os.Remove(path)
		seg.unmap()
		return si, nil, fmt.Errorf("shm: rank %d: announcing the segment: %w", t.rank, err)
	}
	return si, seg, nil
}

// join opens the segment the lowest local rank announced, after checking
// that the announcement is signed with this rank's token and made on
// this host.
func (t *Transport) join(ctx context.Context, ns string) (segInfo, *segment, error) {
	var si segInfo
	leader := t.local[0]
	b, err := t.getOrFail(ctx, ns, ns+"/seg")
	if err != nil {
		return si, nil, fmt.Errorf("shm: rank %d: waiting for rank %d to announce the segment: %w", t.rank, leader, err)
	}
	if err := json.Unmarshal(b, &si); err != nil {
		return si, nil, fmt.Errorf("shm: rank %d: %w: malformed segment announcement: %v", t.rank, comm.ErrProtocol, err)
	}
	if !hmac.Equal(si.MAC, si.mac(t.cfg.Token)) {
		return si, nil, fmt.Errorf("shm: rank %d: %w: the segment announced by rank %d is not signed with this rank's job token",
			t.rank, comm.ErrAuth, leader)
	}
	if si.Host != t.opts.HostID {
		return si, nil, fmt.Errorf("shm: rank %d is on host %q but rank %d is on host %q: shared memory needs one host (use the auto or tcp backend)",
			t.rank, t.opts.HostID, leader, si.Host)
	}
	if !slices.Equal(si.Ranks, t.local) || si.World != t.size {
		return si, nil, comm.InvalidArgf("shm: rank %d expects ranks %v of %d to share the segment, rank %d announced %v of %d",
			t.rank, t.local, t.size, leader, si.Ranks, si.World)
	}
	if len(si.Nonce) != 32 || si.Ring < 64<<10 || si.Ring&(si.Ring-1) != 0 || si.Ctrl != ctrlRingBytes ||
		si.Frame < 1024 || si.Frame > si.Ring/4 || si.Frame > wire.MaxFrame ||
		si.Area < 0 || si.Area%areaAlign != 0 || si.Area > 1<<40 || (si.Area != 0 && si.Area < 2*flagBytes) {
		return si, nil, fmt.Errorf("shm: rank %d: %w: bad segment geometry %+v", t.rank, comm.ErrProtocol, si)
	}
	g := geometry{n: len(t.local), ringBytes: si.Ring, ctrlBytes: si.Ctrl, areaBytes: si.Area}
	path := filepath.Join(si.Dir, segName(t.cfg.Token, si.Nonce, si.PID))
	seg, err := openSegment(path, g, t.size, si.Nonce, t.local)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return si, nil, fmt.Errorf("shm: rank %d: segment %s not found: rank %d (process %d) created it, so this rank does not see the same %s (another container?) or the job gave up",
				t.rank, path, leader, si.PID, si.Dir)
		}
		return si, nil, fmt.Errorf("shm: rank %d: opening the segment: %w", t.rank, err)
	}
	return si, seg, nil
}

// getOrFail gets key from the store, unless a rank reports a setup failure
// under ns/fail first.
func (t *Transport) getOrFail(ctx context.Context, ns, key string) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	failc := make(chan []byte, 1)
	go func() {
		if b, err := t.cfg.Store.Get(ctx, ns+"/fail"); err == nil {
			failc <- b
		}
	}()
	type res struct {
		b   []byte
		err error
	}
	gotc := make(chan res, 1)
	go func() {
		b, err := t.cfg.Store.Get(ctx, key)
		gotc <- res{b, err}
	}()
	select {
	case r := <-gotc:
		return r.b, r.err
	case b := <-failc:
		return nil, fmt.Errorf("setup failed on %s: %w", b, comm.ErrAborted)
	}
}

// bindSlot points this rank's slot words into the mapping.
func (t *Transport) bindSlot() {
	s, off := t.seg, t.seg.slotOff(t.me)
	t.doorbell = s.u32(off + slotDoorbell)
	t.sleepers = s.u32(off + slotSleepers)
	t.ctrlBell = s.u32(off + slotCtrlBell)
	t.myState = s.u32(off + slotState)
	t.reasonLen = s.u32(off + slotReasonLen)
	t.heartbeat = s.u64(off + slotHeartbeat)
	t.pulse = s.u64(off + slotPulse)
	t.reason = s.mem[off+slotReason : off+slotSize : off+slotSize]
}

// attach claims this rank's slot, unlinks the file if this rank is the
// last to map it, and waits until every rank has attached.
func (t *Transport) attach(ctx context.Context, ns string, si segInfo) error {
	s, off := t.seg, t.seg.slotOff(t.me)
	if !atomic.CompareAndSwapUint32(t.myState, stateFree, stateAttaching) {
		return comm.InvalidArgf("shm: rank %d: its slot in the segment is taken (did rank %d join twice?)", t.rank, t.rank)
	}
	t.mu.Lock()
	t.claimed = true
	t.mu.Unlock()
	pid := os.Getpid()
	atomic.StoreUint64(s.u64(off+slotPid), uint64(pid))
	atomic.StoreUint64(s.u64(off+slotStart), procStart(pid))
	copy(s.mem[off+slotProof:off+slotProof+32], rankProof(t.cfg.Token, si.Nonce, t.rank))
	atomic.StoreUint64(t.heartbeat, 1)
	atomic.StoreUint32(t.myState, stateAttached)
	if atomic.AddUint32(s.u32(hdrAttached), 1) == uint32(s.n) {
		// Every rank has it mapped: nothing needs the name any more, and
		// a crash can no longer leave the file behind.
		if err := os.Remove(t.path); err != nil {
			t.logf("shm: rank %d: unlinking %s: %v", t.rank, t.path, err)
		}
	}

	failc := make(chan []byte, 1)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if b, err := t.cfg.Store.Get(fctx, ns+"/fail"); err == nil {
			failc <- b
		}
	}()
	nap := 50 * time.Microsecond
	for {
		var missing []int
		for i, r := range t.local {
			soff := s.slotOff(i)
			switch atomic.LoadUint32(s.u32(soff + slotState)) {
			case stateAttached:
			case stateClosed:
				n := min(int(atomic.LoadUint32(s.u32(soff+slotReasonLen))), wire.MaxAbortText)
				return fmt.Errorf("shm: rank %d: rank %d gave up while joining (%s): %w", t.rank, r, s.mem[soff+slotReason:soff+slotReason+n], comm.ErrAborted)
			default:
				missing = append(missing, r)
				continue
			}
			if p := int(atomic.LoadUint64(s.u64(soff + slotPid))); p != pid {
				if !pidAlive(p, atomic.LoadUint64(s.u64(soff+slotStart))) {
					return lostErr(r, "process %d died while joining", p)
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		select {
		case b := <-failc:
			return fmt.Errorf("shm: rank %d: setup failed on %s: %w", t.rank, b, comm.ErrAborted)
		case <-ctx.Done():
			cause := ctx.Err()
			if errors.Is(cause, context.DeadlineExceeded) {
				cause = fmt.Errorf("%w (%w)", comm.ErrTimeout, cause)
			}
			return fmt.Errorf("shm: rank %d of %d: segment incomplete, rank(s) %v never attached: %w", t.rank, t.size, missing, cause)
		case <-time.After(nap):
		}
		nap = min(2*nap, 10*time.Millisecond)
	}
	// Every rank must prove the token (a process of this user could open
	// the file by listing the directory; it cannot forge the proof).
	for i, r := range t.local {
		soff := s.slotOff(i)
		if !hmac.Equal(s.mem[soff+slotProof:soff+slotProof+32], rankProof(t.cfg.Token, si.Nonce, r)) {
			return &comm.PeerError{Rank: r, Err: fmt.Errorf("%w: the process in its slot does not hold the job token", comm.ErrAuth)}
		}
	}
	return nil
}

// buildLinks makes the links to the other local ranks.
func (t *Transport) buildLinks() {
	s := t.seg
	now := time.Now()
	mypid := os.Getpid()
	for i, r := range t.local {
		if r == t.rank {
			continue
		}
		l := newLink(t, r)
		l.maxFrame = t.opts.FrameBytes
		l.out = s.pair(t.me, i)
		l.in = s.pair(i, t.me)
		off := s.slotOff(i)
		l.peerState = s.u32(off + slotState)
		l.peerDoorbell = s.u32(off + slotDoorbell)
		l.peerSleepers = s.u32(off + slotSleepers)
		l.peerCtrlAddr = newCtrlAddr(ctrlName(t.cfg.Token, t.nonce, r))
		l.peerCtrlBell = s.u32(off + slotCtrlBell)
		l.peerReasonLen = s.u32(off + slotReasonLen)
		l.peerHB = s.u64(off + slotHeartbeat)
		l.peerPulse = s.u64(off + slotPulse)
		l.peerReason = s.mem[off+slotReason : off+slotSize : off+slotSize]
		l.peerPid = int(atomic.LoadUint64(s.u64(off + slotPid)))
		if l.peerPid != mypid {
			l.watch = watchProc(l.peerPid, atomic.LoadUint64(s.u64(off+slotStart)))
		}
		l.lastHBAt = now
		t.links[r] = l
		t.peers = append(t.peers, l)
	}
}

// soloWords stand in for the slot of a rank that shares no segment.
type soloWords struct {
	doorbell, sleepers, ctrlBell, state, reasonLen uint32
	heartbeat, pulse                               uint64
}
