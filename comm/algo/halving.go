package algo

// Recursive halving and doubling over blocks, for any group size.
//
// With p not a power of two, the first 2*rem ranks (rem = p - pof2) fold
// in pairs: the even rank of a pair hands its whole input to the odd one
// and sits out the exchange rounds; the pof2 remaining ranks take virtual
// ranks 0..pof2-1, virtual rank v standing for original ranks [first(v),
// first(v+1)) (two ranks for v < rem, one otherwise). Block j of the data
// belongs to original rank j, so a virtual rank's blocks are contiguous and
// every range of virtual ranks maps to one byte range.
//
// Halving (reduce-scatter): in the round with distance m (pof2/2 down to 1)
// virtual rank v keeps the half of its current window on its side of the
// split, sends the other half to v^m and reduces the half v^m sends it.
// After lg pof2 rounds v owns its own blocks, fully reduced.
//
// Doubling (all-gather): in the round with distance m (1 up to pof2/2) v
// sends its window to v^m and receives v^m's, doubling the window.
//
// Every element is reduced at exactly one rank, so all ranks end with the
// same bits.

type hdPlan struct {
	p, pof2, rem int
	r            int // this rank
	v            int // virtual rank, or -1 for the even rank of a folded pair
}

func newHD(p, r int) hdPlan {
	pof2 := 1
	for pof2*2 <= p {
		pof2 *= 2
	}
	h := hdPlan{p: p, pof2: pof2, rem: p - pof2, r: r}
	switch {
	case r < 2*h.rem && r%2 == 0:
		h.v = -1
	case r < 2*h.rem:
		h.v = r / 2
	default:
		h.v = r - h.rem
	}
	return h
}

// folded reports whether this rank is in a folded pair, and its partner.
func (h hdPlan) folded() (bool, int) {
	if h.r >= 2*h.rem {
		return false, -1
	}
	return true, h.r ^ 1
}

// first is the first original rank of virtual rank v (v == pof2: p).
func (h hdPlan) first(v int) int {
	if v < h.rem {
		return 2 * v
	}
	return v + h.rem
}

// real is the rank that plays virtual rank v.
func (h hdPlan) real(v int) int {
	if v < h.rem {
		return 2*v + 1
	}
	return v + h.rem
}

// span is the byte range of virtual ranks [lo, hi) given the blocks' byte
// offsets seg (len p+1).
func (h hdPlan) span(seg []int, lo, hi int) (int, int) {
	return seg[h.first(lo)], seg[h.first(hi)]
}

const (
	roundFoldIn  = 0
	roundFoldOut = 255
)

// foldIn runs the fold-in of a reduction: the even rank of a pair sends in
// to the odd one, which sets out = in op received. It returns false on the
// even rank (which sits out).
func (o *op) foldIn(h hdPlan, in, out []byte) (bool, error) {
	f, partner := h.folded()
	if !f {
		return true, nil
	}
	if h.v < 0 {
		return false, o.xfer(roundFoldIn, partner, in, -1, nil, nil)
	}
	return true, o.xfer(roundFoldIn, -1, nil, partner, out, in)
}

// halving runs the reduce-scatter rounds on a participating rank (v >= 0):
// in is the input (read only; the first round sends from it), out the work
// area (same size; may be in). It returns this rank's byte range of out,
// fully reduced. Rounds are numbered from 1.
func (o *op) halving(h hdPlan, in, out []byte, seg []int) (int, int, error) {
	v := h.v
	lo, hi := 0, h.pof2
	src := in
	round := uint32(1)
	for m := h.pof2 / 2; m >= 1; m /= 2 {
		mid := lo + m
		klo, khi, slo, shi := lo, mid, mid, hi
		if v >= mid {
			klo, khi, slo, shi = mid, hi, lo, mid
		}
		sa, sb := h.span(seg, slo, shi)
		ka, kb := h.span(seg, klo, khi)
		peer := h.real(v ^ m)
		if err := o.xfer(round, peer, src[sa:sb], peer, out[ka:kb], src[ka:kb]); err != nil {
			return 0, 0, err
		}
		src = out
		lo, hi = klo, khi
		round++
	}
	a, b := h.span(seg, v, v+1)
	return a, b, nil
}

// doubling runs the all-gather rounds on a participating rank: buf holds
// this rank's blocks (its virtual rank's span); at the end it holds all.
// Rounds are numbered from first.
func (o *op) doubling(h hdPlan, buf []byte, seg []int, first uint32) error {
	v := h.v
	lo, hi := v, v+1
	round := first
	for m := 1; m < h.pof2; m *= 2 {
		plo := lo ^ m
		phi := plo + m
		sa, sb := h.span(seg, lo, hi)
		ra, rb := h.span(seg, plo, phi)
		peer := h.real(v ^ m)
		if err := o.xfer(round, peer, buf[sa:sb], peer, buf[ra:rb], nil); err != nil {
			return err
		}
		lo, hi = min(lo, plo), max(hi, phi)
		round++
	}
	return nil
}
