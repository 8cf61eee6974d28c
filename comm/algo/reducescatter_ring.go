package algo

// Reduce-scatter by the ring's first half (pipeline.go): p-1 steps, each
// rank reducing the block it receives into the one it passes on.
//
//	cost: (p-1) a + n(p-1)/p (b + g)

func reduceScatterRingCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	return (pp-1)*t.Alpha + (nn*(pp-1)/pp)*(t.Beta+t.Gamma)
}

func (o *op) reduceScatterRing(x call) error {
	r, n := o.c.rank, len(x.dst)
	if err := o.ring(x.src, x.work, x.seg, -1, true, false, o.finishAvg); err != nil {
		return err
	}
	copy(x.dst, x.work[r*n:(r+1)*n])
	return nil
}
