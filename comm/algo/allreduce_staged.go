package algo

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/reduce"
	"github.com/gdist/gdist/internal/vecmath"
)

// The staged all-reduce of ordinary buffers over a SharedMemory transport
// (shm, auto on one host): copy-in, reduce, copy-out, like Open MPI's
// shared-memory all-reduce, on the calling goroutine, with no message in
// steady state. Each rank keeps, for the Comm's life, a staging area in
// its shared memory (an input region of Tuning.StagedBytes and a result
// region as long) and a flag block of two counters (ready, reduced).
// For each piece of at most StagedBytes of the buffer, cut into the p
// blocks of the ring, rank r:
//
//  1. copies the blocks the others reduce (every block but r) from its
//     buffer into its input region, and publishes ready;
//  2. once every peer is ready, reduces block r: its own buffer's block
//     op every peer's input block r, in rank order, chunk by chunk into
//     a scratch chunk and from there (still in L1) into its buffer and
//     its result region; publishes reduced;
//  3. once peer q has reduced, copies q's result into block q of its
//     buffer.
//
// The staging is written with streaming stores (vecmath.CopyNT): its
// lines were read by the peers since this rank last wrote them, and an
// ordinary store first takes each line back from a reader's cache, which
// cost 5x when the two vCPUs of this VM sit far apart (a 1 MiB op 160
// against 70 us; issue 30, benchmarks/NOTES.md).
//
// Nobody writes into another rank's memory: a rank writes its staging and
// its buffer, and reads its peers' staging. The two counters order the
// reuse: a rank rewrites its input region (step 1 of the next piece) only
// after every peer reduced (step 3 waited for that), and its result region
// (step 2 of the next piece) only after every peer is ready for that
// piece, which each publishes after its step 3 of this one. So a piece
// costs two waits and no handshake per chunk; the ranks' counters advance
// in lockstep, one per piece, from the bases exchanged once, when the
// staging is set up (one 32-byte message each way, on the first staged
// op of the Comm; if any rank cannot set up, every rank keeps to the
// table's algorithms for the Comm's life).
//
// Against the ring over shm's message rings (two messages a chunk each
// way, each waited for: 32 waits for 1 MiB in 64 KiB chunks, and a waiter
// on a pinned core that others share sleeps in each; issue 30) a rank
// copies (p-1)n/p bytes in, reduces n/p, copies (p-1)n/p out, and waits
// twice a piece.
//
//	cost: 2a + n(p-1)/p g + 2n(p-1)/p b (copy-in and copy-out; p=2: 2a + n/2 g + n b)

// stagedStep is the step of the set-up message.
const stagedStep = zcStep + 1

// stagedChunk is the unit in which a block is reduced into the result
// region and copied on into the buffer (both in L1).
const stagedChunk = 16 << 10

// stagedCopy is how much the staged all-reduce copies between two pulses
// (Pulser): about 2 us.
const stagedCopy = 64 << 10

// staging is a Comm's staged all-reduce state (c.stg; only the running
// collective touches it).
type staging struct {
	off   bool // set-up failed on some rank: never again on this Comm
	piece int  // StagedBytes when set up: each region's size
	mine  []byte
	free  func()
	// this rank's counters (ready, reduced) and how many pieces it has
	// done since set-up
	ready, reduced, done *uint64
	release, release2    func()
	k, ops               uint64 // pieces and ops done since set-up
	rbase, fbase, dbase  uint64
	peers                []stagedPeer
	pulser               Pulser // the transport, if it is one
	seg                  []int  // a piece's block bounds (p+1), reused
	tmp                  []byte // a chunk's reduction (stagedChunk), reused
}

// pulse tells the peers this rank is working (Pulser).
func (st *staging) pulse() {
	if st.pulser != nil {
		st.pulser.Pulse()
	}
}

// cp copies src into dst, pulsing every stagedCopy bytes; nt: with
// streaming stores (vecmath.CopyNT), for the staging, whose lines the
// peers read since this rank last wrote them: an ordinary store takes
// each line back from the reader's cache first, which ran at 7.9 GB/s
// against streaming stores' 57 GB/s when the two vCPUs sat far apart
// (issue 30; benchmarks/NOTES.md).
func (st *staging) cp(dst, src []byte, nt bool) {
	for len(src) > 0 {
		k := min(len(src), stagedCopy)
		if nt {
			vecmath.CopyNT(dst[:k], src[:k])
		} else {
			copy(dst[:k], src[:k])
		}
		dst, src = dst[k:], src[k:]
		st.pulse()
	}
}

