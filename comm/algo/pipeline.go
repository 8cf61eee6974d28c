package algo

import (
	"context"
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
						setErr(po.explain(ctx.Err(), -1, true))
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
	return first
}

// ring runs the chunked, pipelined ring over buf, whose p segments are
// delimited by the byte offsets seg (len p+1).
//
// With rs, p-1 reduce-scatter steps: at step t rank r sends segment r+a-t and
// receives segment r+a-t-1, reducing it into buf; it ends owning segment
// r+a+1 fully reduced, and calls finish on each of its chunks. With ag, p-1
// all-gather steps follow (or run alone): at step s rank r sends segment
// r+a+1-s and receives segment r+a-s into buf. Each step's send is the
// previous step's receive, so chunk k of step u can leave as soon as chunk k
// of step u-1 has arrived: the steps overlap.
func (o *op) ring(buf []byte, seg []int, a int, rs, ag bool, finish func([]byte)) error {
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
		if rs && finish != nil {
			finish(buf[seg[owned]:seg[owned+1]])
		}
		return nil
	}
	maxSeg := 0
	for i := 0; i < p; i++ {
		maxSeg = max(maxSeg, seg[i+1]-seg[i])
	}
	chunk := max(o.tun.ChunkBytes/es*es, es)
	nch := max(1, (maxSeg+chunk-1)/chunk)
	// chunk k of segment j
	part := func(j, k int) []byte {
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
	if nrs > 0 {
		tmp = make([]byte, (maxSeg/es+nch-1)/nch*es)
	}
	total := (nrs + nag) * nch
	send := func(o *op, i int) error {
		u, k := i/nch, i%nch
		return o.send(next, uint32(i), part(segOf(u, true), k))
	}
	recv := func(o *op, i int) error {
		u, k := i/nch, i%nch
		dst := part(segOf(u, false), k)
		if u >= nrs {
			return o.recv(prev, uint32(i), dst)
		}
		t := tmp[:len(dst)]
		if err := o.recv(prev, uint32(i), t); err != nil {
			return err
		}
		Reduce(o.dt, o.red, dst, t)
		if u == nrs-1 && finish != nil {
			finish(dst)
		}
		return nil
	}
	return o.pipeline(total, total, nch, send, recv)
}

// fanout runs fn(i) for every i in [0, n) except skip, concurrently, and
// returns the first error.
func fanout(n, skip int, fn func(i int) error) error {
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
