package comm

import (
	"fmt"
	"math"
)

// DType is the element type of a Buffer.
type DType uint8

// The element types every backend supports. BFloat16 and Float16 are stored
// as 16-bit values and reduced in float32.
const (
	Float32 DType = iota + 1
	Float64
	Int32
	Int64
	Uint8
	BFloat16
	Float16
)

var dtypeNames = [...]string{"invalid", "float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16"}
var dtypeSizes = [...]int{0, 4, 8, 4, 8, 1, 2, 2}

// DTypes lists every supported element type.
func DTypes() []DType { return []DType{Float32, Float64, Int32, Int64, Uint8, BFloat16, Float16} }

// Valid reports whether d is a supported element type.
func (d DType) Valid() bool { return d >= Float32 && d <= Float16 }

// Size is the size of one element in bytes (0 for an invalid DType).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	switch d {
	case Float32, Float64, BFloat16, Float16:
		return true
	}
	return false
}

func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// ParseDType parses a dtype name such as "float32" or "bf16".
func ParseDType(s string) (DType, error) {
	switch s {
	case "bf16":
		return BFloat16, nil
	case "fp16", "half":
		return Float16, nil
	case "fp32", "float":
		return Float32, nil
	case "fp64", "double":
		return Float64, nil
	}
	for _, d := range DTypes() {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, InvalidArgf("unknown dtype %q", s)
}

// ReduceOp is the reduction applied by AllReduce, Reduce and ReduceScatter.
type ReduceOp uint8

// The reduction operations. Avg sums and then divides by the group size
// (integer division for integer types). BAnd, BOr and BXor are defined only
// for integer types; asking for them on a float type is an error.
const (
	Sum ReduceOp = iota + 1
	Avg
	Prod
	Min
	Max
	BAnd
	BOr
	BXor
)

var opNames = [...]string{"invalid", "sum", "avg", "prod", "min", "max", "band", "bor", "bxor"}

// ReduceOps lists every reduction.
func ReduceOps() []ReduceOp { return []ReduceOp{Sum, Avg, Prod, Min, Max, BAnd, BOr, BXor} }

// Valid reports whether o is a known reduction.
func (o ReduceOp) Valid() bool { return o >= Sum && o <= BXor }

// Bitwise reports whether o is BAnd, BOr or BXor.
func (o ReduceOp) Bitwise() bool { return o == BAnd || o == BOr || o == BXor }

func (o ReduceOp) String() string {
	if !o.Valid() {
		return fmt.Sprintf("reduceop(%d)", uint8(o))
	}
	return opNames[o]
}

// ParseReduceOp parses a reduction name such as "sum" or "bxor".
func ParseReduceOp(s string) (ReduceOp, error) {
	for _, o := range ReduceOps() {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, InvalidArgf("unknown reduce op %q", s)
}

// CheckReduce returns an ErrInvalidArgument error if op cannot be applied to d.
func CheckReduce(d DType, op ReduceOp) error {
	if !d.Valid() {
		return InvalidArgf("unsupported dtype %v", d)
	}
	if !op.Valid() {
		return InvalidArgf("unsupported reduce op %v", op)
	}
	if op.Bitwise() && d.IsFloat() {
		return InvalidArgf("reduce op %v is only defined for integer dtypes, not %v", op, d)
	}
	return nil
}

// BF16 is a bfloat16 element (dtype BFloat16): the top 16 bits of a float32.
type BF16 uint16

// F16 is an IEEE 754 half-precision element (dtype Float16).
type F16 uint16

// ToBF16 converts f to BF16, rounding to nearest even.
func ToBF16(f float32) BF16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it a NaN
		return BF16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BF16(b >> 16)
}

// Float32 converts b to float32 exactly.
func (b BF16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// ToF16 converts f to F16, rounding to nearest even; out-of-range values
// become infinities.
func ToF16(f float32) F16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if man != 0 {
			return F16(sign | 0x7e00)
		}
		return F16(sign | 0x7c00)
	case exp-127 > 15: // overflow
		return F16(sign | 0x7c00)
	case exp-127 >= -14: // normal
		e := uint32(exp-127+15) << 10
		m := man >> 13
		v := e | m
		rest := man & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && v&1 == 1) {
			v++ // may carry into the exponent, which is correct
		}
		return F16(uint32(sign) | v)
	case exp-127 >= -25: // subnormal
		man |= 0x800000
		shift := uint32(-14-(exp-127)) + 13
		v := man >> shift
		rest := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && v&1 == 1) {
			v++
		}
		return F16(uint32(sign) | v)
	default:
		return F16(sign)
	}
}

// Float32 converts h to float32 exactly.
func (h F16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: normalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	}
}
