package reduce

import (
	"math"

	"github.com/gdist/gdist/comm"
)

// The portable kernel set, used where no assembly kernel exists (other
// architectures, the purego build tag, ops the assembly lacks): three
// operands, sums and products unrolled by four, min and max storing only
// where b wins when in place (as the reference), and the 16-bit types
// converted inline (the reference calls its conversions through function
// values).

var goKernels = newGoKernels()

func newGoKernels() *kernelSet {
	s := &kernelSet{name: "go"}
	for _, op := range comm.ReduceOps() {
		o := op
		if !op.Bitwise() {
			s.bin[comm.Float32][op] = func(d, a, b []byte) { goNum(o, view[float32](d), view[float32](a), view[float32](b)) }
			s.bin[comm.Float64][op] = func(d, a, b []byte) { goNum(o, view[float64](d), view[float64](a), view[float64](b)) }
			s.bin[comm.BFloat16][op] = func(d, a, b []byte) { goBF16(o, view[uint16](d), view[uint16](a), view[uint16](b)) }
			s.bin[comm.Float16][op] = func(d, a, b []byte) { goF16(o, view[uint16](d), view[uint16](a), view[uint16](b)) }
		}
		s.bin[comm.Int32][op] = func(d, a, b []byte) { goInt(o, view[int32](d), view[int32](a), view[int32](b)) }
		s.bin[comm.Int64][op] = func(d, a, b []byte) { goInt(o, view[int64](d), view[int64](a), view[int64](b)) }
		s.bin[comm.Uint8][op] = func(d, a, b []byte) { goInt(o, d, a, b) }
	}
	s.div[comm.Float32] = func(b []byte, n int) { divNum(view[float32](b), float32(n)) }
	s.div[comm.Float64] = func(b []byte, n int) { divNum(view[float64](b), float64(n)) }
	s.div[comm.Int32] = func(b []byte, n int) { divNum(view[int32](b), int32(n)) }
	s.div[comm.Int64] = func(b []byte, n int) { divNum(view[int64](b), int64(n)) }
	s.div[comm.Uint8] = func(b []byte, n int) { divideRef(comm.Uint8, b, n) }
	s.div[comm.BFloat16] = func(b []byte, n int) {
		d, f := view[uint16](b), float32(n)
		for i := range d {
			d[i] = uint16(comm.ToBF16(comm.BF16(d[i]).Float32() / f))
		}
	}
	s.div[comm.Float16] = func(b []byte, n int) {
		d, f := view[uint16](b), float32(n)
		for i := range d {
			d[i] = uint16(comm.ToF16(comm.F16(d[i]).Float32() / f))
		}
	}
	return s
}

// goNum: d = a op b for the arithmetic ops, four elements per iteration.
// Which of two NaNs a sum or product returns follows the operand order the
// compiler picks, as in the reference (a's with this compiler, b's under
// -race); the assembly kernels always return a's. Fixing it here would
// cost about half the speed of the loop.
func goNum[T number](op comm.ReduceOp, d, a, b []T) {
	n := len(d)
	a, b = a[:n], b[:n]
	i := 0
	switch op {
	case comm.Sum, comm.Avg:
		for ; i+4 <= n; i += 4 {
			x, y, z := d[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
			x[0], x[1], x[2], x[3] = y[0]+z[0], y[1]+z[1], y[2]+z[2], y[3]+z[3]
		}
		for ; i < n; i++ {
			d[i] = a[i] + b[i]
		}
	case comm.Prod:
		for ; i+4 <= n; i += 4 {
			x, y, z := d[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
			x[0], x[1], x[2], x[3] = y[0]*z[0], y[1]*z[1], y[2]*z[2], y[3]*z[3]
		}
		for ; i < n; i++ {
			d[i] = a[i] * b[i]
		}
	case comm.Min, comm.Max:
		if n == 0 {
			return
		}
		if &d[0] == &b[0] && &d[0] != &a[0] { // in place on b
			for i := range d {
				x, y := a[i], b[i]
				if op == comm.Min && (y < x || y != y) || op == comm.Max && (y > x || y != y) {
					x = y
				}
				d[i] = x
			}
			return
		}
		if &d[0] != &a[0] {
			copy(d, a)
		}
		// In place on a now: store only where b wins, like the reference.
		if op == comm.Min {
			for i := range d {
				if y := b[i]; y < d[i] || y != y {
					d[i] = y
				}
			}
			return
		}
		for i := range d {
			if y := b[i]; y > d[i] || y != y {
				d[i] = y
			}
		}
	}
}

// goInt adds the bitwise ops to goNum.
func goInt[T integer](op comm.ReduceOp, d, a, b []T) {
	n := len(d)
	a, b = a[:n], b[:n]
	switch op {
	case comm.BAnd:
		for i := range d {
			d[i] = a[i] & b[i]
		}
	case comm.BOr:
		for i := range d {
			d[i] = a[i] | b[i]
		}
	case comm.BXor:
		for i := range d {
			d[i] = a[i] ^ b[i]
		}
	default:
		goNum(op, d, a, b)
	}
}

func bf16f(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) }

// nanFirst fixes which NaN a sum or product r = x op y returns: x's when x
// is a NaN, else y's, as x86 does with x as the first source (and as the
// reference does). The Go compiler may swap the operands of a commutative
// float op, so the 16-bit kernels, whose rounding keeps a NaN's sign (and,
// for bfloat16, its payload), pick explicitly.
func nanFirst(r, x, y float32) float32 {
	if r != r {
		if x != x {
			return x
		}
		if y != y {
			return y
		}
	}
	return r
}

// bf16r is comm.ToBF16 (round to nearest even, NaNs kept NaN and quiet).
func bf16r(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7fffffff > 0x7f800000 {
		return uint16(x>>16 | 0x40)
	}
	return uint16((x + 0x7fff + (x>>16)&1) >> 16)
}

func goBF16(op comm.ReduceOp, d, a, b []uint16) {
	n := len(d)
	a, b = a[:n], b[:n]
	switch op {
	case comm.Sum, comm.Avg:
		for i := range d {
			x, y := bf16f(a[i]), bf16f(b[i])
			d[i] = bf16r(nanFirst(x+y, x, y))
		}
	case comm.Prod:
		for i := range d {
			x, y := bf16f(a[i]), bf16f(b[i])
			d[i] = bf16r(nanFirst(x*y, x, y))
		}
	case comm.Min:
		for i := range d {
			x, y := bf16f(a[i]), bf16f(b[i])
			if y < x || y != y {
				x = y
			}
			d[i] = bf16r(x)
		}
	case comm.Max:
		for i := range d {
			x, y := bf16f(a[i]), bf16f(b[i])
			if y > x || y != y {
				x = y
			}
			d[i] = bf16r(x)
		}
	}
}

func goF16(op comm.ReduceOp, d, a, b []uint16) {
	n := len(d)
	a, b = a[:n], b[:n]
	f := func(v uint16) float32 { return comm.F16(v).Float32() }
	for i := range d {
		x, y := f(a[i]), f(b[i])
		switch op {
		case comm.Sum, comm.Avg:
			x = nanFirst(x+y, x, y)
		case comm.Prod:
			x = nanFirst(x*y, x, y)
		case comm.Min:
			if y < x || y != y {
				x = y
			}
		case comm.Max:
			if y > x || y != y {
				x = y
			}
		}
		d[i] = uint16(comm.ToF16(x))
	}
}