type stagedPeer struct {
	mem                  []byte // its staging
	ready, reduced, done *uint64
	rbase, fbase, dbase  uint64
}

// stagedPath reports whether an all-reduce of n bytes of an ordinary buffer
// runs staged (every rank decides alike). Two ranks stage every size by
// default: two waits on counters beat the exchange of two messages even
// at 4 KiB (0.6 against 1.1 us, pinned or not, 2026-11-27); more ranks
// only from 128 KiB: each wait of a piece waits for every peer, which
// costs 3x recursive doubling's pairwise rounds at 4-64 KiB when 4 ranks
// share 2 cores (100 against 32 us; at 1 MiB staged wins, 390 against
// 710 us).
func (o *op) stagedPath(n int) (SharedMemory, bool) {
	c := o.c
	lo := o.tun.StagedMin
	if c.Size() == 2 {
		lo = o.tun.StagedMinPair
	}
	if lo <= 0 || n < lo || o.tun.StagedBytes < 4<<10 || c.Size() < 2 || c.base != nil {
		return nil, false
	}
	if c.stg != nil && c.stg.off {
		return nil, false
	}
	if f, ok := o.tun.Force[o.name]; ok && f != AlgoStaged {
		return nil, false
	}
	sm, ok := c.t.(SharedMemory)
	if !ok {
		return nil, false
	}
	for _, w := range c.members {
		if !sm.Shares(w) {
			return nil, false
		}
	}
	return sm, true
}

// setupStaging allocates this rank's staging and flag block and exchanges
// their handles; ok is false if some rank could not (c.stg.off then).
func (o *op) setupStaging(sm SharedMemory) (ok bool, err error) {
	c := o.c
	p, r := c.Size(), c.rank
	st := &staging{piece: o.tun.StagedBytes / 64 * 64}
	var mine [48]byte
	le := binary.LittleEndian
	mem, free, aerr := sm.Alloc(2 * st.piece)
	if aerr == nil {
		st.mine, st.free = mem, free
		fh, ready, reduced, release := sm.Flags()
		if fh != 0 {
			st.ready, st.reduced, st.release = ready, reduced, release
			fh2, done, _, release2 := sm.Flags()
			if fh2 != 0 {
				st.done, st.release2 = done, release2
				st.rbase, st.fbase, st.dbase = atomic.LoadUint64(ready), atomic.LoadUint64(reduced), atomic.LoadUint64(done)
				le.PutUint64(mine[0:], sm.Locate(mem))
				le.PutUint64(mine[8:], fh)
				le.PutUint64(mine[16:], fh2)
				le.PutUint64(mine[24:], st.rbase)
				le.PutUint64(mine[32:], st.fbase)
				le.PutUint64(mine[40:], st.dbase)
			}
		}
	}
	const m = len(mine)
	all := make([]byte, m*p)
	copy(all[m*r:], mine[:])
	o.hdr.Algo = AlgoStaged
	if err := o.exchange(stagedStep, mine[:], all); err != nil {
		st.drop()
		return false, err
	}
	st.peers = make([]stagedPeer, p)
	st.seg = make([]int, p+1)
	st.pulser, _ = sm.(Pulser)
	for q := range p {
		e := all[m*q : m*(q+1)]
		if le.Uint64(e[0:]) == 0 {
			// Someone could not: no rank stages on this Comm. Nobody
			// read this rank's staging: give it back.
			st.drop()
			c.stg = &staging{off: true}
			return false, nil
		}
		if q == r {
			continue
		}
		mem := sm.Map(le.Uint64(e[0:]), 2*st.piece)
		rc, fc, dc := sm.Counter(le.Uint64(e[8:]), 0), sm.Counter(le.Uint64(e[8:]), 1), sm.Counter(le.Uint64(e[16:]), 0)
		if mem == nil || rc == nil || fc == nil || dc == nil {
			st.drop()
			_, w := c.outer(q)
			return false, &comm.PeerError{Rank: w, Err: fmt.Errorf("%w: %s #%d: its staging (handle %#x, %d bytes) or flag blocks (%#x, %#x) are not in the shared memory",
				comm.ErrProtocol, o.name, o.hdr.Seq, le.Uint64(e[0:]), 2*st.piece, le.Uint64(e[8:]), le.Uint64(e[16:]))}
		}
		st.peers[q] = stagedPeer{mem: mem, ready: rc, reduced: fc, done: dc,
			rbase: le.Uint64(e[24:]), fbase: le.Uint64(e[32:]), dbase: le.Uint64(e[40:])}
	}
	c.stg = st
	return true, nil
}

