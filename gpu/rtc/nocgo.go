//go:build !cgo

package rtc

// Without cgo there is no way to load NVRTC or the driver: everything
// reports them as unavailable, so the packages above still build
// (CGO_ENABLED=0).

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
)

const noCgo = "built without cgo (CGO_ENABLED=0), so NVRTC and the CUDA driver cannot be loaded"

var errNoCgo = fmt.Errorf("%w: %s", cuda.ErrUnavailable, noCgo)

// Reload does nothing without cgo.
func Reload() {}

// Available is false without cgo.
func Available() (ok bool, reason string) { return false, noCgo }

// Info says that NVRTC and the driver are not available.
func Info() string { return "no NVRTC or driver API: " + noCgo }

// Arch fails without cgo.
func Arch(device int) (major, minor int, err error) { return 0, 0, errNoCgo }

// Compiler is an NVRTC library (none without cgo).
type Compiler struct{}

// DefaultCompiler fails without cgo.
func DefaultCompiler() (*Compiler, error) { return nil, errNoCgo }

// OpenCompiler fails without cgo.
func OpenCompiler(path string) (*Compiler, error) { return nil, errNoCgo }

// Path is empty without cgo.
func (c *Compiler) Path() string { return "" }

// Version is 0.0 without cgo.
func (c *Compiler) Version() (major, minor int) { return 0, 0 }

// Archs is nil without cgo.
func (c *Compiler) Archs() []int { return nil }

// Include is nil without cgo.
func (c *Compiler) Include() (dirs []string, note string) { return nil, noCgo }

// Target picks sm_XY without cgo (nothing compiles anyway).
func (c *Compiler) Target(major, minor int) string { return target(major, minor, nil, true) }

// Compile fails without cgo.
func (c *Compiler) Compile(name, src, arch string, opts ...string) (*Image, error) {
	return nil, errNoCgo
}

// Compile fails without cgo.
func Compile(device int, name, src string, opts ...string) (*Image, error) { return nil, errNoCgo }

// Module is a loaded module (none without cgo).
type Module struct{ dev int }

// Load fails without cgo.
func Load(device int, name, src string, opts ...string) (*Module, error) { return nil, errNoCgo }

// LoadImage fails without cgo.
func LoadImage(device int, img *Image) (*Module, error) { return nil, errNoCgo }

// Device is the module's device.
func (m *Module) Device() int { return m.dev }

// Image is nil without cgo.
func (m *Module) Image() *Image { return nil }

// Function is a kernel (none without cgo).
type Function struct{ name string }

// Function fails without cgo.
func (m *Module) Function(name string) (*Function, error) { return nil, errNoCgo }

// Name is the kernel's name.
func (f *Function) Name() string { return f.name }

// Params is unknown without cgo.
func (f *Function) Params() (n int, ok bool) { return 0, false }

// Launch fails without cgo.
func (f *Function) Launch(s *cuda.Stream, c Config, args ...any) error { return errNoCgo }
