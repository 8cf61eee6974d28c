package algo

import (
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/reduce"
)

// The collectives: what every algorithm of one needs done first (the own
// block copied, scratch taken, the trivial group handled), then the
// algorithm the table chooses (algorithms.go).

func (o *op) allReduce(buf []byte) error {
	if sm, ok := o.zeroCopy(len(buf)); ok {
		if ran, err := o.allReduceZeroCopy(sm, buf); ran {
			return err
		}
	}
	if sm, ok := o.stagedPath(len(buf)); ok {
		if ran, err := o.allReduceStaged(sm, buf); ran {
			return err
		}
	}
	return o.run("all_reduce", len(buf), call{buf: buf})
}

// finishAvg divides a reduced block by the group size when the reduction
// is Avg.
func (o *op) finishAvg(b []byte) {
	if o.red == comm.Avg {
		reduce.Divide(o.dt, b, o.c.Size())
	}
}

// reduceScatter: src is never modified: the first step reduces from it
// into a scratch work area (ReduceTo), so no copy of src is made.
func (o *op) reduceScatter(dst, src []byte) error {
	p := o.c.Size()
	n := len(dst)
	if p == 1 {
		o.hdr.Algo = o.tun.choose("reduce_scatter", n, o.c.layout).ID
		if !sameMem(dst, src) {
			copy(dst, src)
		}
		o.finishAvg(dst)
		return nil
	}
	es := o.dt.Size()
	if sm, ok := o.zeroCopy(p * n); ok {
		if ran, err := o.zeroCopyRun(sm, src, dst, bounds(p*n/es, p, es), true, false); ran {
			return err
		}
	}
	work := getScratch(p * n)
	err := o.run("reduce_scatter", p*n, call{dst: dst, src: src, work: work, seg: bounds(p*n/es, p, es)})
	if err == nil {
		putScratch(work)
	}
	return err
}

func (o *op) allGather(dst, src []byte) error {
	p, r := o.c.Size(), o.c.rank
	n := len(src)
	if !sameMem(dst[r*n:(r+1)*n], src) {
		copy(dst[r*n:(r+1)*n], src)
	}
	es := o.dt.Size()
	if sm, ok := o.zeroCopy(p * n); ok {
		if ran, err := o.zeroCopyRun(sm, dst, nil, bounds(p*n/es, p, es), false, true); ran {
			return err
		}
	}
	return o.run("all_gather", p*n, call{dst: dst, src: src, seg: bounds(p*n/es, p, es)})
}

func (o *op) broadcast(buf []byte, root int) error {
	if o.c.Size() == 1 {
		return nil
	}
	return o.run("broadcast", len(buf), call{buf: buf, root: root})
}

// reduce: buffers of non-root ranks are left unchanged: they reduce from
// buf into scratch (ReduceTo), never into buf.
func (o *op) reduce(buf []byte, root int) error {
	p := o.c.Size()
	if p == 1 {
		o.hdr.Algo = o.tun.choose("reduce", len(buf), o.c.layout).ID
		o.finishAvg(buf)
		return nil
	}
	if sm, ok := o.zeroCopy(len(buf)); ok {
		// Zero-copy: the root owns the whole buffer (one block), reads
		// every peer's where it lies and reduces into its own; the
		// others only lend theirs until the root is done.
		seg := make([]int, p+1)
		for q := root + 1; q <= p; q++ {
			seg[q] = len(buf)
		}
		var out []byte
		if o.c.rank == root {
			out = buf
		}
		if ran, err := o.zeroCopyRun(sm, buf, out, seg, true, false); ran {
			return err
		}
	}
	work := buf
	if o.c.rank != root {
		work = getScratch(len(buf))
	}
	err := o.run("reduce", len(buf), call{buf: buf, work: work, root: root})
	if err == nil && o.c.rank != root {
		putScratch(work)
	}
	return err
}

func (o *op) gather(dst, src []byte, root int) error {
	return o.run("gather", o.c.Size()*len(src), call{dst: dst, src: src, root: root})
}

func (o *op) scatter(dst, src []byte, root int) error {
	return o.run("scatter", o.c.Size()*len(dst), call{dst: dst, src: src, root: root})
}

func (o *op) allToAll(dst, src []byte) error {
	return o.run("all_to_all", len(src), call{dst: dst, src: src})
}

func (o *op) barrier() error {
	return o.run("barrier", 0, call{})
}

func sameMem(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}
