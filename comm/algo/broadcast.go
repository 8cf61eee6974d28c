package algo

// broadcast uses a binomial tree for small messages (lg p steps) and a
// chunked, pipelined chain for large ones (each link carries the message
// once; p-1+chunks steps).
func (o *op) broadcast(buf []byte, root int) error {
	if o.c.Size() == 1 {
		return nil
	}
	o.hdr.Algo = o.tun.broadcastAlgo(len(buf), o.c.Size())
	if o.hdr.Algo == AlgoTree {
		return o.broadcastTree(buf, root)
	}
	return o.broadcastChain(buf, root)
}

func (o *op) broadcastTree(buf []byte, root int) error {
	p := o.c.Size()
	vr := mod(o.c.rank-root, p)
	real := func(v int) int { return (v + root) % p }
	mask := 1
	for mask < p {
		if vr&mask != 0 {
			if err := o.recv(real(vr-mask), 0, buf); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	var kids []int
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			kids = append(kids, real(vr+mask))
		}
	}
	return fanout(len(kids), -1, func(i int) error { return o.send(kids[i], 0, buf) })
}

func (o *op) broadcastChain(buf []byte, root int) error {
	p := o.c.Size()
	es := o.dt.Size()
	vr := mod(o.c.rank-root, p)
	chunk := max(o.tun.ChunkBytes/es*es, es)
	nch := max(1, (len(buf)+chunk-1)/chunk)
	b := bounds(len(buf)/es, nch, es)
	next, prev := (o.c.rank+1)%p, mod(o.c.rank-1, p)
	nsend, nrecv, lag := nch, nch, 0
	if vr == p-1 {
		nsend = 0
	}
	if vr == 0 {
		nrecv, lag = 0, -1
	}
	return o.pipeline(nsend, nrecv, lag,
		func(o *op, k int) error { return o.send(next, uint32(k), buf[b[k]:b[k+1]]) },
		func(o *op, k int) error { return o.recv(prev, uint32(k), buf[b[k]:b[k+1]]) })
}
