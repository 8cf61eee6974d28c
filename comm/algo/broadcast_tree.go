package algo

// Broadcast down a binomial tree: lg p steps of the whole message. The
// choice for small messages.
//
//	cost: lg p (a + n b)

func broadcastTreeCost(t Tuning, n, p int) int64 {
	return lg(p) * (t.Alpha + int64(n)*t.Beta)
}

func (o *op) broadcastTree(x call) error {
	buf, root := x.buf, x.root
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