// drop gives back what st holds (only before any peer may read it).
func (st *staging) drop() {
	if st.release2 != nil {
		st.release2()
	}
	if st.release != nil {
		st.release()
	}
	if st.free != nil {
		st.free()
	}
}

// allReduceStaged runs the staged all-reduce of buf; ran is false (and
// nothing was written) if the staging could not be set up.
func (o *op) allReduceStaged(sm SharedMemory, buf []byte) (ran bool, err error) {
	c := o.c
	if c.stg == nil {
		if ok, err := o.setupStaging(sm); !ok {
			return err != nil, err
		}
	}
	st := c.stg
	o.hdr.Algo = AlgoStaged
	p, r := c.Size(), c.rank
	es := o.dt.Size()
	piece := st.piece / es * es
	await := func(q int, cnt *uint64, v uint64) error {
		if atomic.LoadUint64(cnt) >= v {
			return nil
		}
		return o.explain(sm.Await(o.ctx, c.group, c.members[q], cnt, v), q, false)
	}
	in, res := st.mine[:st.piece], st.mine[st.piece:]
	var readOwn, readOthers int64
	for plo := 0; plo < len(buf); plo += piece {
		b := buf[plo:min(plo+piece, len(buf))]
		seg := st.seg
		for i := range seg {
			seg[i] = int(int64(i)*int64(len(b)/es)/int64(p)) * es
		}
		// 1: copy in what the others reduce.
		for q := range p {
			if q != r {
				st.cp(in[seg[q]:seg[q+1]], b[seg[q]:seg[q+1]], true)
			}
		}
		st.k++
		sm.Publish(st.ready, st.rbase+st.k)
		for q := range p {
			if q != r {
				if err := await(q, st.peers[q].ready, st.peers[q].rbase+st.k); err != nil {
					return true, err
				}
			}
		}
		// 2: reduce block r into the buffer, a chunk at a time, and
		// stream each chunk on into the result region (see cp).
		lo, hi := seg[r], seg[r+1]
		if st.tmp == nil {
			st.tmp = make([]byte, stagedChunk)
		}
		for a := lo; a < hi; a += stagedChunk {
			e := min(a+stagedChunk, hi)
			dst := st.tmp[:e-a]
			first := true
			for q := range p {
				if q == r {
					continue
				}
				if first {
					reduce.To(o.dt, o.red, dst, b[a:e], st.peers[q].mem[a:e])
					first = false
				} else {
					reduce.Into(o.dt, o.red, dst, st.peers[q].mem[a:e])
				}
			}
			o.finishAvg(dst)
			copy(b[a:e], dst)
			vecmath.CopyNT(res[a-lo:e-lo], dst)
			st.pulse()
		}
		sm.Publish(st.reduced, st.fbase+st.k)
		readOwn += int64(hi - lo)
		// 3: copy out the others' results.
		for q := range p {
			if q == r {
				continue
			}
			pq := &st.peers[q]
			if err := await(q, pq.reduced, pq.fbase+st.k); err != nil {
				return true, err
			}
			n := seg[q+1] - seg[q]
			st.cp(b[seg[q]:seg[q+1]], pq.mem[st.piece:st.piece+n], false)
			c.traffic(q).read.Add(int64(n))
			readOthers += int64(n)
		}
	}
	st.ops++
	sm.Publish(st.done, st.dbase+st.ops)
	// Each peer's input block r was read once.
	for q := range p {
		if q != r {
			c.traffic(q).read.Add(readOwn)
		}
	}
	// Traffic counts what the peers read from this rank's staging as
	// sent (the copy-in is this path's send) and what it read from
	// theirs as received; Moved counts the reads (no message moved).
	c0, _ := c.outer(0)
	c0.received.Add(int64(p-1)*readOwn + readOthers)
	c0.sent.Add(readOthers + int64(p-1)*readOwn)
	return true, nil
}

// closeStaging gives back the staging when c closes, once every peer has
// finished with it: a peer may still be copying out of it after this
// rank's last op returned (each publishes done at the end of every staged
// op), and memory given back could be handed out and cleared at once. A
// peer that is gone or stays away past the transport's peer deadline
// (Quiesce) leaves the staging allocated rather than risk that.
func (c *Comm) closeStaging() {
	st := c.stg
	if st == nil || st.off {
		return
	}
	c.stg = nil
	sm := c.t.(SharedMemory)
	for q, pq := range st.peers {
		if q != c.rank && !sm.Quiesce(c.members[q], pq.done, pq.dbase+st.ops) {
			return
		}
	}
	st.drop()
}
