package algo

// Reduce by a reduce-scatter by recursive halving (reducescatter_halving.go)
// followed by a direct gather of the reduced blocks at the root.
//
//	cost: reduce-scatter hd + (q-1) a + n(p-1)/p b

func reduceHDCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	q, _, _ := pof2(p)
	return reduceScatterHDCost(t, n, p) + (q-1)*t.Alpha + (nn*(pp-1)/pp)*t.Beta
}

func (o *op) reduceHD(x call) error {
	p, r := o.c.Size(), o.c.rank
	buf, work, root := x.buf, x.work, x.root
	seg := bounds(len(buf)/o.dt.Size(), p, o.dt.Size())
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
