package algo

// reduce: a binomial tree (small messages), or a reduce-scatter (the ring,
// or recursive halving) followed by a direct gather of the reduced blocks
// at the root. Buffers of non-root ranks are left unchanged: they reduce
// from buf into scratch (ReduceTo), never into buf.
func (o *op) reduce(buf []byte, root int) error {
	p := o.c.Size()
	o.hdr.Algo = o.tun.reduceAlgo(len(buf), p)
	if p == 1 {
		o.finishAvg(buf)
		return nil
	}
	r := o.c.rank
	work := buf
	if r != root {
		work = getScratch(len(buf))
	}
	var err error
	switch o.hdr.Algo {
	case AlgoTree:
		err = o.reduceTree(buf, work, root)
	default:
		err = o.reduceScatterGather(buf, work, root)
	}
	if err == nil && r != root {
		putScratch(work)
	}
	return err
}

// reduceScatterGather reduce-scatters buf into work by the ring or by
// recursive halving, then sends every rank's reduced blocks to the root.
func (o *op) reduceScatterGather(buf, work []byte, root int) error {
	p, r := o.c.Size(), o.c.rank
	es := o.dt.Size()
	seg := bounds(len(buf)/es, p, es)
	const gatherStep = 1 << 31
	if o.hdr.Algo == AlgoRing {
		if err := o.ring(buf, work, seg, -1, true, false, o.finishAvg); err != nil {
			return err
		}
		if r != root {
			return o.send(root, gatherStep, work[seg[r]:seg[r+1]])
		}
		return fanout(p, root, func(i int) error { return o.recv(i, gatherStep, work[seg[i]:seg[i+1]]) })
	}
	h := newHD(p, r)
	in, err := o.foldIn(h, buf, work)
	if err != nil {
		return err
	}
	if in {
		first := buf
		if f, _ := h.folded(); f {
			first = work
		}
		a, b, err := o.halving(h, first, work, seg)
		if err != nil {
			return err
		}
		o.finishAvg(work[a:b])
		if r != root {
			return o.send(root, gatherStep, work[a:b])
		}
	}
	if r != root {
		return nil
	}
	// The root takes each participating rank's span.
	return fanout(h.pof2, h.v, func(v int) error {
		a, b := h.span(seg, v, v+1)
		return o.recv(h.real(v), gatherStep, work[a:b])
	})
}

// reduceTree is the binomial tree: every rank reduces its children's
// partial results (the first one from buf into work, the later ones in
// work) and sends the result to its parent.
func (o *op) reduceTree(buf, work []byte, root int) error {
	p := o.c.Size()
	vr := mod(o.c.rank-root, p)
	real := func(v int) int { return (v + root) % p }
	var tmp []byte
	acc := buf // holds this rank's partial result
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			err := o.send(real(vr-mask), 0, acc)
			if err == nil {
				putScratch(tmp)
			}
			return err
		}
		if vr+mask < p {
			if tmp == nil && o.staged() {
				tmp = getScratch(len(buf))
			}
			if err := o.recvReduce(real(vr+mask), 0, work, acc, tmp); err != nil {
				return err
			}
			acc = work
		}
	}
	o.finishAvg(acc) // only the root gets here; acc is buf
	putScratch(tmp)
	return nil
}
