package algo

// The dissemination barrier: ceil(lg p) rounds; in round k rank r signals
// r+2^k and waits for r-2^k. It is the only barrier: lg p latency steps
// with no data is what every other algorithm costs at best (a tree barrier
// takes 2 lg p).
//
//	cost: lg p a

func barrierCost(t Tuning, _, p int) int64 { return lg(p) * t.Alpha }

func (o *op) barrierDissemination(call) error {
	p, r := o.c.Size(), o.c.rank
	round := uint32(0)
	for d := 1; d < p; d <<= 1 {
		if err := o.sendrecv((r+d)%p, nil, mod(r-d, p), nil, round); err != nil {
			return err
		}
		round++
	}
	return nil
}
