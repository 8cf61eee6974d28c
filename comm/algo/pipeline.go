package algo

import (
	"context"
	"fmt"
	"sync"
)

// bounds splits n elements of esize bytes into parts nearly equal parts and
// returns the parts+1 byte offsets of their boundaries.
func bounds(n, parts, esize int) []int {
	b := make([]int, parts+1)
	for i := range b {
		b[i] = int(int64(i)*int64(n)/int64(parts)) * esize
	}
	return b
}

func mod(a, p int) int { return ((a % p) + p) % p }

// pipeline runs a sender and a receiver side by side. The receiver handles
// items 0..nrecv-1 in order and emits a token after each; the sender handles
// items 0..nsend-1 in order, and item i >= lag first takes one token (so it
// waits until the receiver finished item i-lag). lag < 0: the sender never
// waits. The first error cancels the other side and is returned.
func (o *op) pipeline(nsend, nrecv, lag int, send, recv func(o *op, i int) error) error {
	ctx, cancel := context.WithCancel(o.ctx)
	defer cancel()
	po := *o
	po.ctx = ctx
	var once sync.Once
	var first error
	setErr := func(err error) {
		once.Do(func() { first = err; cancel() })
	}
	tokens := make(chan struct{}, nrecv+1)
	// cut: the sender stopped waiting for a token because ctx ended. The
	// receiver, blocked on a peer, then fails too and names that peer, so
	// cut counts only if nothing else failed.
	var cut error
	var wg sync.WaitGroup
	if nsend > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < nsend; i++ {
				if lag >= 0 && i >= lag {
					select {
					case <-tokens:
					case <-ctx.Done():
						cut = po.explain(ctx.Err(), -1, true)
						return
					}
				}
				if err := send(&po, i); err != nil {
					setErr(err)
					return
				}
			}
		}()
	}
	for i := 0; i < nrecv; i++ {
		if err := recv(&po, i); err != nil {
			setErr(err)
			break
		}
		tokens <- struct{}{}
	}
	wg.Wait()
	if first == nil {
		first = cut
	}
	return first
}

// serial runs pipeline's sender and receiver on the calling goroutine:
// before receive i it sends what it may (items below i+window, and item s
// >= lag only once receive s-lag is done), so the sender is at most window
// items ahead. Every send must be eager (EagerSender: it returns without
// waiting for its receive), which serialChunk's chunks are. A rank with
// one core (pinned, GOMAXPROCS 1) then needs no second thread: with a
// sender goroutine, the receiver and the sender took turns on the one
// processor, each polling for the other's peer (the ordinary-buffer
// all-reduce fell to a quarter of Open MPI's, issue 30).
func (o *op) serial(nsend, nrecv, lag, window int, send, recv func(o *op, i int) error) error {
	s := 0
	for i := 0; i < nrecv; i++ {
		for s < nsend && s < i+window && (lag < 0 || s < lag || s-lag < i) {
			if err := send(o, s); err != nil {
				return err
			}
			s++
		}
		if err := recv(o, i); err != nil {
			return err
		}
	}
	for ; s < nsend; s++ {
		if err := send(o, s); err != nil {
			return err
		}
	}
	return nil
}

// serialWindow is how many chunks serial sends ahead of its receives: two
// frames, half of shm's default ring, so the ring never fills (a full
// ring would be drained into queues, a copy more).
const serialWindow = 2

// serialChunk is the chunk for serial, or 0 where the op keeps a sender
// goroutine: Tuning.Serial, a transport whose ranks share the memory
// (SharedMemory: shm, auto on one host) and whose sends to every peer of
// c are eager (EagerSender), up to at least 16 KiB. The eager size is the
// same on every rank (shm's frame, from its segment), so every rank
// chunks alike.
func (o *op) serialChunk() int {
	if !o.tun.Serial {
		return 0
	}
	es, ok := o.c.t.(EagerSender)
	if _, shared := o.c.t.(SharedMemory); !ok || !shared {
		return 0
	}
	e := -1
	for q, w := range o.c.members {
		if q != o.c.rank {
			if b := es.EagerBytes(w); e < 0 || b < e {
				e = b
			}
		}
	}
	if e < 16<<10 {
		return 0
	}
	n := o.dt.Size()
	return min(o.chunk(), e/n*n)
}

// chunk is the pipelining unit in bytes: ChunkBytes rounded down to whole
// elements.
func (o *op) chunk() int {
	es := o.dt.Size()
	return max(o.tun.ChunkBytes/es*es, es)
}

