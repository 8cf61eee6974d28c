package gemm

import "fmt"

// Provide gives the engine a bf16 copy that the caller made of rows
// rows of cols fp32 values at ptr (dense, rows cols apart): at x16, value
// i of the region at x16 + 2 i, rounded as the engine's cast rounds (to
// nearest even, NaN kept: the same bits). Under bf16 autocast through
// cuBLAS with the cast kernel, every operand that lies inside the region
// (with its ld, cols) is read from that copy until Withdraw(ptr), and
// nothing is cast for it: a kernel that produces a Linear's input writes
// its bf16 value as it goes (gpu/kernels' LayerNormForwardBF16), and the
// layer's forward product and its backward weight-gradient product both
// read it. It is Hold for a copy cast by its producer rather than by the
// engine; Release does not end it.
//
// The caller promises that the copy is written (queued on the engine's
// stream before the products that read it) and that nothing writes the
// fp32 values until Withdraw (a product whose output overlaps the region
// is refused). Providing ptr again replaces its copy. In the other
// precisions, with the tiled kernel or with BF16Cast CastInCUBLAS the
// copy is not read (UsesCopies says whether it is) and Provide only
// checks its arguments. Safe for concurrent use.
func (e *Engine) Provide(ptr, x16 uintptr, rows, cols int) error {
	if ptr == 0 || x16 == 0 || rows < 0 || cols < 0 {
		return fmt.Errorf("gemm: Provide of %d rows of %d values at %#x, copy at %#x: want non-null pointers and non-negative sizes", rows, cols, ptr, x16)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.withdraw(ptr)
	if !e.usesCopies() || rows == 0 || cols == 0 {
		return nil
	}
	e.given = append(e.given, hold{lo: ptr, ld: cols, batch: 1, rows: rows,
		bands: []band{{0, rows, cols}}, buf: x16, end: int64(rows) * int64(cols)})
	return nil
}

// Withdraw ends Provide(ptr, ...): later products cast those values
// again. Withdrawing what is not provided does nothing.
func (e *Engine) Withdraw(ptr uintptr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.withdraw(ptr)
}

// WithdrawAll ends every Provide.
func (e *Engine) WithdrawAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.given = e.given[:0]
}

func (e *Engine) withdraw(ptr uintptr) {
	for i := range e.given {
		if e.given[i].lo == ptr {
			e.given = append(e.given[:i], e.given[i+1:]...)
			return
		}
	}
}

// UsesCopies reports whether the engine's products read bf16 copies of
// their operands (bf16 autocast through cuBLAS with the cast kernel):
// only then does a copy given by Provide save a cast.
func (e *Engine) UsesCopies() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.usesCopies()
}

func (e *Engine) usesCopies() bool { return e.prec == BF16 && e.h != nil && !e.castIn }
