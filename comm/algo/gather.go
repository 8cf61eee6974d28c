package algo

// allGather is a pipelined ring: p-1 steps, each rank forwarding the block
// it received in the previous step.
func (o *op) allGather(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src)
	if !sameMem(dst[r*n:(r+1)*n], src) {
		copy(dst[r*n:(r+1)*n], src)
	}
	o.hdr.Algo = AlgoRing
	return o.ring(dst, bounds(p*n/o.dt.Size(), p, o.dt.Size()), -1, false, true, nil)
}

// gather: every rank sends its block straight to the root, which receives
// them all at once.
func (o *op) gather(dst, src []byte, root int) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src)
	o.hdr.Algo = AlgoDirect
	if r != root {
		return o.send(root, 0, src)
	}
	if !sameMem(dst[r*n:(r+1)*n], src) {
		copy(dst[r*n:(r+1)*n], src)
	}
	return fanout(p, root, func(i int) error { return o.recv(i, 0, dst[i*n:(i+1)*n]) })
}

// scatter: the root sends every block straight to its rank.
func (o *op) scatter(dst, src []byte, root int) error {
	p, r := o.c.Size(), o.c.rank
	n := len(dst)
	o.hdr.Algo = AlgoDirect
	if r != root {
		return o.recv(root, 0, dst)
	}
	if !sameMem(src[r*n:(r+1)*n], dst) {
		copy(dst, src[r*n:(r+1)*n])
	}
	return fanout(p, root, func(i int) error { return o.send(i, 0, src[i*n:(i+1)*n]) })
}

// reduceScatter runs the ring's reduce-scatter half on a copy of src (src is
// never modified) and copies this rank's reduced block into dst.
func (o *op) reduceScatter(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(dst)
	work := append([]byte(nil), src...)
	o.hdr.Algo = AlgoRing
	if err := o.ring(work, bounds(p*n/o.dt.Size(), p, o.dt.Size()), -1, true, false, o.finishAvg); err != nil {
		return err
	}
	copy(dst, work[r*n:(r+1)*n])
	return nil
}

// allToAll: p-1 rounds; in round s rank r sends to r+s and receives from r-s.
func (o *op) allToAll(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src) / p
	o.hdr.Algo = AlgoPairwise
	copy(dst[r*n:(r+1)*n], src[r*n:(r+1)*n])
	for s := 1; s < p; s++ {
		to, from := (r+s)%p, mod(r-s, p)
		if err := o.sendrecv(to, src[to*n:(to+1)*n], from, dst[from*n:(from+1)*n], uint32(s)); err != nil {
			return err
		}
	}
	return nil
}

// barrier is the dissemination barrier: ceil(lg p) rounds; in round k rank r
// signals r+2^k and waits for r-2^k.
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
