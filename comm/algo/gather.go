package algo

// allGather: the pipelined ring (p-1 steps, each rank forwarding the block
// it received in the previous step) or recursive doubling (halving.go; lg p
// rounds, folding the extra ranks of a non-power-of-two group in and out).
func (o *op) allGather(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src)
	if !sameMem(dst[r*n:(r+1)*n], src) {
		copy(dst[r*n:(r+1)*n], src)
	}
	o.hdr.Algo = o.tun.allGatherAlgo(p*n, p)
	es := o.dt.Size()
	seg := bounds(p*n/es, p, es)
	if o.hdr.Algo == AlgoRing {
		return o.ring(dst, dst, seg, -1, false, true, nil)
	}
	h := newHD(p, r)
	f, partner := h.folded()
	if f {
		// The even rank of a pair gives its block to the odd one.
		if h.v < 0 {
			if err := o.xfer(roundFoldIn, partner, src, -1, nil, nil); err != nil {
				return err
			}
			return o.xfer(roundFoldOut, -1, nil, partner, dst, nil)
		}
		if err := o.xfer(roundFoldIn, -1, nil, partner, dst[partner*n:(partner+1)*n], nil); err != nil {
			return err
		}
	}
	if err := o.doubling(h, dst, seg, 1); err != nil {
		return err
	}
	if f {
		return o.xfer(roundFoldOut, partner, dst, -1, nil, nil)
	}
	return nil
}

// subtree is the number of ranks in the binomial subtree of virtual rank v
// (rank minus root, mod p): v and the ranks it relays for, which are v+1 ..
// v+subtree-1. Its parent is v minus v's lowest set bit.
func subtree(v, p int) int {
	if v == 0 {
		return p
	}
	return min(v&-v, p-v)
}

// gather: every rank sends its block straight to the root (direct), or up
// a binomial tree, each rank relaying its subtree's blocks in one message
// (tree: lg p rounds at the root instead of p-1).
func (o *op) gather(dst, src []byte, root int) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src)
	o.hdr.Algo = o.tun.gatherAlgo(p*n, p)
	if o.hdr.Algo == AlgoDirect {
		if r != root {
			return o.send(root, 0, src)
		}
		if !sameMem(dst[r*n:(r+1)*n], src) {
			copy(dst[r*n:(r+1)*n], src)
		}
		return fanout(p, root, func(i int) error { return o.recv(i, 0, dst[i*n:(i+1)*n]) })
	}
	v := mod(r-root, p)
	size := subtree(v, p)
	var kids []int // virtual ranks of the children
	for m := 1; m < size; m <<= 1 {
		kids = append(kids, v+m)
	}
	if v == 0 {
		if !sameMem(dst[r*n:(r+1)*n], src) {
			copy(dst[r*n:(r+1)*n], src)
		}
		// A child's blocks are contiguous in dst unless they wrap past
		// rank p-1; those arrive in scratch and are copied in two parts.
		return fanout(len(kids), -1, func(i int) error {
			c := kids[i]
			k := subtree(c, p)
			lo := (root + c) % p
			if lo+k <= p {
				return o.recv((root+c)%p, 0, dst[lo*n:(lo+k)*n])
			}
			t := getScratch(k * n)
			if err := o.recv((root+c)%p, 0, t); err != nil {
				return err
			}
			first := (p - lo) * n
			copy(dst[lo*n:], t[:first])
			copy(dst, t[first:])
			putScratch(t)
			return nil
		})
	}
	parent := (root + v - v&-v) % p
	if len(kids) == 0 {
		return o.send(parent, 0, src)
	}
	t := getScratch(size * n)
	copy(t, src)
	err := fanout(len(kids), -1, func(i int) error {
		c := kids[i]
		return o.recv((root+c)%p, 0, t[(c-v)*n:(c-v+subtree(c, p))*n])
	})
	if err == nil {
		err = o.send(parent, 0, t)
	}
	if err == nil {
		putScratch(t)
	}
	return err
}

// scatter: the root sends every block straight to its rank (direct), or
// down a binomial tree, each rank receiving its subtree's blocks in one
// message and passing on its children's (tree).
func (o *op) scatter(dst, src []byte, root int) error {
	p, r := o.c.Size(), o.c.rank
	n := len(dst)
	o.hdr.Algo = o.tun.scatterAlgo(p*n, p)
	if o.hdr.Algo == AlgoDirect {
		if r != root {
			return o.recv(root, 0, dst)
		}
		if !sameMem(src[r*n:(r+1)*n], dst) {
			copy(dst, src[r*n:(r+1)*n])
		}
		return fanout(p, root, func(i int) error { return o.send(i, 0, src[i*n:(i+1)*n]) })
	}
	v := mod(r-root, p)
	size := subtree(v, p)
	var kids []int
	for m := 1; m < size; m <<= 1 {
		kids = append(kids, v+m)
	}
	if v == 0 {
		err := fanout(len(kids), -1, func(i int) error {
			c := kids[i]
			k := subtree(c, p)
			lo := (root + c) % p
			if lo+k <= p {
				return o.send((root+c)%p, 0, src[lo*n:(lo+k)*n])
			}
			t := getScratch(k * n)
			first := (p - lo) * n
			copy(t, src[lo*n:])
			copy(t[first:], src[:k*n-first])
			err := o.send((root+c)%p, 0, t)
			if err == nil {
				putScratch(t)
			}
			return err
		})
		if err != nil {
			return err
		}
		if !sameMem(src[r*n:(r+1)*n], dst) {
			copy(dst, src[r*n:(r+1)*n])
		}
		return nil
	}
	parent := (root + v - v&-v) % p
	if len(kids) == 0 {
		return o.recv(parent, 0, dst)
	}
	t := getScratch(size * n)
	if err := o.recv(parent, 0, t); err != nil {
		return err
	}
	copy(dst, t[:n])
	err := fanout(len(kids), -1, func(i int) error {
		c := kids[i]
		return o.send((root+c)%p, 0, t[(c-v)*n:(c-v+subtree(c, p))*n])
	})
	if err == nil {
		putScratch(t)
	}
	return err
}

