package algo

// reduce uses a binomial tree for small messages and, for large ones, a ring
// reduce-scatter followed by a gather of the reduced segments at the root.
// Buffers of non-root ranks are left unchanged (they work on a copy).
func (o *op) reduce(buf []byte, root int) error {
	p := o.c.Size()
	o.hdr.Algo = o.tun.reduceAlgo(len(buf), p)
	if p == 1 {
		o.finishAvg(buf)
		return nil
	}
	work := buf
	if o.c.rank != root {
		work = append([]byte(nil), buf...)
	}
	if o.hdr.Algo == AlgoTree {
		return o.reduceTree(work, root)
	}
	es := o.dt.Size()
	seg := bounds(len(buf)/es, p, es)
	if err := o.ring(work, seg, -1, true, false, o.finishAvg); err != nil {
		return err
	}
	const gatherStep = 1 << 31
	r := o.c.rank
	if r != root {
		return o.send(root, gatherStep, work[seg[r]:seg[r+1]])
	}
	return fanout(p, root, func(i int) error { return o.recv(i, gatherStep, work[seg[i]:seg[i+1]]) })
}

func (o *op) reduceTree(acc []byte, root int) error {
	p := o.c.Size()
	vr := mod(o.c.rank-root, p)
	real := func(v int) int { return (v + root) % p }
	tmp := make([]byte, len(acc))
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			return o.send(real(vr-mask), 0, acc)
		}
		if vr+mask < p {
			if err := o.recv(real(vr+mask), 0, tmp); err != nil {
				return err
			}
			Reduce(o.dt, o.red, acc, tmp)
		}
	}
	o.finishAvg(acc) // only the root gets here
	return nil
}
