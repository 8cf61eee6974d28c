package flat

import (
	"unsafe"

	"github.com/gdist/gdist/comm"
	"gorgonia.org/tensor"
)

// FromDense returns a comm.Buffer that aliases the backing memory of t (no
// copy), for collectives on gorgonia tensors. (It lives here, with the
// tensors, so that package comm does not import gorgonia.)
// t must be contiguous (not a strided view) and of a supported type.
func FromDense(t *tensor.Dense) (comm.Buffer, error) {
	if t == nil {
		return comm.Buffer{}, comm.InvalidArgf("nil tensor")
	}
	if t.RequiresIterator() {
		return comm.Buffer{}, comm.InvalidArgf("tensor of shape %v is a non-contiguous view; make it contiguous (Materialize) first", t.Shape())
	}
	n := t.Shape().TotalSize()
	if t.IsScalar() {
		n = 1
	}
	var b comm.Buffer
	switch d := t.Data().(type) {
	case []float32:
		b = comm.FromSlice(d)
	case []float64:
		b = comm.FromSlice(d)
	case []int32:
		b = comm.FromSlice(d)
	case []int64:
		b = comm.FromSlice(d)
	case []uint8:
		b = comm.FromSlice(d)
	case []int:
		if unsafe.Sizeof(int(0)) != 8 {
			return comm.Buffer{}, comm.InvalidArgf("tensor dtype int is not 64-bit here")
		}
		bb := unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(d))), len(d))
		b = comm.FromSlice(bb)
	case float32:
		return comm.Buffer{}, comm.InvalidArgf("scalar tensor has no addressable backing; use a shape-(1) tensor")
	default:
		return comm.Buffer{}, comm.InvalidArgf("tensor dtype %v is not supported", t.Dtype())
	}
	if b.Len() < n {
		return comm.Buffer{}, comm.InvalidArgf("tensor backing holds %d elements, shape needs %d", b.Len(), n)
	}
	return b.Slice(0, n), nil
}
