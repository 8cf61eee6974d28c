package cuda_test

import (
	"testing"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestCopyGoMemoryWithPointers: the host side of CopyHtoD and CopyDtoH
// may be any Go memory, such as an int64 field of a struct that also
// holds pointers (a step counter broadcast through staging). cgo's
// pointer check panicked on it ("Go pointer to unpinned Go pointer")
// when the address went to C as an unsafe.Pointer.
func TestCopyGoMemoryWithPointers(t *testing.T) {
	cudafake.RequireCUDA(t)
	type state struct {
		name  *string
		step  int64
		other []int
	}
	name := "x"
	s := &state{name: &name, step: 0x0102030405060708, other: []int{1}}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&s.step)), 8)
	d := cudafake.Malloc(t, 0, 8)
	if err := cuda.CopyHtoD(0, d, b); err != nil {
		t.Fatal(err)
	}
	s.step = 0
	if err := cuda.CopyDtoH(0, b, d); err != nil {
		t.Fatal(err)
	}
	if s.step != 0x0102030405060708 || *s.name != "x" || s.other[0] != 1 {
		t.Fatalf("round trip through the device: step %#x", s.step)
	}
}
