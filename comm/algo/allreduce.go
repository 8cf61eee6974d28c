package algo

import "github.com/gdist/gdist/comm"

// allReduce picks, by the cost model (tuning.go), recursive doubling (small
// messages: lg p rounds of the whole message), Rabenseifner's halving and
// doubling (halving.go: 2 lg p rounds, bandwidth-optimal), or the chunked,
// pipelined ring (2(p-1) steps, bandwidth-optimal, copy and reduce of one
// chunk overlapping the transfer of the next).
func (o *op) allReduce(buf []byte) error {
	p := o.c.Size()
	o.hdr.Algo = o.tun.allReduceAlgo(len(buf), p)
	switch o.hdr.Algo {
	case AlgoRD:
		return o.allReduceRD(buf)
	case AlgoHD:
		return o.allReduceHD(buf)
	}
	return o.ring(buf, buf, bounds(len(buf)/o.dt.Size(), p, o.dt.Size()), 0, true, true, o.finishAvg)
}

func (o *op) finishAvg(b []byte) {
	if o.red == comm.Avg {
		Divide(o.dt, b, o.c.Size())
	}
}

// allReduceRD is recursive doubling. With p not a power of two, the first
// 2*rem ranks pair up: even ones hand their data to their odd neighbour
// before the exchange rounds and get the result back after.
func (o *op) allReduceRD(buf []byte) error {
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
			Reduce(o.dt, o.red, buf, tmp)
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
