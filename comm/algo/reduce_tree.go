package algo

// Reduce up a binomial tree: lg p steps of the whole message, each rank
// reducing its children's partial results. The choice for small messages.
//
//	cost: lg p (a + n b + n g)

func reduceTreeCost(t Tuning, n, p int) int64 {
	nn := int64(n)
	return lg(p) * (t.Alpha + nn*t.Beta + nn*t.Gamma)
}

// reduceTree is the binomial tree: every rank reduces its children's
// partial results (the first one from buf into work, the later ones in
// work) and sends the result to its parent.
func (o *op) reduceTree(x call) error {
	buf, work, root := x.buf, x.work, x.root
	p := o.c.Size()
	vr := mod(o.c.rank-root, p)
	real := func(v int) int { return (v + root) % p }
	var tmp []byte
	acc := buf // holds this rank's partial result
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			err := o.send(real(vr-mask), 0, acc)
			if err == nil {
				putScratch(tmp)
			}
			return err
		}
		if vr+mask < p {
			if tmp == nil && o.staged() {
				tmp = getScratch(len(buf))
			}
			if err := o.recvReduce(real(vr+mask), 0, work, acc, tmp); err != nil {
				return err
			}
			acc = work
		}
	}
	o.finishAvg(acc) // only the root gets here; acc is buf
	putScratch(tmp)
	return nil
}
