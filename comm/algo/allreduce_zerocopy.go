package algo

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/reduce"
)

// All-reduce, reduce-scatter and all-gather of buffers that lie in shared
// memory (SharedMemory; comm.Alloc on the shm backend): no message
// carries data. The ranks exchange handles (where each one's buffer and
// flag block lie: one 32-byte message to each peer); then, for an
// all-reduce, rank r reduces block r of the buffer (the blocks of the
// ring) chunk by chunk, reading every peer's block r where it lies
// (x_r op the others in rank order), and writes the result into its own
// buffer and into every peer's. Every byte of every peer is read once and
// written once, by the one rank that owns its block, so no chunk needs a
// handshake: one before the first write into a peer (it is armed) and one
// at the end (every rank has finished with the others' buffers: fin).
// Reduce-scatter is the first half (the result only into the rank's own
// output), all-gather the second (the rank's block into every peer);
// a reduce to a root is the first half with one block, the root's: the
// root reads every peer's whole buffer, the others lend theirs.
//
// A rank that reads or writes only its own block of each buffer keeps
// those lines in its own cache from one op to the next when, as in a
// benchmark loop, nobody else touches them; a training step that rewrites
// its gradient buffer between all-reduces moves each line between the
// cores once per op, as any algorithm must.
//
// The choice is made by every rank alike: the exchange runs on a
// SharedMemory transport whose ranks all share the memory, for buffers of
// at least Tuning.ZeroCopyMin bytes; if any rank's buffer is not in shared
// memory (or it has no free flag block), every rank runs the table's
// algorithm instead. The exchange costs one small message each way (a few
// microseconds), also to ops on ordinary buffers; GDIST_ZEROCOPY_MIN
// moves or (0) removes it. Its default, 128 KiB, is where the zero-copy
// path overtakes the ordinary one on 2 ranks here (2026-11-25 06:14,
// load 5.9, medians of 5, GB/s: 64 KiB 1.34 zero-copy against 1.87
// ordinary; 128 KiB 2.37 against 0.74; 256 KiB 4.67 against 1.09): below
// it, the ordinary path's one eager exchange beats the zero-copy path's
// three waits (the exchange, the peer being armed, its fin).
//
//	cost: 2a + n(p-1)/p g + n(p-1)/p b (each rank reads n(p-1)/p bytes
//	of peers to reduce and writes as many into them; no ring)

// zcStep is the step of the exchange message.
const zcStep = 1 << 30

// zeroCopy returns the transport's SharedMemory if a collective of n
// bytes (all-reduce: the buffer; reduce-scatter and all-gather: all p
// blocks) should try the zero-copy path (every rank decides alike).
func (o *op) zeroCopy(n int) (SharedMemory, bool) {
	if o.tun.ZeroCopyMin <= 0 || n < o.tun.ZeroCopyMin || o.c.Size() < 2 || o.c.base != nil {
		return nil, false
	}
	if f, ok := o.tun.Force[o.name]; ok && f != AlgoZeroCopy {
		return nil, false
	}
	sm, ok := o.c.t.(SharedMemory)
	if !ok {
		return nil, false
	}
	for _, w := range o.c.members {
		if !sm.Shares(w) {
			return nil, false
		}
	}
	return sm, true
}

// allReduceZeroCopy runs the zero-copy all-reduce of buf if every rank's
// buffer lies in shared memory; ran is false (and nothing was written) if
// some rank's does not.
func (o *op) allReduceZeroCopy(sm SharedMemory, buf []byte) (ran bool, err error) {
	es := o.dt.Size()
	seg := bounds(len(buf)/es, o.c.Size(), es)
	r := o.c.rank
	return o.zeroCopyRun(sm, buf, buf[seg[r]:seg[r+1]], seg, true, true)
}

