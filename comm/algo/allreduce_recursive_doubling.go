package algo

import "github.com/gdist/gdist/internal/reduce"

// All-reduce by recursive doubling: lg q rounds in which every rank
// exchanges the whole message with a partner and reduces, q the largest
// power of two <= p; the extra ranks fold in before and out after.
// Latency-optimal: the choice for small messages.
//
//	cost: (lg q + 2f) (a + n b) + (lg q + f) n g

func allReduceRDCost(t Tuning, n, p int) int64 {
	nn := int64(n)
	_, lgq, f := pof2(p)
	return (lgq+2*f)*(t.Alpha+nn*t.Beta) + (lgq+f)*nn*t.Gamma
}

// allReduceRD is recursive doubling. With p not a power of two, the first
// 2*rem ranks pair up: even ones hand their data to their odd neighbour
// before the exchange rounds and get the result back after.
func (o *op) allReduceRD(x call) error {
	buf := x.buf
	c := o.c
	p, r := c.Size(), c.rank
	pof2 := 1
	for pof2*2 <= p {
		pof2 *= 2
	}
	rem := p - pof2
	tmp := getScratch(len(buf))
	const foldIn, foldOut = 0, 1 << 20
	newRank := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			if err := o.send(r+1, foldIn, buf); err != nil {
				return err
			}
			newRank = -1
		} else {
			if err := o.recv(r-1, foldIn, tmp); err != nil {
				return err
			}
			reduce.Into(o.dt, o.red, buf, tmp)
			newRank = r / 2
		}
	}
	if newRank >= 0 {
		round := uint32(1)
		for mask := 1; mask < pof2; mask <<= 1 {
			np := newRank ^ mask
			peer := np + rem
			if np < rem {
				peer = np*2 + 1
			}
			if err := o.sendRecvReduce(peer, buf, tmp, round); err != nil {
				return err
			}
			round++
		}
		o.finishAvg(buf)
	}
	var err error
	if r < 2*rem {
		if r%2 == 1 {
			err = o.send(r-1, foldOut, buf)
		} else {
			err = o.recv(r+1, foldOut, buf)
		}
	}
	if err == nil {
		putScratch(tmp)
	}
	return err
}
