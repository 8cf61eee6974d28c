package algo

// Scatter down a binomial tree: each rank receives its subtree's blocks in
// one message and passes on its children's (cost: see treeGatherCost in
// gather_tree.go).

func (o *op) scatterTree(x call) error {
	p, r := o.c.Size(), o.c.rank
	dst, src, root := x.dst, x.src, x.root
	n := len(dst)
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
