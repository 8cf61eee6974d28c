package algo

import "github.com/gdist/gdist/comm"

// allReduce picks recursive doubling for small messages (2 lg p latency
// steps) and the pipelined ring for large ones (bandwidth-optimal).
func (o *op) allReduce(buf []byte) error {
	p := o.c.Size()
	o.hdr.Algo = o.tun.allReduceAlgo(len(buf), p)
	var err error
	if o.hdr.Algo == AlgoRD {
		err = o.allReduceRD(buf)
	} else {
		err = o.ring(buf, bounds(len(buf)/o.dt.Size(), p, o.dt.Size()), 0, true, true, o.finishAvg)
	}
	return err
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
	tmp := make([]byte, len(buf))
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
			if err := o.sendrecv(peer, buf, peer, tmp, round); err != nil {
				return err
			}
			Reduce(o.dt, o.red, buf, tmp)
			round++
		}
		o.finishAvg(buf)
	}
	if r < 2*rem {
		if r%2 == 1 {
			return o.send(r-1, foldOut, buf)
		}
		return o.recv(r+1, foldOut, buf)
	}
	return nil
}