// zeroCopyRun is the zero-copy path of all-reduce (reduce and gather),
// reduce-scatter (reducing: in is src, out dst) and all-gather (gather: in
// is dst, this rank's block already in place). in is the buffer every
// rank has in shared memory, cut into the blocks seg; reducing, this
// rank sets out (the length of its block; it may be that block of in) to
// its block of in op the peers' blocks; with gather, it writes its block
// (the result) into every peer's in.
//
// Rank r reads and writes only block r of every buffer, so the ranks
// never touch the same bytes and need no per-chunk handshake. What they
// must agree on is when a buffer may be touched: a rank writes into a
// peer's buffer only once that peer has published that it is armed
// (it has everyone's handles, so it can wait for the writers), and no
// rank returns, whether its op succeeds or fails, before every peer has
// published fin (it no longer touches this rank's buffer) or is gone: a
// buffer is never read or written by a peer after its op returned.
func (o *op) zeroCopyRun(sm SharedMemory, in, out []byte, seg []int, reducing, gather bool) (ran bool, err error) {
	c := o.c
	p, r := c.Size(), c.rank
	h := sm.Locate(in)
	var fh uint64
	var ready, fin *uint64
	if h != 0 {
		var release func()
		fh, ready, fin, release = sm.Flags()
		if fh == 0 {
			h = 0
		} else {
			defer release()
		}
	}
	var readyBase, finBase uint64
	if h != 0 {
		readyBase, finBase = atomic.LoadUint64(ready), atomic.LoadUint64(fin)
		// Whatever happens, say that this rank is done with the peers'
		// buffers (peers that failed wait for it: Quiesce).
		defer sm.Publish(fin, finBase+1)
	}
	var mine [32]byte
	le := binary.LittleEndian
	le.PutUint64(mine[0:], h)
	le.PutUint64(mine[8:], fh)
	le.PutUint64(mine[16:], readyBase)
	le.PutUint64(mine[24:], finBase)
	all := make([]byte, 32*p)
	copy(all[32*r:], mine[:])
	o.hdr.Algo = AlgoZeroCopy
	if err := o.exchange(zcStep, mine[:], all); err != nil {
		return true, err
	}
	type peer struct {
		buf        []byte
		ready, fin *uint64
		rbase      uint64
		fbase      uint64
		armed      bool
	}
	ps := make([]peer, p)
	for q := range p {
		if le.Uint64(all[32*q:]) == 0 {
			return false, nil
		}
	}
	for q := range p {
		e := all[32*q : 32*q+32]
		if q == r {
			ps[q] = peer{buf: in, ready: ready, fin: fin, rbase: readyBase, fbase: finBase}
			continue
		}
		pb, pr, pf := sm.Map(le.Uint64(e[0:]), len(in)), sm.Counter(le.Uint64(e[8:]), 0), sm.Counter(le.Uint64(e[8:]), 1)
		if pb == nil || pr == nil || pf == nil {
			_, w := c.outer(q)
			return true, &comm.PeerError{Rank: w, Err: fmt.Errorf("%w: %s #%d: its shared buffer (handle %#x, %d bytes) or flag block (%#x) is not in the shared memory",
				comm.ErrProtocol, o.name, o.hdr.Seq, le.Uint64(e[0:]), len(in), le.Uint64(e[8:]))}
		}
		ps[q] = peer{buf: pb, ready: pr, fin: pf, rbase: le.Uint64(e[16:]), fbase: le.Uint64(e[24:])}
	}
	// From here on peers may write into this rank's buffer: on failure,
	// wait until they stopped.
	sm.Publish(ready, readyBase+1)
	failed := func(err error) (bool, error) {
		sm.Publish(fin, finBase+1)
		for q := range p {
			if q != r {
				sm.Quiesce(c.members[q], ps[q].fin, ps[q].fbase+1)
			}
		}
		return true, err
	}
	// await waits for peer q's counter cnt to reach v.
	await := func(q int, cnt *uint64, v uint64) error {
		if atomic.LoadUint64(cnt) >= v {
			return nil
		}
		return o.explain(sm.Await(o.ctx, c.group, c.members[q], cnt, v), q, false)
	}
	// push writes b (this rank's block, at byte offset lo) into every
	// peer's buffer, once that peer is armed.
	push := func(lo int, b []byte) error {
		for q := range p {
			pq := &ps[q]
			if q == r {
				continue
			}
			if !pq.armed {
				if err := await(q, pq.ready, pq.rbase+1); err != nil {
					return err
				}
				pq.armed = true
			}
			copy(pq.buf[lo:lo+len(b)], b)
		}
		return nil
	}

	es := o.dt.Size()
	ck := max(o.tun.ZeroCopyChunk/es*es, es)
	lo, hi := seg[r], seg[r+1]
	switch {
	case reducing:
		// Chunk by chunk, so that a chunk is still in cache when it is
		// pushed.
		for a := lo; a < hi; a += ck {
			b := min(a+ck, hi)
			dst := out[a-lo : b-lo]
			first := true
			for q := range p {
				if q == r {
					continue
				}
				if first {
					reduce.To(o.dt, o.red, dst, in[a:b], ps[q].buf[a:b])
					first = false
				} else {
					reduce.Into(o.dt, o.red, dst, ps[q].buf[a:b])
				}
			}
			o.finishAvg(dst)
			if gather {
				if err := push(a, dst); err != nil {
					return failed(err)
				}
			}
		}
	case gather:
		if err := push(lo, in[lo:hi]); err != nil {
			return failed(err)
		}
	}
	// Done with the peers' buffers; wait until they are done with this
	// rank's.
	sm.Publish(fin, finBase+1)
	for q := range p {
		if q != r {
			if err := await(q, ps[q].fin, ps[q].fbase+1); err != nil {
				return failed(err)
			}
		}
	}
	// Each peer's block r was read (reducing) and written (gather) once.
	own := int64(hi - lo)
	var read int64 // bytes read from peers
	if reducing {
		read = int64(p-1) * own
	}
	c0, _ := c.outer(0)
	c0.received.Add(read)
	for q := range p {
		if q == r || own == 0 {
			continue
		}
		t := c.traffic(q)
		if reducing {
			t.read.Add(own)
		}
		if gather {
			t.written.Add(own)
		}
	}
	return true, nil
}

