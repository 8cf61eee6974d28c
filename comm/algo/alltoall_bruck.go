package algo

// All-to-all by Bruck's algorithm: ceil(lg p) rounds, each moving about
// half of the blocks, packed into one message. For small blocks.
//
//	cost: lg p (a + 2n b)   (half the blocks sent, and packed and unpacked, per round)

func bruckCost(t Tuning, n, p int) int64 {
	return lg(p) * (t.Alpha + 2*int64(n)*t.Beta)
}

// allToAllBruck: rotate the blocks so that the one for rank r+i sits at
// index i; in round k send every block whose index has bit k set to rank
// r+2^k (it moves 2^k closer to its destination) and take the matching
// ones from r-2^k; at the end index i holds the block from rank r-i.
func (o *op) allToAllBruck(x call) error {
	dst, src := x.dst, x.src
	p, r := o.c.Size(), o.c.rank
	n := len(src) / p
	t := getScratch(p * n)
	copy(t, src[r*n:])
	copy(t[(p-r)*n:], src[:r*n])
	half := (p + 1) / 2
	sb, rb := getScratch(half*n), getScratch(half*n)
	round := uint32(0)
	for d := 1; d < p; d <<= 1 {
		k := 0
		for i := 0; i < p; i++ {
			if i&d != 0 {
				copy(sb[k*n:], t[i*n:(i+1)*n])
				k++
			}
		}
		if err := o.sendrecv((r+d)%p, sb[:k*n], mod(r-d, p), rb[:k*n], round); err != nil {
			return err
		}
		k = 0
		for i := 0; i < p; i++ {
			if i&d != 0 {
				copy(t[i*n:(i+1)*n], rb[k*n:])
				k++
			}
		}
		round++
	}
	for i := 0; i < p; i++ {
		j := mod(r-i, p)
		copy(dst[j*n:(j+1)*n], t[i*n:(i+1)*n])
	}
	putScratch(t)
	putScratch(sb)
	putScratch(rb)
	return nil
}
