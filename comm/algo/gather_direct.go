package algo

// Gather and scatter directly: the root receives every block from (sends
// every block to) its rank, p-1 messages at the root.
//
//	cost: (p-1) a + n(p-1)/p b

func directCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	return (pp-1)*t.Alpha + (nn*(pp-1)/pp)*t.Beta
}

func (o *op) gatherDirect(x call) error {
	p, r := o.c.Size(), o.c.rank
	dst, src, root := x.dst, x.src, x.root
	n := len(src)
	if r != root {
		return o.send(root, 0, src)
	}
	if !sameMem(dst[r*n:(r+1)*n], src) {
		copy(dst[r*n:(r+1)*n], src)
	}
	return fanout(p, root, func(i int) error { return o.recv(i, 0, dst[i*n:(i+1)*n]) })
}
