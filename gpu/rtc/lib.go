//go:build cgo

package rtc

/*
#cgo LDFLAGS: -ldl
#cgo CFLAGS: -I${SRCDIR}/../../internal/dl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/internal/dl"
)

type nvrtcLib struct {
	c            *C.gdrt_nvrtc
	path         string
	major, minor int
	archs        []int // nil: it cannot say

	incOnce     sync.Once
	include     []string // CUDA's include directories given to every compilation
	includeNote string   // why none, or what is odd about them
}

// includes finds the CUDA include directories once (includeSearch).
func (l *nvrtcLib) includes() ([]string, string) {
	l.incOnce.Do(func() { l.include, l.includeNote = includeSearch(l.path, l.major) })
	return l.include, l.includeNote
}

type driverLib struct {
	c       *C.gdrt_drv
	path    string
	version int // cuDriverGetVersion, e.g. 12040
}

type nvrtcState struct {
	lib    *nvrtcLib
	reason string
}

type driverState struct {
	lib    *driverLib
	reason string
}

var (
	nvrtcLoaded  = dl.Lazy[nvrtcState]{Load: loadNVRTC}
	driverLoaded = dl.Lazy[driverState]{Load: loadDriver}
)

// Reload forgets the libraries loaded so far (they stay mapped) and the
// compiled and loaded kernels, and loads the libraries again, reading
// EnvNVRTC and EnvDriver anew: for tests. Modules and Functions from before
// must not be used.
func Reload() {
	nvrtcLoaded.Reload()
	driverLoaded.Reload()
	cacheMu.Lock()
	images = map[string]*imageEntry{}
	modules = map[moduleKey]*moduleEntry{}
	cacheMu.Unlock()
}

func openNVRTC(name string) (*nvrtcLib, string) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var buf [512]C.char
	c := C.gdrt_nvrtc_open(cname, &buf[0], C.size_t(len(buf)))
	if c == nil {
		return nil, C.GoString(&buf[0])
	}
	l := &nvrtcLib{c: c, path: name}
	var maj, min C.int
	if r := C.gdrt_nvrtc_version(c, &maj, &min); r != 0 {
		return nil, fmt.Sprintf("%s loaded, but nvrtcVersion: %s", name, C.GoString(C.gdrt_nvrtc_error(c, r)))
	}
	l.major, l.minor = int(maj), int(min)
	var archs [128]C.int
	if n := C.gdrt_nvrtc_archs(c, &archs[0], C.int(len(archs))); n > 0 {
		for _, a := range archs[:n] {
			l.archs = append(l.archs, int(a))
		}
	}
	return l, ""
}

// loadNVRTC tries EnvNVRTC alone when set, else NVRTCWheels then
// DefaultNVRTC, and keeps the first that loads. NVRTC needs no GPU.
func loadNVRTC() *nvrtcState {
	var tried []string
	for _, name := range dl.Candidates(EnvNVRTC, append(NVRTCWheels(), DefaultNVRTC...)) {
		l, why := openNVRTC(name)
		if l != nil {
			return &nvrtcState{lib: l}
		}
		tried = append(tried, why)
	}
	reason := dl.Unloadable("NVRTC (CUDA's run-time compiler)", tried, EnvNVRTC, "a libnvrtc.so (the pip packages nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvrtc for CUDA 13 ship one, PyTorch's wheels bring them; they are found in $VIRTUAL_ENV, $CONDA_PREFIX or the environment of a python3 on $PATH)")
	if os.Getenv(EnvNVRTC) != "" {
		reason += " (" + EnvNVRTC + " names it, so no other NVRTC was tried)"
	}
	return &nvrtcState{reason: reason}
}

// loadDriver needs gpu/cuda's runtime (its cudaSetDevice and cudaFree make
// a device's primary context current), then loads libcuda and runs cuInit.
func loadDriver() *driverState {
	if ok, why := cuda.Available(); !ok {
		return &driverState{reason: "no CUDA: " + why}
	}
	var syms [2]uintptr
	for i, name := range []string{"cudaSetDevice", "cudaFree"} {
		p, err := cuda.Symbol(name)
		if err != nil || p == 0 {
			return &driverState{reason: fmt.Sprintf("the CUDA runtime has no %s (%v)", name, err)}
		}
		syms[i] = p
	}
	var tried []string
	for _, name := range dl.Candidates(EnvDriver, DefaultDriver) {
		cname := C.CString(name)
		var buf [512]C.char
		c := C.gdrt_drv_open(cname, C.uintptr_t(syms[0]), C.uintptr_t(syms[1]), &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cname))
		if c == nil {
			tried = append(tried, C.GoString(&buf[0]))
			continue
		}
		l := &driverLib{c: c, path: name}
		var v C.int
		if r := C.gdrt_drv_init(c, &v); r != 0 {
			tried = append(tried, fmt.Sprintf("%s loaded, but %v", name, l.err("cuInit", r)))
			continue
		}
		l.version = int(v)
		return &driverState{lib: l}
	}
	reason := dl.Unloadable("the CUDA driver API", tried, EnvDriver, "the NVIDIA driver's libcuda.so.1")
	if os.Getenv(EnvDriver) != "" {
		reason += " (" + EnvDriver + " names it, so no other driver library was tried)"
	}
	return &driverState{reason: reason}
}

func nvrtc() (*nvrtcLib, error) {
	s := nvrtcLoaded.Get()
	if s.lib == nil {
		return nil, fmt.Errorf("%w: %s", cuda.ErrUnavailable, s.reason)
	}
	return s.lib, nil
}

func driver() (*driverLib, error) {
	s := driverLoaded.Get()
	if s.lib == nil {
		return nil, fmt.Errorf("%w: %s", cuda.ErrUnavailable, s.reason)
	}
	return s.lib, nil
}

// Available reports whether kernels can be compiled and run: NVRTC and the
// CUDA driver loaded, and a CUDA runtime sees a device. When not, reason
// says why on one line: every library tried and what each said.
func Available() (ok bool, reason string) {
	var why []string
	if s := nvrtcLoaded.Get(); s.lib == nil {
		why = append(why, s.reason)
	}
	if s := driverLoaded.Get(); s.lib == nil {
		why = append(why, s.reason)
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// Info describes NVRTC and the driver in one line for logs, or why they
// are missing.
func Info() string {
	var parts []string
	if s := nvrtcLoaded.Get(); s.lib != nil {
		inc, note := s.lib.includes()
		headers := "CUDA headers " + strings.Join(inc, ":")
		if inc == nil {
			headers = "no CUDA headers"
		}
		if note != "" {
			headers += ": " + note
		}
		parts = append(parts, fmt.Sprintf("NVRTC %d.%d (%s; %s)", s.lib.major, s.lib.minor, s.lib.path, headers))
	} else {
		parts = append(parts, "no NVRTC: "+s.reason)
	}
	if s := driverLoaded.Get(); s.lib != nil {
		parts = append(parts, fmt.Sprintf("driver CUDA %d.%d (%s)", s.lib.version/1000, s.lib.version%1000/10, s.lib.path))
	} else {
		parts = append(parts, "no driver API: "+s.reason)
	}
	return strings.Join(parts, "; ")
}

func (l *driverLib) err(call string, code C.int) error {
	if code == 0 {
		return nil
	}
	if code >= C.GDRT_CUDA_ERROR {
		c := int(code - C.GDRT_CUDA_ERROR)
		return &cuda.Error{Call: call + " (making the device current)", Code: c, Msg: cuda.ErrorString(c)}
	}
	return &DriverError{Call: call, Code: int(code), Name: C.GoString(C.gdrt_drv_error_name(l.c, code)),
		Msg: C.GoString(C.gdrt_drv_error(l.c, code))}
}

// Arch is the compute capability of device (9, 0 for an H100).
func Arch(device int) (major, minor int, err error) {
	l, err := driver()
	if err != nil {
		return 0, 0, err
	}
	var maj, min C.int
	if err := l.err("cuDeviceGetAttribute", C.gdrt_arch(l.c, C.int(device), &maj, &min)); err != nil {
		return 0, 0, fmt.Errorf("%w (cuda:%d)", err, device)
	}
	return int(maj), int(min), nil
}

// Compiler is an NVRTC library. It needs no GPU: a machine without one can
// check that kernels compile for any architecture the library knows.
type Compiler struct{ l *nvrtcLib }

// DefaultCompiler is the NVRTC the package loaded (see the package
// documentation for the search).
func DefaultCompiler() (*Compiler, error) {
	l, err := nvrtc()
	if err != nil {
		return nil, err
	}
	return &Compiler{l}, nil
}

// OpenCompiler loads the NVRTC at path (a path or a name for dlopen). It
// stays loaded.
func OpenCompiler(path string) (*Compiler, error) {
	l, why := openNVRTC(path)
	if l == nil {
		return nil, fmt.Errorf("%w: cannot load NVRTC (%s)", cuda.ErrUnavailable, why)
	}
	return &Compiler{l}, nil
}

// Path is the library's name as loaded.
func (c *Compiler) Path() string { return c.l.path }

// Version is NVRTC's version (12, 4).
func (c *Compiler) Version() (major, minor int) { return c.l.major, c.l.minor }

// Include is CUDA's include directories that every compilation gets
// (--include-path, after the caller's options), so that kernels can
// #include <mma.h> (nvcuda::wmma), <cuda_fp16.h> and <cuda_bf16.h>, which
// NVRTC does not have built in: EnvInclude, else the directories found
// beside the library or in the usual places (see the package
// documentation). dirs is nil when none was found; note then says why,
// or else anything odd about them (another CUDA version than NVRTC's).
func (c *Compiler) Include() (dirs []string, note string) {
	d, n := c.l.includes()
	return append([]string(nil), d...), n
}

// Archs are the architectures it compiles for (50 for sm_50 ...), nil when
// it cannot say (before CUDA 11.2).
func (c *Compiler) Archs() []int { return append([]int(nil), c.l.archs...) }

// Target is the architecture to compile for a device of compute
// capability major.minor: "sm_XY" (a cubin) when the compiler knows it and
// makes cubins, else "compute_NN" (PTX) for the newest virtual
// architecture it knows that the device runs.
func (c *Compiler) Target(major, minor int) string {
	return target(major, minor, c.l.archs, c.l.c.cubin != nil)
}

// Compile compiles the CUDA C++ src (a program called name, as the
// compiler's messages name it) for arch ("sm_90": a cubin; "compute_90":
// PTX) with the options opts (NVRTC's: "-DNAME=1", "--use_fast_math", ...).
// Kernels must be extern "C" to be found by name. A failure is a
// *CompileError carrying the compiler's log.
func (c *Compiler) Compile(name, src, arch string, opts ...string) (*Image, error) {
	n, cubin := archOf(arch)
	if n == 0 {
		return nil, fmt.Errorf("rtc: architecture %q: want sm_XY or compute_XY", arch)
	}
	if cubin && c.l.c.cubin == nil {
		return nil, fmt.Errorf("rtc: %s cannot make cubins (NVRTC before 11.1): compile for compute_%d", c.l.path, n)
	}
	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	inc, note := c.l.includes()
	for _, d := range inc {
		all = append(all, "--include-path="+d)
	}
	copts := make([]*C.char, len(all))
	for i, o := range all {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var stage C.int
	var log, out *C.char
	var outLen C.size_t
	cb := C.int(0)
	if cubin {
		cb = 1
	}
	r := C.gdrt_compile(c.l.c, csrc, cname, C.int(len(copts)), &copts[0], cb, &stage, &log, &out, &outLen)
	defer C.free(unsafe.Pointer(log))
	defer C.free(unsafe.Pointer(out))
	img := &Image{Name: name, Arch: arch}
	if log != nil {
		img.Log = C.GoString(log)
	}
	if r != 0 {
		call := [...]string{"nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetCUBIN"}[stage]
		if stage == 2 && !cubin {
			call = "nvrtcGetPTX"
		}
		ce := &CompileError{Program: name, Arch: arch, Call: call, Code: int(r),
			Msg: C.GoString(C.gdrt_nvrtc_error(c.l.c, r)), Log: img.Log}
		if inc == nil && strings.Contains(img.Log, "source file") {
			ce.Hint = note // a header not found, and no CUDA include directory
		}
		return nil, ce
	}
	img.Data = C.GoBytes(unsafe.Pointer(out), C.int(outLen))
	return img, nil
}

// The process's caches: images by what was compiled, modules by device
// and image.
type imageEntry struct {
	once sync.Once
	img  *Image
	err  error
}

type moduleKey struct {
	dev int
	key string
}

type moduleEntry struct {
	once sync.Once
	m    *Module
	err  error
}

var (
	cacheMu sync.Mutex
	images  = map[string]*imageEntry{}
	modules = map[moduleKey]*moduleEntry{}
)

func imageKey(c *Compiler, arch, name, src string, opts []string) string {
	h := sha256.New()
	inc, _ := c.l.includes()
	for _, s := range append(append([]string{c.l.path, fmt.Sprint(c.l.major, c.l.minor), arch, name, src}, opts...), inc...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Compile compiles src for device's architecture with the default
// compiler (Compiler.Target picks sm_XY or compute_NN), once per process
// for each source, options and architecture; with $GDIST_KERNEL_CACHE set,
// images are also kept in that directory and read back by later processes.
func Compile(device int, name, src string, opts ...string) (*Image, error) {
	img, _, err := compile(device, name, src, opts, false)
	return img, err
}

func compile(device int, name, src string, opts []string, fresh bool) (*Image, string, error) {
	c, err := DefaultCompiler()
	if err != nil {
		return nil, "", err
	}
	major, minor, err := Arch(device)
	if err != nil {
		return nil, "", err
	}
	arch := c.Target(major, minor)
	key := imageKey(c, arch, name, src, opts)
	cacheMu.Lock()
	e := images[key]
	if e == nil || fresh {
		e = &imageEntry{}
		images[key] = e
	}
	cacheMu.Unlock()
	first := false
	e.once.Do(func() {
		first = true
		dir := os.Getenv(EnvCache)
		ext := ".ptx"
		if _, cubin := archOf(arch); cubin {
			ext = ".cubin"
		}
		file := ""
		if dir != "" {
			file = filepath.Join(dir, key+ext)
			if b, err := os.ReadFile(file); err == nil && len(b) > 0 && !fresh {
				e.img = &Image{Name: name, Arch: arch, Data: b, FromDisk: true}
				return
			}
		}
		e.img, e.err = c.Compile(name, src, arch, opts...)
		if e.err == nil && file != "" {
			// best effort: a cache that cannot be written only costs time
			if os.MkdirAll(dir, 0o755) == nil {
				tmp := fmt.Sprintf("%s.%d.tmp", file, os.Getpid())
				if os.WriteFile(tmp, e.img.Data, 0o644) == nil {
					os.Rename(tmp, file)
				}
			}
		}
	})
	if e.err != nil {
		return nil, key, e.err
	}
	img := *e.img
	img.FromMemory = !first
	return &img, key, nil
}

// Module is compiled code loaded on one device (cuModuleLoadData into the
// device's primary context, the CUDA runtime's). Modules stay loaded for
// the life of the process. A Module is safe for concurrent use.
type Module struct {
	l     *driverLib
	dev   int
	h     C.uintptr_t
	img   *Image
	mu    sync.Mutex
	funcs map[string]*Function
}

// Load compiles src for device (Compile) and loads it there, once per
// process for each device, source and options: later calls return the
// same Module.
func Load(device int, name, src string, opts ...string) (*Module, error) {
	l, err := driver()
	if err != nil {
		return nil, err
	}
	img, key, err := compile(device, name, src, opts, false)
	if err != nil {
		return nil, err
	}
	cacheMu.Lock()
	mk := moduleKey{device, key}
	e := modules[mk]
	if e == nil {
		e = &moduleEntry{}
		modules[mk] = e
	}
	cacheMu.Unlock()
	e.once.Do(func() {
		e.m, e.err = loadImage(l, device, img)
		if e.err != nil && img.FromDisk { // a stale or damaged cache file: compile afresh
			if img, _, err = compile(device, name, src, opts, true); err != nil {
				e.err = err
				return
			}
			e.m, e.err = loadImage(l, device, img)
		}
	})
	return e.m, e.err
}

// LoadImage loads compiled code on device (not cached: each call loads a
// module).
func LoadImage(device int, img *Image) (*Module, error) {
	l, err := driver()
	if err != nil {
		return nil, err
	}
	return loadImage(l, device, img)
}

func loadImage(l *driverLib, device int, img *Image) (*Module, error) {
	data := img.Data
	if !strings.HasPrefix(img.Arch, "sm_") && (len(data) == 0 || data[len(data)-1] != 0) {
		data = append(append([]byte(nil), data...), 0) // PTX is a C string
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("rtc: %s: an empty image", img.Name)
	}
	p := C.CBytes(data)
	defer C.free(p)
	var h C.uintptr_t
	if err := l.err("cuModuleLoadData", C.gdrt_module_load(l.c, C.int(device), p, &h)); err != nil {
		return nil, fmt.Errorf("%w (%s for %s on cuda:%d)", err, img.Name, img.Arch, device)
	}
	return &Module{l: l, dev: device, h: h, img: img, funcs: map[string]*Function{}}, nil
}

// Device is the module's device.
func (m *Module) Device() int { return m.dev }

// Image is the code the module was loaded from.
func (m *Module) Image() *Image { return m.img }

// Function is a kernel of a module: an extern "C" __global__ function.
type Function struct {
	m      *Module
	h      C.uintptr_t
	name   string
	params []int // each parameter's size in bytes; nil when the driver cannot say
}

// Function looks up the kernel name (extern "C", so its name is not
// mangled). The same name gives the same *Function.
func (m *Module) Function(name string) (*Function, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.funcs[name]; f != nil {
		return f, nil
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var h C.uintptr_t
	if err := m.l.err("cuModuleGetFunction", C.gdrt_function(m.l.c, C.int(m.dev), m.h, cname, &h)); err != nil {
		return nil, fmt.Errorf("%w: kernel %s of %s (declared extern \"C\" __global__?)", err, name, m.img.Name)
	}
	f := &Function{m: m, h: h, name: name}
	for i := 0; ; i++ {
		var off, size C.size_t
		r := C.gdrt_param_info(m.l.c, C.int(m.dev), h, C.size_t(i), &off, &size)
		if r == -1 {
			f.params = nil // the driver cannot say
			break
		}
		if r != 0 {
			if r != C.gdrt_CUDA_ERROR_INVALID_VALUE { // not "no such parameter": it cannot say
				f.params = nil
			} else if f.params == nil {
				f.params = []int{} // no parameters
			}
			break
		}
		f.params = append(f.params, int(size))
	}
	m.funcs[name] = f
	return f, nil
}

// Name is the kernel's name.
func (f *Function) Name() string { return f.name }

// Params is the number of the kernel's parameters, when the driver can say
// (cuFuncGetParamInfo, CUDA 12.4 and later); then Launch checks each
// argument's size against its parameter.
func (f *Function) Params() (n int, ok bool) { return len(f.params), f.params != nil }

// Launch queues the kernel on s (nil: the legacy default stream) with the
// shape c and the arguments args, in the kernel's parameter order. Each
// argument is passed by value: a device address as uintptr, scalars as
// int32, uint32, int64, uint64, float32 or float64 (a Go int is refused:
// its size must match the kernel's parameter). The arguments are copied at
// once; the kernel runs later, in order with s's other work. Bad shapes,
// argument counts or sizes are errors before anything is queued.
func (f *Function) Launch(s *cuda.Stream, c Config, args ...any) error {
	g, b := c.Grid.norm(), c.Block.norm()
	for _, v := range []int{g.X, g.Y, g.Z, b.X, b.Y, b.Z} {
		if v < 1 || v > 1<<31-1 {
			return fmt.Errorf("rtc: kernel %s: grid %v, block %v", f.name, c.Grid, c.Block)
		}
	}
	if c.Shared < 0 || c.Shared > 1<<31-1 {
		return fmt.Errorf("rtc: kernel %s: %d bytes of shared memory", f.name, c.Shared)
	}
	var sh uintptr
	if s != nil {
		if s.Device() != f.m.dev {
			return fmt.Errorf("rtc: kernel %s of cuda:%d launched on a stream of cuda:%d", f.name, f.m.dev, s.Device())
		}
		sh = s.Handle()
	}
	if f.params != nil && len(args) != len(f.params) {
		return fmt.Errorf("rtc: kernel %s takes %d arguments, got %d", f.name, len(f.params), len(args))
	}
	n := len(args)
	mem := C.calloc(C.size_t(max(n, 1)), 8+C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(mem)
	slots := unsafe.Slice((*uint64)(mem), max(n, 1))
	ptrs := unsafe.Slice((*unsafe.Pointer)(unsafe.Add(mem, 8*max(n, 1))), max(n, 1))
	for i, a := range args {
		size := 8
		switch v := a.(type) {
		case uintptr:
			slots[i] = uint64(v)
		case int32:
			*(*int32)(unsafe.Pointer(&slots[i])) = v
			size = 4
		case uint32:
			*(*uint32)(unsafe.Pointer(&slots[i])) = v
			size = 4
		case float32:
			*(*float32)(unsafe.Pointer(&slots[i])) = v
			size = 4
		case int64:
			slots[i] = uint64(v)
		case uint64:
			slots[i] = v
		case float64:
			*(*float64)(unsafe.Pointer(&slots[i])) = v
		case int, uint:
			return fmt.Errorf("rtc: kernel %s: argument %d is a Go %T: pass int32 or int64, the size of the kernel's parameter", f.name, i, a)
		default:
			return fmt.Errorf("rtc: kernel %s: argument %d is a %T: pass a device address as uintptr, or int32, uint32, int64, uint64, float32, float64", f.name, i, a)
		}
		if f.params != nil && f.params[i] != size {
			return fmt.Errorf("rtc: kernel %s: argument %d is a %T (%d bytes), its parameter is %d bytes", f.name, i, a, size, f.params[i])
		}
		ptrs[i] = unsafe.Pointer(&slots[i])
	}
	var pp *unsafe.Pointer
	if n > 0 {
		pp = &ptrs[0]
	}
	r := C.gdrt_launch(f.m.l.c, C.int(f.m.dev), f.h, C.uint(g.X), C.uint(g.Y), C.uint(g.Z), C.uint(b.X), C.uint(b.Y), C.uint(b.Z),
		C.uint(c.Shared), C.uintptr_t(sh), pp)
	if err := f.m.l.err("cuLaunchKernel", r); err != nil {
		return fmt.Errorf("%w: kernel %s, grid %v, block %v", err, f.name, g, b)
	}
	return nil
}
