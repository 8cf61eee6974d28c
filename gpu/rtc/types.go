package rtc

import (
	"fmt"
	"strings"

	"github.com/gdist/gdist/internal/dl"
)

// The environment variables the package reads.
const (
	// EnvNVRTC points the loader at a specific NVRTC (a path or a name
	// for dlopen); when set, nothing else is tried.
	EnvNVRTC = "GDIST_NVRTC_PATH"
	// EnvDriver points the loader at a specific CUDA driver library
	// (libcuda); when set, nothing else is tried.
	EnvDriver = "GDIST_LIBCUDA_PATH"
	// EnvCache names a directory where compiled kernels are kept across
	// processes (unset: in memory only).
	EnvCache = "GDIST_KERNEL_CACHE"
)

// DefaultNVRTC are the names tried, in order, when EnvNVRTC is unset,
// after the libraries of NVIDIA's pip wheels (NVRTCWheels).
var DefaultNVRTC = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}

// NVRTCWheels are the NVRTC libraries that NVIDIA's pip wheels installed in
// the Python environments (dl.WheelLibraries: $VIRTUAL_ENV, $CONDA_PREFIX,
// then the environment of each python3 on $PATH): CUDA 13's
// nvidia/cu13/lib/libnvrtc.so.13 and CUDA 12's
// nvidia/cuda_nvrtc/lib/libnvrtc.so.12. PyTorch's wheels bring them.
func NVRTCWheels() []string {
	return dl.WheelLibraries("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
}

// DefaultDriver are the names tried for the CUDA driver library when
// EnvDriver is unset: the driver installs it on the library path.
var DefaultDriver = []string{"libcuda.so.1"}

// Dim3 is a grid's or a block's size in three dimensions.
type Dim3 struct{ X, Y, Z int }

// Dim is the one-dimensional size {x, 1, 1}.
func Dim(x int) Dim3 { return Dim3{x, 1, 1} }

func (d Dim3) norm() Dim3 {
	if d.Y == 0 {
		d.Y = 1
	}
	if d.Z == 0 {
		d.Z = 1
	}
	return d
}

// Config is a launch's shape: Grid blocks of Block threads, each block
// with Shared bytes of dynamic shared memory (extern __shared__).
type Config struct {
	Grid, Block Dim3
	Shared      int
}

// Image is compiled device code: a cubin for one architecture ("sm_90"),
// or PTX for a virtual one ("compute_90"), which the driver compiles for
// the device when loading it.
type Image struct {
	Name string // the program's name, as in the compiler's messages
	Arch string // "sm_90" or "compute_90"
	Data []byte // the cubin, or the PTX with its terminating NUL
	Log  string // the compiler's log (warnings)
	// FromMemory and FromDisk say whether this process's cache or
	// EnvCache's directory served it.
	FromMemory, FromDisk bool
}

// CompileError is a failed compilation, with the compiler's log.
type CompileError struct {
	Program string // the program's name
	Arch    string
	Call    string // the NVRTC call that failed
	Code    int    // its nvrtcResult
	Msg     string // nvrtcGetErrorString
	Log     string // the compiler's messages
	// Hint says why a header may not have been found: no CUDA include
	// directory (Compiler.Include), and how to give one.
	Hint string
}

func (e *CompileError) Error() string {
	s := fmt.Sprintf("rtc: compiling %s for %s: %s: %s", e.Program, e.Arch, e.Call, e.Msg)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	if l := strings.TrimSpace(e.Log); l != "" {
		s += "\n" + l
	}
	return s
}

// DriverError is a failed CUDA driver API call.
type DriverError struct {
	Call string // e.g. "cuLaunchKernel"
	Code int    // its CUresult
	Name string // e.g. "CUDA_ERROR_INVALID_VALUE"
	Msg  string // cuGetErrorString
}

func (e *DriverError) Error() string {
	name := ""
	if e.Name != "" {
		name = e.Name + ", "
	}
	return fmt.Sprintf("rtc: %s: %s (%sCUresult %d)", e.Call, e.Msg, name, e.Code)
}

// archOf is 90 for "sm_90" or "compute_90", 0 if s is neither.
func archOf(s string) (n int, cubin bool) {
	var p string
	switch {
	case strings.HasPrefix(s, "sm_"):
		p, cubin = s[3:], true
	case strings.HasPrefix(s, "compute_"):
		p = s[8:]
	default:
		return 0, false
	}
	if _, err := fmt.Sscanf(p, "%d", &n); err != nil {
		return 0, false
	}
	return n, cubin
}

// target picks what to compile for a device of compute capability
// major.minor: a cubin for sm_XY when the compiler can make cubins and
// knows the architecture (archs nil: it cannot say, so try), else PTX for
// the newest virtual architecture it knows that the device runs, which the
// driver compiles at load time.
func target(major, minor int, archs []int, cubins bool) string {
	want := 10*major + minor
	if archs == nil {
		if cubins {
			return fmt.Sprintf("sm_%d", want)
		}
		return fmt.Sprintf("compute_%d", want)
	}
	best := 0
	for _, a := range archs {
		if a == want && cubins {
			return fmt.Sprintf("sm_%d", want)
		}
		if a <= want && a > best {
			best = a
		}
	}
	if best == 0 {
		best = want // older than anything it knows: let it say so
	}
	return fmt.Sprintf("compute_%d", best)
}
