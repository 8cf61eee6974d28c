package reduce

import (
	"unsafe"

	"github.com/gdist/gdist/comm"
)

// The plain-Go reference kernels: one scalar loop per dtype, the semantics
// every fast kernel (kernels_amd64.s, kernels_go.go) reproduces bit for bit.
// They are the oracle of the tests and the baseline of the benchmarks.
//
// dst[i] = dst[i] op src[i], element-wise. Sum and Prod compute d op s (with
// d the first operand, which decides which NaN comes out when both are NaN);
// Min and Max take s when s < d (s > d) or s is NaN, else d. bfloat16 and
// float16 are widened to float32 exactly, reduced, and rounded once to
// nearest even (comm.ToBF16, comm.ToF16).

type number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

type integer interface {
	~int32 | ~int64 | ~uint8
}

func view[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

func reduceNum[T number](op comm.ReduceOp, d, s []T) {
	s = s[:len(d)]
	switch op {
	case comm.Sum, comm.Avg:
		for i := range d {
			d[i] += s[i]
		}
	case comm.Prod:
		for i := range d {
			d[i] *= s[i]
		}
	case comm.Min:
		for i := range d {
			if s[i] < d[i] || s[i] != s[i] {
				d[i] = s[i]
			}
		}
	case comm.Max:
		for i := range d {
			if s[i] > d[i] || s[i] != s[i] {
				d[i] = s[i]
			}
		}
	}
}

func reduceBits[T integer](op comm.ReduceOp, d, s []T) {
	s = s[:len(d)]
	switch op {
	case comm.BAnd:
		for i := range d {
			d[i] &= s[i]
		}
	case comm.BOr:
		for i := range d {
			d[i] |= s[i]
		}
	case comm.BXor:
		for i := range d {
			d[i] ^= s[i]
		}
	default:
		reduceNum(op, d, s)
	}
}

// reduce16 reduces 16-bit floats in float32, rounding once per element.
func reduce16(op comm.ReduceOp, d, s []uint16, to32 func(uint16) float32, from32 func(float32) uint16) {
	s = s[:len(d)]
	for i := range d {
		a, b := to32(d[i]), to32(s[i])
		var r float32
		switch op {
		case comm.Sum, comm.Avg:
			r = a + b
		case comm.Prod:
			r = a * b
		case comm.Min:
			r = a
			if b < a || b != b {
				r = b
			}
		case comm.Max:
			r = a
			if b > a || b != b {
				r = b
			}
		}
		d[i] = from32(r)
	}
}

func bf16to32(v uint16) float32   { return comm.BF16(v).Float32() }
func bf16from32(f float32) uint16 { return uint16(comm.ToBF16(f)) }
func f16to32(v uint16) float32    { return comm.F16(v).Float32() }
func f16from32(f float32) uint16  { return uint16(comm.ToF16(f)) }

// reduceRef is the reference of Reduce.
func reduceRef(dt comm.DType, op comm.ReduceOp, dst, src []byte) {
	switch dt {
	case comm.Float32:
		reduceNum(op, view[float32](dst), view[float32](src))
	case comm.Float64:
		reduceNum(op, view[float64](dst), view[float64](src))
	case comm.Int32:
		reduceBits(op, view[int32](dst), view[int32](src))
	case comm.Int64:
		reduceBits(op, view[int64](dst), view[int64](src))
	case comm.Uint8:
		reduceBits(op, dst, src)
	case comm.BFloat16:
		reduce16(op, view[uint16](dst), view[uint16](src), bf16to32, bf16from32)
	case comm.Float16:
		reduce16(op, view[uint16](dst), view[uint16](src), f16to32, f16from32)
	}
}

func divNum[T number](d []T, n T) {
	for i := range d {
		d[i] /= n
	}
}

func div16(d []uint16, n float32, to32 func(uint16) float32, from32 func(float32) uint16) {
	for i := range d {
		d[i] = from32(to32(d[i]) / n)
	}
}

// divideRef is the reference of Divide (n > 1).
func divideRef(dt comm.DType, buf []byte, n int) {
	switch dt {
	case comm.Float32:
		divNum(view[float32](buf), float32(n))
	case comm.Float64:
		divNum(view[float64](buf), float64(n))
	case comm.Int32:
		divNum(view[int32](buf), int32(n))
	case comm.Int64:
		divNum(view[int64](buf), int64(n))
	case comm.Uint8:
		if n > 255 {
			clear(buf) // every uint8 sum divided by n > 255 is 0
			return
		}
		divNum(buf, uint8(n))
	case comm.BFloat16:
		div16(view[uint16](buf), float32(n), bf16to32, bf16from32)
	case comm.Float16:
		div16(view[uint16](buf), float32(n), f16to32, f16from32)
	}
}