// exchange sends mine (this rank's len(mine) bytes) to every other rank
// and receives theirs into all (len(mine) bytes per rank, in rank order).
func (o *op) exchange(step uint32, mine, all []byte) error {
	p, r, m := o.c.Size(), o.c.rank, len(mine)
	var errc chan error
	for q := range p {
		if q == r {
			continue
		}
		if o.eager(q, len(mine)) {
			if err := o.send(q, step, mine); err != nil {
				return err
			}
			continue
		}
		if errc == nil {
			errc = make(chan error, p)
		}
		go func() { errc <- o.send(q, step, mine) }()
	}
	var first error
	for q := range p {
		if q != r && first == nil {
			first = o.recv(q, step, all[m*q:m*(q+1)])
		}
	}
	if errc != nil {
		for q := range p {
			if q != r && !o.eager(q, len(mine)) {
				if err := <-errc; first == nil {
					first = err
				}
			}
		}
	}
	return first
}

var _ comm.Allocator = (*Comm)(nil)

// Alloc returns n > 0 zeroed elements of dt for collectives on c (see
// comm.Allocator) in the transport's shared memory, if it is a
// SharedMemory that every rank of c shares (collectives whose buffers all
// come from there are zero-copy); else it fails with an error wrapping
// comm.ErrUnsupported (comm.Alloc then gives ordinary memory). The memory
// stays valid after Close; free is idempotent.
func (c *Comm) Alloc(dt comm.DType, n int) (comm.Buffer, func(), error) {
	if !dt.Valid() {
		return comm.Buffer{}, nil, comm.InvalidArgf("alloc: unsupported dtype %v", dt)
	}
	if n <= 0 {
		return comm.Buffer{}, nil, comm.InvalidArgf("alloc: length %d", n)
	}
	sm, ok := c.t.(SharedMemory)
	for _, w := range c.members {
		ok = ok && sm.Shares(w)
	}
	if !ok || c.Size() < 2 {
		return comm.Buffer{}, nil, fmt.Errorf("alloc: rank %d: this comm's ranks share no memory: %w", c.rank, comm.ErrUnsupported)
	}
	mem, free, err := sm.Alloc(n * dt.Size())
	if err != nil {
		return comm.Buffer{}, nil, err
	}
	b, err := comm.FromBytes(dt, mem)
	if err != nil {
		free()
		return comm.Buffer{}, nil, err
	}
	return b, free, nil
}
