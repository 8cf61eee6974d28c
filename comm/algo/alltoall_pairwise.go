package algo

// All-to-all by pairwise exchange: p-1 rounds; in round s rank r sends to
// r+s and receives from r-s.
//
//	cost: (p-1) (a + n/p b)

func pairwiseCost(t Tuning, n, p int) int64 {
	nn, pp := int64(n), int64(p)
	return (pp - 1) * (t.Alpha + nn/pp*t.Beta)
}

func (o *op) allToAllPairwise(x call) error {
	p, r := o.c.Size(), o.c.rank
	dst, src := x.dst, x.src
	n := len(src) / p
	copy(dst[r*n:(r+1)*n], src[r*n:(r+1)*n])
	for s := 1; s < p; s++ {
		to, from := (r+s)%p, mod(r-s, p)
		if err := o.sendrecv(to, src[to*n:(to+1)*n], from, dst[from*n:(from+1)*n], uint32(s)); err != nil {
			return err
		}
	}
	return nil
}
