//go:build !cgo

package cuda

// Without cgo there is no way to load CUDA: everything reports it as
// unavailable, so the packages above still build (CGO_ENABLED=0).

import "fmt"

const noCgo = "built without cgo (CGO_ENABLED=0), so CUDA cannot be loaded"

var errNoCgo = fmt.Errorf("%w: %s", ErrUnavailable, noCgo)

// Reload does nothing without cgo.
func Reload() {}

// Available is false without cgo.
func Available() (ok bool, reason string) { return false, noCgo }

// DeviceCount is 0 without cgo.
func DeviceCount() int { return 0 }

// Info says that CUDA is not available.
func Info() string { return "no CUDA: " + noCgo }

// ErrorString names a cudaError_t.
func ErrorString(code int) string { return fmt.Sprintf("cudaError %d", code) }

// Symbol fails without cgo.
func Symbol(name string) (uintptr, error) { return 0, errNoCgo }

// Loaded is empty without cgo.
func Loaded() (path string, missing []string) { return "", nil }

// PCIBusID fails without cgo.
func PCIBusID(device int) (string, error) { return "", errNoCgo }

// Malloc fails without cgo.
func Malloc(device, n int) (uintptr, error) { return 0, errNoCgo }

// Free fails without cgo.
func Free(device int, ptr uintptr) error { return errNoCgo }

// HostAlloc fails without cgo.
func HostAlloc(device, n int) ([]byte, error) { return nil, errNoCgo }

// FreeHost fails without cgo.
func FreeHost(device int, b []byte) error { return errNoCgo }

// CopyHtoD fails without cgo.
func CopyHtoD(device int, dst uintptr, src []byte) error { return errNoCgo }

// CopyDtoH fails without cgo.
func CopyDtoH(device int, dst []byte, src uintptr) error { return errNoCgo }

// CopyDtoD fails without cgo.
func CopyDtoD(device int, dst, src uintptr, n int) error { return errNoCgo }

// Memset fails without cgo.
func Memset(device int, ptr uintptr, v byte, n int) error { return errNoCgo }

// PointerInfo fails without cgo.
func PointerInfo(device int, ptr uintptr) (MemoryType, int, error) { return 0, 0, errNoCgo }

// Stream is a CUDA stream (none without cgo).
type Stream struct{ dev int }

// NewStream fails without cgo.
func NewStream(device int, nonBlocking bool) (*Stream, error) { return nil, errNoCgo }

// Handle is 0 without cgo.
func (s *Stream) Handle() uintptr { return 0 }

// Device is the stream's device.
func (s *Stream) Device() int { return s.dev }

// Synchronize fails without cgo.
func (s *Stream) Synchronize() error { return errNoCgo }

// Destroy fails without cgo.
func (s *Stream) Destroy() error { return errNoCgo }

// WaitEvent fails without cgo.
func (s *Stream) WaitEvent(e *Event) error { return errNoCgo }

// WaitDefault fails without cgo.
func (s *Stream) WaitDefault(scratch *Event) error { return errNoCgo }

// CopyAsync fails without cgo.
func (s *Stream) CopyAsync(dst, src uintptr, n int, kind CopyKind) error { return errNoCgo }

// HasHostFunc is false without cgo.
func HasHostFunc() bool { return false }

// MemsetAsync fails: built without cgo.
func (s *Stream) MemsetAsync(p uintptr, v byte, n int) error { return errNoCgo }

// DeviceSynchronize fails: built without cgo.
func DeviceSynchronize(device int) error { return errNoCgo }

// StreamOf fails: built without cgo.
func StreamOf(device int, h uintptr) (*Stream, error) { return nil, errNoCgo }

// LaunchHostFunc fails without cgo.
func (s *Stream) LaunchHostFunc(fn, arg uintptr) error { return errNoCgo }

// Event is a CUDA event (none without cgo).
type Event struct{}

// NewEvent fails without cgo.
func NewEvent(device int) (*Event, error) { return nil, errNoCgo }

// NewTimingEvent fails without cgo.
func NewTimingEvent(device int) (*Event, error) { return nil, errNoCgo }

// ElapsedMs fails without cgo.
func (e *Event) ElapsedMs(end *Event) (float32, error) { return 0, errNoCgo }

// NewBlockingEvent fails without cgo.
func NewBlockingEvent(device int) (*Event, error) { return nil, errNoCgo }

// Handle is 0 without cgo.
func (e *Event) Handle() uintptr { return 0 }

// Record fails without cgo.
func (e *Event) Record(s *Stream) error { return errNoCgo }

// Query fails without cgo.
func (e *Event) Query() (bool, error) { return false, errNoCgo }

// Synchronize fails without cgo.
func (e *Event) Synchronize() error { return errNoCgo }

// Destroy fails without cgo.
func (e *Event) Destroy() error { return errNoCgo }
