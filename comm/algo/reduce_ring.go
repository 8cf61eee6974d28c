package algo

// Reduce by a ring reduce-scatter (reducescatter_ring.go) followed by a
// direct gather of the reduced blocks at the root. For large messages.
//
//	cost: reduce-scatter ring + (p-1) a + n(p-1)/p b

func reduceRingCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	return reduceScatterRingCost(t, n, p) + (pp-1)*t.Alpha + (nn*(pp-1)/pp)*t.Beta
}

// gatherStep is the step of the messages that bring the reduced blocks to
// the root.
const gatherStep = 1 << 31

func (o *op) reduceRing(x call) error {
	p, r := o.c.Size(), o.c.rank
	buf, work, root := x.buf, x.work, x.root
	seg := bounds(len(buf)/o.dt.Size(), p, o.dt.Size())
	if err := o.ring(buf, work, seg, -1, true, false, o.finishAvg); err != nil {
		return err
	}
	if r != root {
		return o.send(root, gatherStep, work[seg[r]:seg[r+1]])
	}
	return fanout(p, root, func(i int) error { return o.recv(i, gatherStep, work[seg[i]:seg[i+1]]) })
}
