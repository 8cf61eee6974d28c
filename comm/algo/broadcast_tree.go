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
	var kidsAt [64]int
	kids := kidsAt[:0]
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			kids = append(kids, real(vr+mask))
		}
	}
	if len(kids) <= 1 {
		// One child (or none): send on this goroutine, with no closure
		// for fanout (a closure would put kids and buf on the heap).
		for _, k := range kids {
			return o.send(k, 0, buf)
		}
		return nil
	}
	return o.sendAll(append([]int(nil), kids...), buf)
}

// sendAll sends buf to every rank of to at once.
func (o *op) sendAll(to []int, buf []byte) error {
	return fanout(len(to), -1, func(i int) error { return o.send(to[i], 0, buf) })
}
