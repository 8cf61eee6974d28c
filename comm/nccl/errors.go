package nccl

import (
	"errors"
	"fmt"

	"github.com/gdist/gdist/internal/dl"
)

// DefaultLibraries are the names tried, in order, when EnvLibrary is unset,
// after the libnccl of NVIDIA's pip wheels in the Python environments (see
// WheelLibraries).
var DefaultLibraries = []string{"libnccl.so.2", "libnccl.so"}

// WheelLibraries are the libnccl.so.2 files that NVIDIA's NCCL pip wheels
// (nvidia-nccl-cu12, nvidia-nccl-cu13) installed at
// site-packages/nvidia/nccl/lib in the Python environments that
// dl.WheelLibraries finds ($VIRTUAL_ENV, $CONDA_PREFIX, then the
// environment of each python3 on $PATH, activated or not), as
// cuda.WheelLibraries finds the CUDA runtime's. They are not on the library
// path, so dlopen would not find them by name.
func WheelLibraries() []string { return dl.WheelLibraries("nvidia/nccl/lib/libnccl.so.2") }

// ErrUnavailable is wrapped by the errors that come from NCCL or CUDA being
// absent.
var ErrUnavailable = errors.New("nccl: not available")

// Error is a failed NCCL call: the call, its ncclResult_t, NCCL's
// description and, where the library has ncclGetLastError, its last
// message.
type Error struct {
	Call string
	Code int
	Msg  string
	Last string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s (ncclResult %d)", e.Call, e.Msg, e.Code)
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}
