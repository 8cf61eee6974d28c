package algo

// Broadcast along a chunked, pipelined chain (root, root+1, ...): each link
// carries the message once, in p-1+k steps of one chunk. The choice for
// large messages.
//
//	cost: (p-1 + k-1) (a + n/k b), k chunks

func broadcastChainCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	k := max(1, (nn+int64(t.ChunkBytes)-1)/int64(t.ChunkBytes))
	return (pp - 1 + k - 1) * (t.Alpha + nn/k*t.Beta)
}

func (o *op) broadcastChain(x call) error {
	buf, root := x.buf, x.root
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
