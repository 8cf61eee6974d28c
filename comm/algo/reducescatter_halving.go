package algo

// Reduce-scatter by recursive halving (halving.go): lg q rounds, each
// exchanging half of what is left; the extra ranks fold in and out.
//
//	cost: (lg q + 2f) a + (n(q-1)/q + fn + fn/p) b + (n(q-1)/q + fn) g

func reduceScatterHDCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	q, lgq, f := pof2(p)
	return (lgq+2*f)*t.Alpha + (nn*(q-1)/q+f*nn+f*nn/pp)*t.Beta + (nn*(q-1)/q+f*nn)*t.Gamma
}

func (o *op) reduceScatterHD(x call) error {
	dst, src, work, seg := x.dst, x.src, x.work, x.seg
	p, r := o.c.Size(), o.c.rank
	n := len(dst)
	h := newHD(p, r)
	in, err := o.foldIn(h, src, work)
	if err != nil {
		return err
	}
	f, partner := h.folded()
	if !in {
		return o.xfer(roundFoldOut, -1, nil, partner, dst, nil)
	}
	first := src
	if f {
		first = work // holds both ranks' contributions now
	}
	a, b, err := o.halving(h, first, work, seg)
	if err != nil {
		return err
	}
	o.finishAvg(work[a:b])
	copy(dst, work[r*n:(r+1)*n])
	if f {
		return o.xfer(roundFoldOut, partner, work[partner*n:(partner+1)*n], -1, nil, nil)
	}
	return nil
}
