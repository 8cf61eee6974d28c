package algo

// All-reduce by the chunked, pipelined ring (pipeline.go): a reduce-scatter
// then an all-gather around the ring, 2(p-1) steps, bandwidth-optimal, the
// copy and reduction of one chunk overlapping the transfer of the next.
// The choice for large messages.
//
//	cost: 2(p-1) a + 2n(p-1)/p b + n(p-1)/p g

func allReduceRingCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	return 2*(pp-1)*t.Alpha + (2*nn*(pp-1)/pp)*t.Beta + (nn*(pp-1)/pp)*t.Gamma
}

func (o *op) allReduceRing(x call) error {
	return o.ring(x.buf, x.buf, bounds(len(x.buf)/o.dt.Size(), o.c.Size(), o.dt.Size()), 0, true, true, o.finishAvg)
}
