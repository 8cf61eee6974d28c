package gemm

import "fmt"

// hold is a region of fp32 values whose bf16 copy (at the same index)
// serves products until Release: batch matrices stride values apart from
// lo, each rows rows ld values apart, row r's first widths[r] values
// (kept as bands of rows of one width).
type hold struct {
	lo     uintptr
	ld     int
	stride int64
	batch  int
	rows   int
	bands  []band
	buf    uintptr // the copy: value i of the region at buf + 2 i
	end    int64   // values from lo to the region's end
}

// band is rows [r0, r1) of a held region, each its first w values.
type band struct{ r0, r1, w int }

// slot is a held region's buffer, kept (and grown) across Release.
type slot struct {
	buf uintptr
	cap int // bytes
}

// Hold casts once, under bf16 autocast through cuBLAS with the cast
// kernel, a region of fp32 values that several products read (attention's
// queries, keys and values, read by every block of the causal products;
// its score gradients, read by a block row and a block column), and
// serves every operand that lies inside it from that copy until Release,
// casting nothing more. The region is batch matrices stride values apart
// from ptr (batch 1: one), each len(widths) rows ld values apart, of
// which row r holds its first widths[r] values: a dense matrix (widths
// all its columns) or a staircase (a causal product's lower blocks). An
// operand lies inside it when it has the region's ld and stride (or is
// one matrix) and every value it reads is held. The copy is at the same
// index as the fp32 values (2 bytes a value over the region's span, in
// a buffer of the engine's, counted in ScratchBytes and kept for the
// next Hold after Release), so a block of it is read in place. Its
// casts count as Operands in CastStats, one launch a run of rows of one
// width.
//
// The caller promises that nothing writes the held values until Release
// (a product whose output overlaps a held region is refused). Several
// regions may be held at once; Release ends them all. In the other
// precisions, with the tiled kernel or with BF16Cast CastInCUBLAS
// nothing is cast and Hold only checks its arguments. Safe for
// concurrent use; queued on the engine's stream.
func (e *Engine) Hold(ptr uintptr, ld int, stride int64, batch int, widths []int) error {
	if ld < 0 || batch < 1 || stride < 0 || (batch > 1 && stride < int64(len(widths))*int64(ld)) {
		return fmt.Errorf("gemm: Hold of %d matrices %d apart of %d rows %d apart: want batch >= 1 and matrices that do not overlap (stride >= rows ld)", batch, stride, len(widths), ld)
	}
	g := hold{lo: ptr, ld: ld, stride: stride, batch: batch, rows: len(widths)}
	if batch == 1 {
		g.stride = 0
	}
	var last int64
	for r, w := range widths {
		if w < 0 || w > ld {
			return fmt.Errorf("gemm: Hold: row %d's width %d outside 0 to ld %d", r, w, ld)
		}
		if w > 0 {
			last = int64(r)*int64(ld) + int64(w)
		}
		if n := len(g.bands); n > 0 && g.bands[n-1].w == w {
			g.bands[n-1].r1 = r + 1
			continue
		}
		g.bands = append(g.bands, band{r, r + 1, w})
	}
	if last == 0 {
		return nil // nothing held
	}
	g.end = int64(batch-1)*g.stride + last
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.prec != BF16 || e.h == nil || e.castIn {
		return nil
	}
	i := len(e.holds)
	if i == len(e.slots) {
		e.slots = append(e.slots, slot{})
	}
	if err := e.growSlot(&e.slots[i], int(2*g.end)); err != nil {
		return err
	}
	g.buf = e.slots[i].buf
	for _, b := range g.bands {
		if b.w == 0 {
			continue
		}
		x := operand{ptr: ptr + uintptr(4*b.r0*ld), rows: b.r1 - b.r0, cols: b.w, ld: ld, stride: g.stride, batch: batch}
		if err := e.toBF16Strided(g.buf+uintptr(2*b.r0*ld), x, ld, g.stride, &e.stats.Operands); err != nil {
			return err
		}
	}
	e.holds = append(e.holds, g)
	return nil
}

// Release ends every Hold: later products cast their operands again.
// The copies' buffers stay for the next Holds (Close frees them).
func (e *Engine) Release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.holds = e.holds[:0]
}

// heldAt is where the bf16 copy of operand x is, if a held region holds
// every value it reads (0 if none does).
func (e *Engine) heldAt(x operand) uintptr {
	if x.rows == 0 || x.cols == 0 {
		return 0
	}
	for i := range e.holds {
		if p := e.holds[i].at(x); p != 0 {
			return p
		}
	}
	for i := range e.given {
		if p := e.given[i].at(x); p != 0 {
			return p
		}
	}
	return 0
}

func (g *hold) at(x operand) uintptr {
	if x.ptr < g.lo || (x.ptr-g.lo)%4 != 0 || x.ld != g.ld || (x.batch > 1 && x.stride != g.stride) {
		return 0
	}
	o := int64(x.ptr-g.lo) / 4
	if o < 0 { // 2^63 bytes or more above lo (a region given at a host address, x on the fake's devices)
		return 0
	}
	var z int64
	if g.stride > 0 {
		z = o / g.stride
		o -= z * g.stride
	}
	r0, c0 := o/int64(g.ld), o%int64(g.ld)
	if z+int64(x.batch) > int64(g.batch) || r0+int64(x.rows) > int64(g.rows) {
		return 0
	}
	for _, b := range g.bands {
		if int64(b.r1) > r0 && int64(b.r0) < r0+int64(x.rows) && int64(b.w) < c0+int64(x.cols) {
			return 0
		}
	}
	return g.buf + (x.ptr-g.lo)/2
}

// heldWritten refuses a product whose output (n values at c) overlaps a
// held region.
func (e *Engine) heldWritten(c uintptr, n int64) error {
	for _, g := range e.holds {
		if n > 0 && c < g.lo+uintptr(4*g.end) && c+uintptr(4*n) > g.lo {
			return fmt.Errorf("gemm: a product writes into values held since Hold (at %#x, %d values): Release first", g.lo, g.end)
		}
	}
	for _, g := range e.given {
		if n > 0 && c < g.lo+uintptr(4*g.end) && c+uintptr(4*n) > g.lo {
			return fmt.Errorf("gemm: a product writes into values whose bf16 copy was given by Provide (at %#x, %d values): Withdraw first", g.lo, g.end)
		}
	}
	return nil
}

// growSlot makes a held region's buffer at least n bytes (freeing the
// old once the stream is done with it).
func (e *Engine) growSlot(sl *slot, n int) error {
	if err := e.regrow(&sl.buf, &sl.cap, n); err != nil {
		return fmt.Errorf("gemm: %d bytes for a held region's bf16 copy: %w", n, err)
	}
	return nil
}
