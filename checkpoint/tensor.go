package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/gdist/gdist/internal/hugepage"
)

// Sentinel errors; every error of this package about the data wraps one of
// them (I/O errors wrap the os error instead).
var (
	// ErrCorrupt: a file is not a valid safetensors file.
	ErrCorrupt = errors.New("checkpoint: corrupt safetensors file")
	// ErrInvalidArgument: a bad tensor or argument (unknown dtype, data of
	// the wrong size, duplicate name, unsupported conversion).
	ErrInvalidArgument = errors.New("checkpoint: invalid argument")
)

// Tensor is one named tensor: its safetensors dtype, shape (row-major; an
// empty shape is a scalar) and raw little-endian data.
type Tensor struct {
	Name  string
	DType string // "F32", "F64", "F16", "BF16", "I64", "I32", "U8", ... (see DTypeSize)
	Shape []int
	Data  []byte
}

var dtypeSizes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"U16": 2, "I16": 2, "F16": 2, "BF16": 2,
	"U32": 4, "I32": 4, "F32": 4,
	"U64": 8, "I64": 8, "F64": 8,
}

// DTypeSize returns the size in bytes of one element of a safetensors
// dtype, and false for a dtype this package does not know.
func DTypeSize(dtype string) (int, bool) {
	n, ok := dtypeSizes[dtype]
	return n, ok
}

// NumElements returns the product of the shape (1 for a scalar), or an
// error for a negative dim or an overflow.
func NumElements(shape []int) (int, error) {
	n := 1
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dim %d of shape %v is negative", i, shape)
		}
		if d != 0 && n > math.MaxInt/d {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n *= d
	}
	return n, nil
}

// validate checks the dtype, shape and data length of t.
func (t Tensor) validate() error {
	size, ok := DTypeSize(t.DType)
	if !ok {
		return fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
	}
	n, err := NumElements(t.Shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %v", t.Name, err)
	}
	if n > math.MaxInt/size {
		return fmt.Errorf("tensor %q: shape %v has too many elements", t.Name, t.Shape)
	}
	if len(t.Data) != n*size {
		return fmt.Errorf("tensor %q: %s shape %v needs %d bytes (%d elements x %d), data has %d",
			t.Name, t.DType, t.Shape, n*size, n, size, len(t.Data))
	}
	return nil
}

// F32 returns a float32 tensor holding a copy of v.
func F32(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	if littleEndian && len(v) > 0 {
		// The memory is the file's layout already: one copy (a save's
		// snapshot of a large model is this copy).
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
	} else {
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
	}
	return Tensor{Name: name, DType: "F32", Shape: slices.Clone(shape), Data: b}
}

// F32View returns a float32 tensor whose data is v's memory, not a copy,
// on little-endian machines (a copy elsewhere): v must not change until
// the tensor is written. For callers that manage their own buffers (a
// save's snapshot, reused from one save to the next).
func F32View(name string, shape []int, v []float32) Tensor {
	if !littleEndian || len(v) == 0 {
		return F32(name, shape, v)
	}
	return Tensor{Name: name, DType: "F32", Shape: slices.Clone(shape), Data: unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))}
}

// littleEndian reports whether this machine stores numbers as safetensors
// files do.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// F64 returns a float64 tensor holding a copy of v.
func F64(name string, shape []int, v []float64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return Tensor{Name: name, DType: "F64", Shape: slices.Clone(shape), Data: b}
}

// I64 returns an int64 tensor holding a copy of v.
func I64(name string, shape []int, v []int64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Tensor{Name: name, DType: "I64", Shape: slices.Clone(shape), Data: b}
}

// I32 returns an int32 tensor holding a copy of v.
func I32(name string, shape []int, v []int32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return Tensor{Name: name, DType: "I32", Shape: slices.Clone(shape), Data: b}
}

// Float32s decodes the tensor as float32 values. F32 is decoded as is; F16
// and BF16 are widened exactly. Other dtypes, or data whose length does not
// match the shape, give an error wrapping ErrInvalidArgument.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	d := t.Data
	switch t.DType {
	case "F32":
		out := hugepage.Float32s(len(d) / 4)
		if littleEndian && len(out) > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(d)), d)
			return out, nil
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
		return out, nil
	case "BF16":
		out := make([]float32, len(d)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[2*i:])) << 16)
		}
		return out, nil
	case "F16":
		out := make([]float32, len(d)/2)
		for i := range out {
			out[i] = halfToFloat32(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tensor %q has dtype %s, which does not convert exactly to float32 (want F32, F16 or BF16)",
		ErrInvalidArgument, t.Name, t.DType)
}

// Float64s decodes the tensor as float64 values: F64 as is, F32, F16 and
// BF16 widened exactly. Other dtypes give an error wrapping
// ErrInvalidArgument.
func (t Tensor) Float64s() ([]float64, error) {
	if t.DType == "F64" {
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		out := make([]float64, len(t.Data)/8)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		return out, nil
	}
	f, err := t.Float32s()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out, nil
}

// Int64s decodes the tensor as int64 values: I64 as is; I32, I16, I8, U32,
// U16, U8 and BOOL widened exactly. Other dtypes give an error wrapping
// ErrInvalidArgument.
func (t Tensor) Int64s() ([]int64, error) {
	var get func(d []byte, i int) int64
	switch t.DType {
	case "I64":
		get = func(d []byte, i int) int64 { return int64(binary.LittleEndian.Uint64(d[8*i:])) }
	case "I32":
		get = func(d []byte, i int) int64 { return int64(int32(binary.LittleEndian.Uint32(d[4*i:]))) }
	case "U32":
		get = func(d []byte, i int) int64 { return int64(binary.LittleEndian.Uint32(d[4*i:])) }
	case "I16":
		get = func(d []byte, i int) int64 { return int64(int16(binary.LittleEndian.Uint16(d[2*i:]))) }
	case "U16":
		get = func(d []byte, i int) int64 { return int64(binary.LittleEndian.Uint16(d[2*i:])) }
	case "I8":
		get = func(d []byte, i int) int64 { return int64(int8(d[i])) }
	case "U8", "BOOL":
		get = func(d []byte, i int) int64 { return int64(d[i]) }
	default:
		return nil, fmt.Errorf("%w: tensor %q has dtype %s, which does not convert exactly to int64 (want an integer dtype other than U64)",
			ErrInvalidArgument, t.Name, t.DType)
	}
	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	out := make([]int64, len(t.Data)/dtypeSizes[t.DType])
	for i := range out {
		out[i] = get(t.Data, i)
	}
	return out, nil
}

// halfToFloat32 widens an IEEE 754 binary16 value exactly.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalize
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (frac&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}