// ring runs the chunked, pipelined ring over the p segments delimited by
// the byte offsets seg (len p+1). in holds this rank's input and out gets
// the results; they are the same memory for in-place ops, and in is never
// written.
//
// With rs, p-1 reduce-scatter steps: at step t rank r sends segment r+a-t
// and receives segment r+a-t-1, setting out = in op received (one fused
// pass, ReduceTo); it ends owning segment r+a+1 of out fully reduced, and
// calls finish on each of its chunks. The first step sends from in, later
// ones from out (the segment the previous step reduced). With ag, p-1
// all-gather steps follow (or run alone, on out): at step s rank r sends
// segment r+a+1-s and receives segment r+a-s into out. Each step's send is
// the previous step's receive, so chunk k of step u can leave as soon as
// chunk k of step u-1 has arrived: the steps overlap.
func (o *op) ring(in, out []byte, seg []int, a int, rs, ag bool, finish func([]byte)) error {
	c := o.c
	p, r := c.Size(), c.rank
	es := o.dt.Size()
	owned := mod(r+a+1, p)
	nrs, nag := 0, 0
	if rs {
		nrs = p - 1
	}
	if ag {
		nag = p - 1
	}
	if nrs+nag == 0 {
		if rs {
			if !sameMem(in, out) {
				copy(out[seg[owned]:seg[owned+1]], in[seg[owned]:seg[owned+1]])
			}
			if finish != nil {
				finish(out[seg[owned]:seg[owned+1]])
			}
		}
		return nil
	}
	maxSeg := 0
	for i := 0; i < p; i++ {
		maxSeg = max(maxSeg, seg[i+1]-seg[i])
	}
	chunk := o.chunk()
	sc := o.serialChunk()
	if sc > 0 {
		chunk = sc
	}
	nch := max(1, (maxSeg+chunk-1)/chunk)
	// chunk k of segment j of buf
	part := func(buf []byte, j, k int) []byte {
		lo, hi := seg[j], seg[j+1]
		n := (hi - lo) / es
		return buf[lo+int(int64(k)*int64(n)/int64(nch))*es : lo+int(int64(k+1)*int64(n)/int64(nch))*es]
	}
	segOf := func(u int, sending bool) int {
		if u < nrs {
			if sending {
				return mod(r+a-u, p)
			}
			return mod(r+a-u-1, p)
		}
		s := u - nrs
		if sending {
			return mod(r+a+1-s, p)
		}
		return mod(r+a-s, p)
	}
	next, prev := mod(r+1, p), mod(r-1, p)
	var tmp []byte
	if nrs > 0 && o.staged() {
		tmp = getScratch((maxSeg/es + nch - 1) / nch * es)
	}
	total := (nrs + nag) * nch
	send := func(o *op, i int) error {
		u, k := i/nch, i%nch
		src := out
		if u == 0 && nrs > 0 {
			src = in
		}
		return o.send(next, uint32(i), part(src, segOf(u, true), k))
	}
	recv := func(o *op, i int) error {
		u, k := i/nch, i%nch
		j := segOf(u, false)
		dst := part(out, j, k)
		if u >= nrs {
			return o.recv(prev, uint32(i), dst)
		}
		if err := o.recvReduce(prev, uint32(i), dst, part(in, j, k), tmp); err != nil {
			return err
		}
		if u == nrs-1 && finish != nil {
			finish(dst)
		}
		return nil
	}
	var err error
	if sc > 0 {
		err = o.serial(total, total, nch, serialWindow, send, recv)
	} else {
		err = o.pipeline(total, total, nch, send, recv)
	}
	if err == nil {
		putScratch(tmp)
	}
	return err
}

// xfer is one round of a pairwise exchange, chunked and pipelined: it
// sends sb to rank to (none if to < 0) while it receives len(rb) bytes from
// rank from (none if from < 0). Without acc the chunks land in rb; with acc
// (as long as rb) each chunk is reduced as it arrives, rb = acc op
// received, so the reduction of chunk k overlaps the transfer of chunk
// k+1. Steps are round<<24 | chunk.
func (o *op) xfer(round uint32, to int, sb []byte, from int, rb, acc []byte) error {
	es := o.dt.Size()
	chunk := o.chunk()
	sc := o.serialChunk()
	if sc > 0 {
		chunk = sc
	}
	nchunks := func(n int) int { return max(1, (n+chunk-1)/chunk) }
	ns, nr := 0, 0
	var sbnd, rbnd []int
	if to >= 0 {
		ns = nchunks(len(sb))
		sbnd = bounds(len(sb)/es, ns, es)
	}
	if from >= 0 {
		nr = nchunks(len(rb))
		rbnd = bounds(len(rb)/es, nr, es)
	}
	if max(ns, nr) >= 1<<24 {
		return fmt.Errorf("algo: %d chunks in one message; raise GDIST_CHUNK_BYTES", max(ns, nr))
	}
	var tmp []byte
	if acc != nil && nr > 0 && o.staged() {
		tmp = getScratch(min(len(rb), (len(rb)/es+nr-1)/nr*es))
	}
	step := func(k int) uint32 { return round<<24 | uint32(k) }
	send := func(o *op, k int) error { return o.send(to, step(k), sb[sbnd[k]:sbnd[k+1]]) }
	recv := func(o *op, k int) error {
		lo, hi := rbnd[k], rbnd[k+1]
		if acc == nil {
			return o.recv(from, step(k), rb[lo:hi])
		}
		return o.recvReduce(from, step(k), rb[lo:hi], acc[lo:hi], tmp)
	}
	var err error
	if sc > 0 {
		err = o.serial(ns, nr, -1, serialWindow, send, recv)
	} else {
		err = o.pipeline(ns, nr, -1, send, recv)
	}
	if err == nil {
		putScratch(tmp)
	}
	return err
}

// fanout runs fn(i) for every i in [0, n) except skip, concurrently, and
// returns the first error.
func fanout(n, skip int, fn func(i int) error) error {
	switch {
	case n == 0 || n == 1 && skip == 0:
		return nil
	case n == 1:
		return fn(0) // one task: no goroutine
	case n == 2 && skip >= 0 && skip < 2:
		return fn(1 - skip)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		if i == skip {
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = fn(i)
		}(i)
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
