package algo

// All-gather by the pipelined ring (pipeline.go): p-1 steps, each rank
// forwarding the block it received in the previous step.
//
//	cost: (p-1) a + n(p-1)/p b

func allGatherRingCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	return (pp-1)*t.Alpha + (nn*(pp-1)/pp)*t.Beta
}

func (o *op) allGatherRing(x call) error {
	return o.ring(x.dst, x.dst, x.seg, -1, false, true, nil)
}