// reduceScatter: the ring's reduce-scatter half, or recursive halving
// (halving.go). src is never modified: the first step reduces from it into
// a scratch work area (ReduceTo), so no copy of src is made.
func (o *op) reduceScatter(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(dst)
	es := o.dt.Size()
	seg := bounds(p*n/es, p, es)
	o.hdr.Algo = o.tun.reduceScatterAlgo(p*n, p)
	if p == 1 {
		if !sameMem(dst, src) {
			copy(dst, src)
		}
		o.finishAvg(dst)
		return nil
	}
	work := getScratch(p * n)
	var err error
	if o.hdr.Algo == AlgoRing {
		err = o.ring(src, work, seg, -1, true, false, o.finishAvg)
		if err == nil {
			copy(dst, work[r*n:(r+1)*n])
		}
	} else {
		err = o.reduceScatterHD(dst, src, work, seg)
	}
	if err == nil {
		putScratch(work)
	}
	return err
}

func (o *op) reduceScatterHD(dst, src, work []byte, seg []int) error {
	p, r := o.c.Size(), o.c.rank
	n := len(dst)
	h := newHD(p, r)
	in, err := o.foldIn(h, src, work)
	if err != nil {
		return err
	}
	f, partner := h.folded()
	if !in {
		return o.xfer(roundFoldOut, -1, nil, partner, dst, nil)
	}
	first := src
	if f {
		first = work // holds both ranks' contributions now
	}
	a, b, err := o.halving(h, first, work, seg)
	if err != nil {
		return err
	}
	o.finishAvg(work[a:b])
	copy(dst, work[r*n:(r+1)*n])
	if f {
		return o.xfer(roundFoldOut, partner, work[partner*n:(partner+1)*n], -1, nil, nil)
	}
	return nil
}

// allToAll: pairwise exchange (p-1 rounds; in round s rank r sends to r+s
// and receives from r-s) or Bruck's algorithm (ceil(lg p) rounds, each
// moving about half of the blocks, packed into one message).
func (o *op) allToAll(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src) / p
	o.hdr.Algo = o.tun.allToAllAlgo(len(src), p)
	if o.hdr.Algo == AlgoBruck {
		return o.allToAllBruck(dst, src)
	}
	copy(dst[r*n:(r+1)*n], src[r*n:(r+1)*n])
	for s := 1; s < p; s++ {
		to, from := (r+s)%p, mod(r-s, p)
		if err := o.sendrecv(to, src[to*n:(to+1)*n], from, dst[from*n:(from+1)*n], uint32(s)); err != nil {
			return err
		}
	}
	return nil
}

// allToAllBruck: rotate the blocks so that the one for rank r+i sits at
// index i; in round k send every block whose index has bit k set to rank
// r+2^k (it moves 2^k closer to its destination) and take the matching
// ones from r-2^k; at the end index i holds the block from rank r-i.
func (o *op) allToAllBruck(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src) / p
	t := getScratch(p * n)
	copy(t, src[r*n:])
	copy(t[(p-r)*n:], src[:r*n])
	half := (p + 1) / 2
	sb, rb := getScratch(half*n), getScratch(half*n)
	round := uint32(0)
	for d := 1; d < p; d <<= 1 {
		k := 0
		for i := 0; i < p; i++ {
			if i&d != 0 {
				copy(sb[k*n:], t[i*n:(i+1)*n])
				k++
			}
		}
		if err := o.sendrecv((r+d)%p, sb[:k*n], mod(r-d, p), rb[:k*n], round); err != nil {
			return err
		}
		k = 0
		for i := 0; i < p; i++ {
			if i&d != 0 {
				copy(t[i*n:(i+1)*n], rb[k*n:])
				k++
			}
		}
		round++
	}
	for i := 0; i < p; i++ {
		j := mod(r-i, p)
		copy(dst[j*n:(j+1)*n], t[i*n:(i+1)*n])
	}
	putScratch(t)
	putScratch(sb)
	putScratch(rb)
	return nil
}

// barrier is the dissemination barrier: ceil(lg p) rounds; in round k rank
// r signals r+2^k and waits for r-2^k. It is the only barrier: lg p
// latency steps with no data is what every other algorithm costs at best
// (a tree barrier takes 2 lg p).
func (o *op) barrier() error {
	p, r := o.c.Size(), o.c.rank
	o.hdr.Algo = AlgoDissem
	round := uint32(0)
	for d := 1; d < p; d <<= 1 {
		if err := o.sendrecv((r+d)%p, nil, mod(r-d, p), nil, round); err != nil {
			return err
		}
		round++
	}
	return nil
}

func sameMem(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}
