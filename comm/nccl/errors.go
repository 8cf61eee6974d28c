package nccl

import (
	"errors"
	"fmt"
)

// EnvLibrary names the environment variable that points the loader at a
// specific libnccl (a path or a file name for dlopen). When it is set,
// nothing else is tried.
const EnvLibrary = "GDIST_NCCL_PATH"

// DefaultLibraries are the names tried, in order, when EnvLibrary is unset.
var DefaultLibraries = []string{"libnccl.so.2", "libnccl.so"}

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
