//go:build cgo

package nccl

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

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/internal/dl"
)

type library struct {
	c       *C.gdnc_lib
	path    string
	version int // e.g. 21903 for 2.19.3
}

type state struct {
	lib *library
	err error
}

var loaded = dl.Lazy[state]{Load: load}

func get() *state { return loaded.Get() }

// Reload forgets the library loaded so far and loads one again (after
// cuda.Reload, or after setting EnvLibrary). For tests.
func Reload() { loaded.Reload() }

func load() *state {
	if ok, why := cuda.Available(); !ok {
		return &state{err: fmt.Errorf("%w: no CUDA: %s", ErrUnavailable, why)}
	}
	eagerConnect()
	var syms [6]uintptr
	for i, name := range []string{"cudaSetDevice", "cudaFree", "cudaEventRecord", "cudaStreamWaitEvent", "cudaMemcpyAsync", "cudaLaunchHostFunc"} {
		p, err := cuda.Symbol(name)
		if err != nil {
			return &state{err: fmt.Errorf("%w: %v", ErrUnavailable, err)}
		}
		syms[i] = p
	}
	var tried []string
	for _, name := range dl.Candidates(EnvLibrary, append(WheelLibraries(), DefaultLibraries...)) {
		cname := C.CString(name)
		var buf [512]C.char
		c := C.gdnc_open(cname, C.uintptr_t(syms[0]), C.uintptr_t(syms[1]), C.uintptr_t(syms[2]),
			C.uintptr_t(syms[3]), C.uintptr_t(syms[4]), C.uintptr_t(syms[5]), &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cname))
		if c == nil {
			tried = append(tried, C.GoString(&buf[0]))
			continue
		}
		l := &library{c: c, path: name}
		var v C.int
		if r := C.gdnc_version(c, &v); r != 0 {
			return &state{err: fmt.Errorf("%w: %s loaded, but %v", ErrUnavailable, name, l.err("ncclGetVersion", r, 0))}
		}
		l.version = int(v)
		return &state{lib: l}
	}
	msg := dl.Unloadable("NCCL", tried, EnvLibrary, "a libnccl.so.2 (the pip packages nvidia-nccl-cu12 and nvidia-nccl-cu13 ship one; it is found in $VIRTUAL_ENV, $CONDA_PREFIX or the environment of a python3 on $PATH)")
	return &state{err: fmt.Errorf("%w: %s", ErrUnavailable, msg)}
}

// lib returns the loaded library or why there is none.
func lib() (*library, error) {
	s := get()
	return s.lib, s.err
}

// err turns a wrapper's result into an error (nil for success).
func (l *library) err(call string, code C.int, comm C.uintptr_t) error {
	if code == ncclSuccess {
		return nil
	}
	if code >= C.GDNC_CUDA_ERROR {
		c := int(code - C.GDNC_CUDA_ERROR)
		return &cuda.Error{Call: call + " (CUDA runtime call)", Code: c, Msg: cuda.ErrorString(c)}
	}
	e := &Error{Call: call, Code: int(code), Msg: C.GoString(C.gdnc_error_string(l.c, code))}
	e.Last = C.GoString(C.gdnc_last_error(l.c, comm))
	return e
}

func (l *library) versionString() string { return versionString(l.version) }

// atLeast reports whether the library is at least version major.minor.
func (l *library) atLeast(major, minor int) bool {
	maj, min, _ := parseVersion(l.version)
	return maj > major || maj == major && min >= minor
}

// Version returns the NCCL version ("2.19.3") and the library's name.
func Version() (version, path string, err error) {
	l, err := lib()
	if err != nil {
		return "", "", err
	}
	return l.versionString(), l.path, nil
}

// Usable reports whether the nccl backend can run here: a CUDA runtime with
// at least one device, and libnccl. When not, reason says what is missing.
func Usable() (ok bool, reason string) {
	if _, err := lib(); err != nil {
		return false, strings.TrimPrefix(err.Error(), ErrUnavailable.Error()+": ")
	}
	return true, ""
}

// UsableFor is Usable for a host that runs localSize ranks: NCCL needs one
// GPU per rank (it refuses two ranks of one host on one GPU). A process that
// sees one GPU and was given it alone (CUDA_VISIBLE_DEVICES or
// NVIDIA_VISIBLE_DEVICES names one device) counts as having its own; with
// EnvShareGPU=1 (and NCCL_HOSTID set) ranks share the GPUs.
func UsableFor(localSize int) (ok bool, reason string) {
	if ok, why := Usable(); !ok {
		return false, why
	}
	n := cuda.DeviceCount()
	if localSize <= n || n == 1 && onePerProcess() {
		return true, ""
	}
	if share, why := shareGPU(); share {
		return why == "", why
	}
	return false, fmt.Sprintf("%d ranks on this host but %d GPU(s); %s", localSize, n, oneGPUPerRank)
}

// GPUOf names the GPU a rank of cfg would use (the device deviceFor
// gives it): its host, as NCCL tells hosts apart (EnvHostID where set,
// else the host name), and its PCI bus id. Two ranks with one name would
// share a GPU, which NCCL refuses ("Duplicate GPU detected"): the auto
// backend compares them, as a process that sees one GPU through a
// container-wide NVIDIA_VISIBLE_DEVICES does not have it alone.
func GPUOf(cfg comm.Config) (string, error) {
	dev, err := deviceFor(cfg)
	if err != nil {
		return "", err
	}
	bus, err := cuda.PCIBusID(dev)
	if err != nil {
		return "", fmt.Errorf("nccl: rank %d: GPU %d: %w", cfg.Rank, dev, err)
	}
	host := strings.TrimSpace(os.Getenv(EnvHostID))
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("nccl: rank %d: host name: %w", cfg.Rank, err)
		}
	}
	return host + "/" + strings.ToLower(bus), nil
}

// SharedGPU says why ranks a and b cannot both use NCCL: GPUOf gave
// both gpu.
func SharedGPU(a, b int, gpu string) string {
	return fmt.Sprintf("ranks %d and %d would both use GPU %s; %s", a, b, gpu, oneGPUPerRank)
}

func (l *library) uniqueID(device int) ([]byte, error) {
	id := make([]byte, uniqueIDBytes)
	if r := C.gdnc_unique_id(l.c, C.int(device), (*C.char)(unsafe.Pointer(&id[0]))); r != 0 {
		return nil, l.err("ncclGetUniqueId", r, 0)
	}
	return id, nil
}
