package algo

// All-gather by recursive doubling (halving.go): lg q rounds, each doubling
// the blocks a rank holds; in a non-power-of-two group the even rank of a
// pair gives its block to the odd one first and gets the result after.
//
//	cost: (lg q + 2f) a + (n(q-1)/q + fn/p + fn) b

func allGatherRDCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	q, lgq, f := pof2(p)
	return (lgq+2*f)*t.Alpha + (nn*(q-1)/q+f*nn/pp+f*nn)*t.Beta
}

func (o *op) allGatherRD(x call) error {
	p, r := o.c.Size(), o.c.rank
	dst, src, seg := x.dst, x.src, x.seg
	n := len(src)
	h := newHD(p, r)
	f, partner := h.folded()
	if f {
		// The even rank of a pair gives its block to the odd one.
		if h.v < 0 {
			if err := o.xfer(roundFoldIn, partner, src, -1, nil, nil); err != nil {
				return err
			}
			return o.xfer(roundFoldOut, -1, nil, partner, dst, nil)
		}
		if err := o.xfer(roundFoldIn, -1, nil, partner, dst[partner*n:(partner+1)*n], nil); err != nil {
			return err
		}
	}
	if err := o.doubling(h, dst, seg, 1); err != nil {
		return err
	}
	if f {
		return o.xfer(roundFoldOut, partner, dst, -1, nil, nil)
	}
	return nil
}
