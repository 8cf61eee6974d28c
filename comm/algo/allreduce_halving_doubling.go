package algo

// All-reduce by Rabenseifner's halving and doubling (halving.go): a
// reduce-scatter by recursive halving, then an all-gather by recursive
// doubling; 2 lg q rounds, bandwidth-optimal. The choice for mid-size
// messages at powers of two.
//
//	cost: 2(lg q + f) a + (2n(q-1)/q + 2fn) b + (n(q-1)/q + fn) g

func allReduceHDCost(t Tuning, n, p int) int64 {
	nn := int64(n)
	q, lgq, f := pof2(p)
	return 2*(lgq+f)*t.Alpha + (2*nn*(q-1)/q+2*f*nn)*t.Beta + (nn*(q-1)/q+f*nn)*t.Gamma
}

// allReduceHD is Rabenseifner's all-reduce: fold in, reduce-scatter by
// recursive halving, all-gather by recursive doubling, fold out.
func (o *op) allReduceHD(x call) error {
	buf := x.buf
	p := o.c.Size()
	h := newHD(p, o.c.rank)
	es := o.dt.Size()
	seg := bounds(len(buf)/es, p, es)
	in, err := o.foldIn(h, buf, buf)
	if err != nil {
		return err
	}
	_, partner := h.folded()
	if !in {
		return o.xfer(roundFoldOut, -1, nil, partner, buf, nil)
	}
	a, b, err := o.halving(h, buf, buf, seg)
	if err != nil {
		return err
	}
	o.finishAvg(buf[a:b])
	if err := o.doubling(h, buf, seg, 128); err != nil {
		return err
	}
	if partner >= 0 {
		return o.xfer(roundFoldOut, partner, buf, -1, nil, nil)
	}
	return nil
}
