package comm

import (
	"errors"
	"unsafe"
)

// Allocator is implemented by Comms whose backend can place buffers in
// memory that the other ranks map (the shm backend, and auto between the
// ranks of one host): collectives on such buffers read the peers' memory
// directly instead of copying through the transport (in the spirit of
// MPI_Alloc_mem, or NCCL's user-buffer registration). Use Alloc, which
// falls back to ordinary memory on every other Comm.
type Allocator interface {
	// Alloc returns a zeroed Buffer of n > 0 elements of dt in shared
	// memory and the function that frees it. The memory stays valid
	// until it is freed, even after the Comm is closed; freeing twice, or
	// after Close, does nothing. It fails with an error wrapping
	// ErrUnsupported where this Comm has no shared memory (its ranks span
	// hosts, or the transport has none). Safe for concurrent use.
	Alloc(dt DType, n int) (Buffer, func(), error)
}

// Alloc returns a zeroed Buffer of n elements of dt for collectives on c
// and the function that frees it (calling it again does nothing). Where
// c is an Allocator with shared memory it comes from there (which makes
// collectives on it zero-copy where every rank's buffer is such); else
// (no Allocator, or one that reports ErrUnsupported) it is ordinary Go
// memory and free does nothing. A Buffer from Alloc
// works with every Comm and with ordinary Buffers in the same op (such
// ops take the ordinary path); the gain needs every rank's buffer to come
// from Alloc on the same backend.
//
// An Allocator's error (its area is full: the error names the option
// that enlarges it) is returned, not hidden: callers that can do with
// ordinary memory fall back themselves.
func Alloc(c Comm, dt DType, n int) (Buffer, func(), error) {
	if !dt.Valid() {
		return Buffer{}, nil, InvalidArgf("alloc: unsupported dtype %v", dt)
	}
	if n < 0 {
		return Buffer{}, nil, InvalidArgf("alloc: negative length %d", n)
	}
	if a, ok := c.(Allocator); ok && n > 0 {
		b, free, err := a.Alloc(dt, n)
		if !errors.Is(err, ErrUnsupported) {
			return b, free, err
		}
	}
	b, _ := FromBytes(dt, alignedBytes(n*dt.Size()))
	return b, func() {}, nil
}

// AllocSlice is Alloc for a Go element type: it returns the memory as a
// []T (nil-free: an empty slice for n == 0).
func AllocSlice[T Elem](c Comm, n int) ([]T, func(), error) {
	b, free, err := Alloc(c, DTypeOf[T](), n)
	if err != nil {
		return nil, nil, err
	}
	s, err := AsSlice[T](b)
	if err != nil {
		free()
		return nil, nil, err
	}
	return s, free, nil
}

// alignedBytes returns n zeroed bytes aligned for every element type
// (backed by uint64s).
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}
