package algo

// Scatter directly: the root sends every block to its rank (cost: see
// directCost in gather_direct.go).

func (o *op) scatterDirect(x call) error {
	p, r := o.c.Size(), o.c.rank
	dst, src, root := x.dst, x.src, x.root
	n := len(dst)
	if r != root {
		return o.recv(root, 0, dst)
	}
	if !sameMem(src[r*n:(r+1)*n], dst) {
		copy(dst, src[r*n:(r+1)*n])
	}
	return fanout(p, root, func(i int) error { return o.send(i, 0, src[i*n:(i+1)*n]) })
}
