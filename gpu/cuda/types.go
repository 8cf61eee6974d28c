package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gdist/gdist/internal/dl"
)

// EnvLibrary names the environment variable that points the loader at a
// specific CUDA runtime library (a path or a file name for dlopen). When it
// is set, nothing else is tried: if that library sees no device, CUDA is
// unavailable and the reason says so (no other runtime stands in for it).
const EnvLibrary = "GDIST_CUDART_PATH"

// DefaultLibraries are the names tried, in order, when EnvLibrary is unset,
// after the runtimes of NVIDIA's pip wheels in the Python environments (see
// WheelLibraries).
var DefaultLibraries = []string{"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}

// WheelLibraries are the CUDA runtimes that NVIDIA's pip wheels installed
// in the Python environments (dl.WheelLibraries: $VIRTUAL_ENV, else
// $CONDA_PREFIX, then the environment of each python3 on $PATH, activated
// or not): CUDA 13's nvidia/cu13/lib/libcudart.so.13 and CUDA 12's
// nvidia/cuda_runtime/lib/libcudart.so.12, under lib/python3.*/site-packages
// (or dist-packages). They are not on the library path, so dlopen would not
// find them by name.
func WheelLibraries() []string {
	return dl.WheelLibraries("nvidia/cu13/lib/libcudart.so.13", "nvidia/cuda_runtime/lib/libcudart.so.12")
}

// ErrUnavailable is wrapped by every error that comes from CUDA being absent
// (no runtime library, no driver, no device).
var ErrUnavailable = errors.New("cuda: not available")

// Error is a failed CUDA runtime call: which call, its cudaError_t and the
// runtime's description.
type Error struct {
	Call string // e.g. "cudaMemcpy"
	Code int    // the cudaError_t value
	Name string // e.g. "cudaErrorInvalidValue" (empty if unknown)
	Msg  string // cudaGetErrorString
}

func (e *Error) Error() string {
	name := ""
	if e.Name != "" {
		name = e.Name + ", "
	}
	return fmt.Sprintf("cuda: %s: %s (%scudaError %d)", e.Call, e.Msg, name, e.Code)
}

// CopyKind is a cudaMemcpyKind.
type CopyKind int

// The cudaMemcpyKind values.
const (
	HostToHost     CopyKind = 0
	HostToDevice   CopyKind = 1
	DeviceToHost   CopyKind = 2
	DeviceToDevice CopyKind = 3
	CopyDefault    CopyKind = 4 // inferred from the pointers (unified addressing)
)

// MemoryType is a cudaMemoryType: what kind of memory an address is.
type MemoryType int

// The cudaMemoryType values.
const (
	Unregistered MemoryType = 0 // plain host memory, unknown to CUDA
	HostPinned   MemoryType = 1 // page-locked host memory (cudaHostAlloc)
	DeviceMemory MemoryType = 2 // device memory (cudaMalloc)
	Managed      MemoryType = 3 // managed (unified) memory
)

func (t MemoryType) String() string {
	switch t {
	case Unregistered:
		return "host memory"
	case HostPinned:
		return "pinned host memory"
	case DeviceMemory:
		return "device memory"
	case Managed:
		return "managed memory"
	}
	return fmt.Sprintf("memory type %d", int(t))
}

func version(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// addrOf is the address of b's first byte.
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
