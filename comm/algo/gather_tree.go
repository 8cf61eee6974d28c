package algo

// Gather up a binomial tree: each rank relays its subtree's blocks in one
// message, lg p rounds at the root instead of p-1.
//
//	cost: lg p a + n lg(p)/2 b   (blocks relayed lg(p)/2 hops on average)

func treeGatherCost(t Tuning, n, p int) int64 {
	return lg(p)*t.Alpha + int64(n)*lg(p)/2*t.Beta
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

func (o *op) gatherTree(x call) error {
	p, r := o.c.Size(), o.c.rank
	dst, src, root := x.dst, x.src, x.root
	n := len(src)
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
