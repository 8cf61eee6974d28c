package comm

import (
	"fmt"
	"unsafe"
)

// Elem is the set of Go element types a Buffer can be made from.
type Elem interface {
	float32 | float64 | int32 | int64 | uint8 | BF16 | F16
}

// DTypeOf returns the DType of the Go type T.
func DTypeOf[T Elem]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case BF16:
		return BFloat16
	case F16:
		return Float16
	}
	panic("unreachable")
}

// Buffer describes memory that a collective reads or writes: an element type,
// an element count and either host memory (a byte view of a Go slice, never a
// copy) or device memory. A Buffer is a small value; copying it does not copy
// the memory. The zero Buffer is an empty host buffer of no type.
type Buffer struct {
	dtype DType
	count int
	host  []byte
	dev   uintptr
	devID int
}

// FromSlice returns a Buffer that aliases s. Writes by a collective are
// visible in s.
func FromSlice[T Elem](s []T) Buffer {
	dt := DTypeOf[T]()
	var b []byte
	if len(s) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*dt.Size())
	}
	return Buffer{dtype: dt, count: len(s), host: b}
}

// FromBytes returns a Buffer of count elements of dt that aliases b.
// len(b) must be count*dt.Size().
func FromBytes(dt DType, b []byte) (Buffer, error) {
	if !dt.Valid() {
		return Buffer{}, InvalidArgf("unsupported dtype %v", dt)
	}
	if len(b)%dt.Size() != 0 {
		return Buffer{}, InvalidArgf("%d bytes is not a whole number of %v elements", len(b), dt)
	}
	return Buffer{dtype: dt, count: len(b) / dt.Size(), host: b}, nil
}

// DeviceBuffer describes count elements of dt at device address ptr on GPU
// device. Only device-capable backends accept it.
func DeviceBuffer(ptr uintptr, device int, dt DType, count int) Buffer {
	return Buffer{dtype: dt, count: count, dev: ptr, devID: device}
}

// DType is the element type.
func (b Buffer) DType() DType { return b.dtype }

// Len is the number of elements.
func (b Buffer) Len() int { return b.count }

// Bytes is the size in bytes.
func (b Buffer) Bytes() int { return b.count * b.dtype.Size() }

// IsDevice reports whether b describes device (GPU) memory.
func (b Buffer) IsDevice() bool { return b.dev != 0 }

// Device returns the device address and device ordinal of a device buffer.
func (b Buffer) Device() (ptr uintptr, device int) { return b.dev, b.devID }

// Host returns the host bytes b aliases (nil for a device buffer).
func (b Buffer) Host() []byte { return b.host }

// Slice returns the elements [from, to) of b, sharing memory.
func (b Buffer) Slice(from, to int) Buffer {
	if from < 0 || to < from || to > b.count {
		panic(fmt.Sprintf("comm: Buffer.Slice(%d, %d) out of range [0, %d]", from, to, b.count))
	}
	s := b.dtype.Size()
	out := Buffer{dtype: b.dtype, count: to - from, devID: b.devID}
	if b.dev != 0 {
		out.dev = b.dev + uintptr(from*s)
	} else if b.host != nil {
		out.host = b.host[from*s : to*s : to*s]
	}
	return out
}

func (b Buffer) String() string {
	if b.IsDevice() {
		return fmt.Sprintf("%v[%d]@cuda:%d", b.dtype, b.count, b.devID)
	}
	return fmt.Sprintf("%v[%d]", b.dtype, b.count)
}

// Validate checks that b is well formed: a valid dtype (unless empty) and
// memory matching its length.
func (b Buffer) Validate() error {
	if !b.dtype.Valid() {
		if b.count == 0 && b.dtype == 0 {
			return InvalidArgf("buffer has no dtype")
		}
		return InvalidArgf("buffer has unsupported dtype %v", b.dtype)
	}
	if b.count < 0 {
		return InvalidArgf("buffer has negative length %d", b.count)
	}
	if b.dev == 0 && len(b.host) != b.count*b.dtype.Size() {
		return InvalidArgf("buffer of %d %v elements has %d bytes of memory", b.count, b.dtype, len(b.host))
	}
	return nil
}

// AsSlice returns b's memory as a []T (sharing it). It fails if T does not
// match b's dtype or b is device memory.
func AsSlice[T Elem](b Buffer) ([]T, error) {
	if DTypeOf[T]() != b.dtype {
		return nil, InvalidArgf("buffer is %v, not %v", b.dtype, DTypeOf[T]())
	}
	if b.IsDevice() {
		return nil, InvalidArgf("buffer is device memory")
	}
	if b.count == 0 {
		return []T{}, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b.host))), b.count), nil
}

// Overlap reports whether a and b share any memory: host memory, or device
// memory of one device. Empty buffers overlap nothing.
func Overlap(a, b Buffer) bool {
	if a.dev != 0 || b.dev != 0 {
		if a.dev == 0 || b.dev == 0 || a.devID != b.devID || a.count == 0 || b.count == 0 {
			return false
		}
		return a.dev < b.dev+uintptr(b.Bytes()) && b.dev < a.dev+uintptr(a.Bytes())
	}
	if len(a.host) == 0 || len(b.host) == 0 {
		return false
	}
	a0 := uintptr(unsafe.Pointer(unsafe.SliceData(a.host)))
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(b.host)))
	return a0 < b0+uintptr(len(b.host)) && b0 < a0+uintptr(len(a.host))
}

// Same reports whether a and b describe exactly the same memory.
func Same(a, b Buffer) bool {
	if a.count != b.count || a.dtype != b.dtype {
		return false
	}
	if a.dev != 0 || b.dev != 0 {
		return a.dev == b.dev && a.devID == b.devID
	}
	if len(a.host) == 0 {
		return len(b.host) == 0
	}
	return unsafe.SliceData(a.host) == unsafe.SliceData(b.host)
}
