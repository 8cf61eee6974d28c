//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#cgo CFLAGS: -I${SRCDIR}/../../internal/dl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/gdist/gdist/internal/dl"
)

type library struct {
	c       *C.gdcu_lib
	path    string
	devices int
	driver  int // cudaDriverGetVersion, e.g. 12040
	runtime int // cudaRuntimeGetVersion
}

// state is what one load attempt found: a library (possibly with no
// devices) and, when CUDA is not usable, why.
type state struct {
	lib    *library
	reason string // "" when usable
}

var loaded = dl.Lazy[state]{Load: load}

func get() *state { return loaded.Get() }

// Reload forgets the library loaded so far (it stays mapped: unloading the
// CUDA runtime is unsafe) and loads one again, reading EnvLibrary anew. It is
// meant for tests and for programs that set EnvLibrary after start; memory,
// streams and events from the previous library must not be used with the
// new one.
func Reload() { loaded.Reload() }

// load tries the candidates in order (dl.Candidates: EnvLibrary alone when
// it is set, else WheelLibraries then DefaultLibraries) and keeps the first
// runtime that sees a device. A runtime that loads but sees none (a CUDA 13
// wheel on an older driver says cudaErrorInsufficientDriver; a machine with
// no GPU, cudaErrorNoDevice) does not end the search. If none sees a device,
// the first that loaded is kept (Symbol and Loaded use it) and the reason
// names every library tried and what each said. With EnvLibrary set only
// that library is tried, so one that sees no device is reported as such,
// naming the variable; no other runtime stands in for it. Runtimes loaded
// but not kept stay mapped (unloading a CUDA runtime is unsafe).
func load() *state {
	var tried []string // every candidate, with what it said
	var first *library // the first that loaded (and sees no device)
	for _, name := range dl.Candidates(EnvLibrary, append(WheelLibraries(), DefaultLibraries...)) {
		cname := C.CString(name)
		var buf [512]C.char
		c := C.gdcu_open(cname, &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cname))
		if c == nil {
			tried = append(tried, C.GoString(&buf[0]))
			continue
		}
		l := &library{c: c, path: name}
		var drv, rt C.int
		C.gdcu_versions(c, &drv, &rt)
		l.driver, l.runtime = int(drv), int(rt)
		var n C.int
		var why string
		if e := C.gdcu_device_count(c, &n); e != 0 {
			why = fmt.Sprintf("%s loaded, but %v", name, l.err("cudaGetDeviceCount", e))
		} else if n == 0 {
			why = name + " loaded, but it reports no CUDA device"
		} else {
			l.devices = int(n)
			return &state{lib: l}
		}
		tried = append(tried, why)
		if first == nil {
			first = l
		}
	}
	if first != nil {
		if os.Getenv(EnvLibrary) != "" { // tried is this one library
			return &state{lib: first, reason: tried[0] + " (" + EnvLibrary + " names it, so no other CUDA runtime was tried)"}
		}
		return &state{lib: first, reason: "no CUDA runtime sees a device (" + strings.Join(tried, "; ") + ")"}
	}
	reason := dl.Unloadable("the CUDA runtime", tried, EnvLibrary, "a libcudart.so (the pip packages nvidia-cuda-runtime-cu12 and nvidia-cuda-runtime for CUDA 13 ship one; they are found in $VIRTUAL_ENV, $CONDA_PREFIX or the environment of a python3 on $PATH)")
	if C.gdcu_driver_present() != 0 {
		reason += "; the NVIDIA driver (libcuda.so.1) is present"
	} else {
		reason += "; no NVIDIA driver (libcuda.so.1) either"
	}
	return &state{reason: reason}
}

func (l *library) err(call string, code C.int) error {
	if code == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(code),
		Name: C.GoString(C.gdcu_error_name(l.c, code)),
		Msg:  C.GoString(C.gdcu_error_string(l.c, code))}
}

// lib returns the loaded library, or an error wrapping ErrUnavailable.
func lib() (*library, error) {
	s := get()
	if s.lib == nil || s.lib.devices == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, s.reason)
	}
	return s.lib, nil
}

// Available reports whether a CUDA runtime is loaded and sees at least one
// device; when not, reason says why, on one line: every library tried and
// what each said (cannot be opened, or loaded but cudaGetDeviceCount failed
// or found no device).
func Available() (ok bool, reason string) {
	s := get()
	return s.reason == "", s.reason
}

// DeviceCount is the number of CUDA devices (0 when CUDA is unavailable).
func DeviceCount() int {
	s := get()
	if s.lib == nil {
		return 0
	}
	return s.lib.devices
}

// Info describes the loaded runtime in one line for logs: library, runtime
// and driver versions and the devices' PCI bus ids; or why CUDA is not
// available.
func Info() string {
	s := get()
	if s.reason != "" {
		return "no CUDA: " + s.reason
	}
	l := s.lib
	var ids []string
	for d := 0; d < l.devices; d++ {
		id, err := PCIBusID(d)
		if err != nil {
			id = "?"
		}
		ids = append(ids, id)
	}
	return fmt.Sprintf("%s (runtime %s, driver %s), %d device(s): %s", l.path,
		version(l.runtime), version(l.driver), l.devices, strings.Join(ids, " "))
}

// ErrorString is the runtime's description of a cudaError_t value.
func ErrorString(code int) string {
	s := get()
	if s.lib == nil {
		return fmt.Sprintf("cudaError %d", code)
	}
	return C.GoString(C.gdcu_error_string(s.lib.c, C.int(code)))
}

// Symbol returns the address of a function of the loaded CUDA runtime (0 if
// it has none), for packages such as comm/nccl that call the runtime from
// their own C code. It works when a runtime is loaded even if it sees no
// device; it fails (wrapping ErrUnavailable) when none could be loaded.
func Symbol(name string) (uintptr, error) {
	s := get()
	if s.lib == nil {
		return 0, fmt.Errorf("%w: %s", ErrUnavailable, s.reason)
	}
	l := s.lib
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return uintptr(C.gdcu_sym(l.c, cname)), nil
}

// Loaded names the CUDA runtime library that was loaded, whether or not it
// sees a device ("" if none could be; when none sees a device, the first
// that loaded), and the optional functions it lacks
// (cudaGetErrorName, cudaLaunchHostFunc, ...; each missing one disables only
// what needs it).
func Loaded() (path string, missing []string) {
	s := get()
	if s.lib == nil {
		return "", nil
	}
	c := s.lib.c
	for _, o := range []struct {
		name string
		ok   bool
	}{
		{"cudaGetErrorName", c.getErrorName != nil},
		{"cudaGetLastError", c.getLastError != nil},
		{"cudaLaunchHostFunc", c.launchHostFunc != nil},
		{"cudaDriverGetVersion", c.driverGetVersion != nil},
		{"cudaRuntimeGetVersion", c.runtimeGetVersion != nil},
		{"cudaDeviceGetPCIBusId", c.deviceGetPCIBusId != nil},
		{"cudaDeviceSynchronize", c.deviceSynchronize != nil},
	} {
		if !o.ok {
			missing = append(missing, o.name)
		}
	}
	return s.lib.path, missing
}

// PCIBusID returns the PCI bus id of device ("0000:3b:00.0").
func PCIBusID(device int) (string, error) {
	l, err := lib()
	if err != nil {
		return "", err
	}
	var buf [64]C.char
	if e := C.gdcu_pci_bus_id(l.c, C.int(device), &buf[0], C.int(len(buf))); e != 0 {
		return "", l.err("cudaDeviceGetPCIBusId", e)
	}
	return C.GoString(&buf[0]), nil
}
