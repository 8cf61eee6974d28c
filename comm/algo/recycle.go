package algo

// recycler keeps the records of finished operations (their Work, once
// Wait returned) for reuse, so that issuing an operation allocates
// nothing in steady state. It is a FIFO that hands a record out again
// only once more than reuseAfter others were put back after it: a caller
// that wrongly keeps using a Work after its Wait returned gets
// comm.ErrWorkReleased for at least that long, rather than the outcome
// of another operation (see comm.Work). Guarded by its Comm's mu.
type recycler[T any] struct {
	ring    [32]*T
	head, n int
}

// reuseAfter: see recycler.
const reuseAfter = 8

// get returns a record to reuse, or nil.
func (r *recycler[T]) get() *T {
	if r.n <= reuseAfter {
		return nil
	}
	x := r.ring[r.head]
	r.ring[r.head] = nil
	r.head = (r.head + 1) % len(r.ring)
	r.n--
	return x
}

// put keeps x for reuse (or lets the garbage collector have it if the
// ring is full).
func (r *recycler[T]) put(x *T) {
	if r.n == len(r.ring) {
		return
	}
	r.ring[(r.head+r.n)%len(r.ring)] = x
	r.n++
}
