//go:build cgo

package cublas

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
	"sync"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/internal/dl"
)

type library struct {
	c       *C.gdcb_lib
	path    string
	version string // "12.4.5", or "" when the library cannot say
}

type state struct {
	lib    *library
	reason string // "" when usable
}

var loaded = dl.Lazy[state]{Load: load}

// Reload forgets the library loaded so far (it stays mapped) and loads one
// again, reading EnvLibrary anew: for tests, and for programs that set it
// after start. Handles from the previous library must not be used.
func Reload() { loaded.Reload() }

// load needs a CUDA runtime with a device (gpu/cuda's: the wrappers make a
// device current through it), then tries the candidates in order
// (EnvLibrary alone when set, else WheelLibraries then DefaultLibraries) and
// keeps the first that loads with every function gdist calls.
func load() *state {
	if ok, why := cuda.Available(); !ok {
		return &state{reason: "no CUDA: " + why}
	}
	var syms [2]uintptr
	for i, name := range []string{"cudaSetDevice", "cudaFree"} {
		p, err := cuda.Symbol(name)
		if err != nil || p == 0 {
			return &state{reason: fmt.Sprintf("the CUDA runtime has no %s (%v)", name, err)}
		}
		syms[i] = p
	}
	var tried []string
	for _, name := range dl.Candidates(EnvLibrary, append(WheelLibraries(), DefaultLibraries...)) {
		cname := C.CString(name)
		var buf [512]C.char
		c := C.gdcb_open(cname, C.uintptr_t(syms[0]), C.uintptr_t(syms[1]), &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cname))
		if c == nil {
			tried = append(tried, C.GoString(&buf[0]))
			continue
		}
		l := &library{c: c, path: name}
		var maj, min, patch C.int
		if C.gdcb_version(c, &maj, &min, &patch) == 0 && maj > 0 {
			l.version = fmt.Sprintf("%d.%d.%d", maj, min, patch)
		}
		return &state{lib: l}
	}
	reason := dl.Unloadable("cuBLAS", tried, EnvLibrary, "a libcublas.so (the pip packages nvidia-cublas-cu12 and nvidia-cublas for CUDA 13 ship one, PyTorch's wheels bring them; they are found in $VIRTUAL_ENV, $CONDA_PREFIX or the environment of a python3 on $PATH)")
	if os.Getenv(EnvLibrary) != "" {
		reason += " (" + EnvLibrary + " names it, so no other cuBLAS was tried)"
	}
	return &state{reason: reason}
}

func lib() (*library, error) {
	s := loaded.Get()
	if s.lib == nil {
		return nil, fmt.Errorf("%w: %s", cuda.ErrUnavailable, s.reason)
	}
	return s.lib, nil
}

// Available reports whether cuBLAS is loaded (and a CUDA runtime with a
// device is there); when not, reason says why on one line: every library
// tried and what each said.
func Available() (ok bool, reason string) {
	s := loaded.Get()
	return s.lib != nil, s.reason
}

// Loaded names the cuBLAS library loaded ("" if none) and its version
// ("13.0.2"; "" when the library cannot say).
func Loaded() (path, version string) {
	s := loaded.Get()
	if s.lib == nil {
		return "", ""
	}
	return s.lib.path, s.lib.version
}

// Info describes the loaded cuBLAS in one line for logs, or why there is
// none.
func Info() string {
	s := loaded.Get()
	if s.lib == nil {
		return "no cuBLAS: " + s.reason
	}
	v := s.lib.version
	if v == "" {
		v = "version unknown"
	}
	return fmt.Sprintf("cuBLAS %s (%s)", v, s.lib.path)
}

// err turns a wrapper's result into an error (nil for success).
func (l *library) err(call string, code C.int) error {
	if code == 0 {
		return nil
	}
	if code >= C.GDCB_CUDA_ERROR {
		c := int(code - C.GDCB_CUDA_ERROR)
		return &cuda.Error{Call: call + " (making the device current)", Code: c, Msg: cuda.ErrorString(c)}
	}
	s := int(code)
	name := C.GoString(C.gdcb_status_name(l.c, code))
	if name == "" {
		name = statusNames[s]
	}
	msg := C.GoString(C.gdcb_status_string(l.c, code))
	if msg == "" {
		msg = "failed"
	}
	return &Error{Call: call, Status: s, Name: name, Msg: msg}
}

// Handle is a cuBLAS handle bound to one device and one stream: every
// product it computes is queued on that stream, asynchronously to the
// caller (its inputs must stay allocated, and its output unread, until the
// stream has done it). A Handle is safe for concurrent use; products
// issued from several goroutines run on the stream in the order the calls
// took its lock. Make one per stream and keep it: creating a handle costs
// a few milliseconds and some device memory.
type Handle struct {
	mu     sync.Mutex
	l      *library
	h      C.uintptr_t
	dev    int
	stream *cuda.Stream
	math   Math
}

// New makes a handle on device whose work goes on s (nil: the legacy
// default stream). s must be a stream of device. Its math mode is
// DefaultMath (no TF32).
func New(device int, s *cuda.Stream) (*Handle, error) {
	l, err := lib()
	if err != nil {
		return nil, err
	}
	var sh uintptr
	if s != nil {
		if s.Device() != device {
			return nil, fmt.Errorf("cublas: a handle on cuda:%d with a stream of cuda:%d", device, s.Device())
		}
		sh = s.Handle()
	}
	var h C.uintptr_t
	if err := l.err("cublasCreate", C.gdcb_create(l.c, C.int(device), C.uintptr_t(sh), &h)); err != nil {
		return nil, fmt.Errorf("%w (cuda:%d)", err, device)
	}
	return &Handle{l: l, h: h, dev: device, stream: s}, nil
}

// Device is the handle's device.
func (h *Handle) Device() int { return h.dev }

// Stream is the handle's stream (nil: the legacy default stream).
func (h *Handle) Stream() *cuda.Stream { return h.stream }

// Math is the handle's math mode.
func (h *Handle) Math() Math {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.math
}

// SetMath sets the math mode of the products issued later (TF32 or not).
func (h *Handle) SetMath(m Math) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == 0 {
		return fmt.Errorf("cublas: SetMath on a closed handle")
	}
	if err := h.l.err("cublasSetMathMode", C.gdcb_set_math(h.l.c, C.int(h.dev), h.h, C.int(m))); err != nil {
		return err
	}
	h.math = m
	return nil
}

// Close releases the handle. Products already queued still run.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == 0 {
		return nil
	}
	err := h.l.err("cublasDestroy", C.gdcb_destroy(h.l.c, C.int(h.dev), h.h))
	h.h = 0
	return err
}

// Sgemm is cublasSgemm: C = alpha op(A) op(B) + beta C for column-major
// fp32 matrices at device addresses (op(A) m x k, op(B) k x n, C m x n;
// lda, ldb, ldc: elements between the starts of two columns). With beta 0
// C is not read (NaNs in it do not survive). A, B and C must not overlap
// C. Bad arguments are an *Error with StatusInvalidValue, returned at once.
func (h *Handle) Sgemm(ta, tb Op, m, n, k int, alpha float32, a uintptr, lda int, b uintptr, ldb int,
	beta float32, c uintptr, ldc int) error {
	if err := checkInt32("cublasSgemm", "m", m, "n", n, "k", k, "lda", lda, "ldb", ldb, "ldc", ldc); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == 0 {
		return fmt.Errorf("cublas: Sgemm on a closed handle")
	}
	return h.l.err("cublasSgemm", C.gdcb_sgemm(h.l.c, C.int(h.dev), h.h, C.int(ta), C.int(tb), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.uintptr_t(a), C.int(lda), C.uintptr_t(b), C.int(ldb), C.float(beta), C.uintptr_t(c), C.int(ldc)))
}

// SgemmStridedBatched is cublasSgemmStridedBatched: batch products C_i =
// alpha op(A_i) op(B_i) + beta C_i, column-major as Sgemm's, the matrices
// of product i at a + i strideA, b + i strideB and c + i strideC
// (strides in elements, 0 or more: a stride of 0 makes every product use
// one matrix). The products' C matrices must not overlap one another or
// any A or B. Bad arguments are an *Error with StatusInvalidValue,
// returned at once.
func (h *Handle) SgemmStridedBatched(ta, tb Op, m, n, k int, alpha float32, a uintptr, lda int, strideA int64,
	b uintptr, ldb int, strideB int64, beta float32, c uintptr, ldc int, strideC int64, batch int) error {
	if err := checkBatched("cublasSgemmStridedBatched", m, n, k, lda, ldb, ldc, strideA, strideB, strideC, batch); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == 0 {
		return fmt.Errorf("cublas: SgemmStridedBatched on a closed handle")
	}
	return h.l.err("cublasSgemmStridedBatched", C.gdcb_sgemm_strided_batched(h.l.c, C.int(h.dev), h.h, C.int(ta), C.int(tb),
		C.int(m), C.int(n), C.int(k), C.float(alpha), C.uintptr_t(a), C.int(lda), C.longlong(strideA), C.uintptr_t(b),
		C.int(ldb), C.longlong(strideB), C.float(beta), C.uintptr_t(c), C.int(ldc), C.longlong(strideC), C.int(batch)))
}

// GemmEx is cublasGemmEx: Sgemm's product with the element types of a, b
// and c given (F32, F16, BF16; a and b of one type, c of theirs or F32),
// alpha and beta as float32, and the compute type (Compute32F: fp32
// arithmetic, which the handle's TF32 math mode may shortcut for F32
// inputs; Compute32FPedantic: never). The algorithm is cuBLAS's default.
func (h *Handle) GemmEx(ta, tb Op, m, n, k int, alpha float32, a, b Matrix, beta float32, c Matrix, compute ComputeType) error {
	if err := checkInt32("cublasGemmEx", "m", m, "n", n, "k", k, "lda", a.LD, "ldb", b.LD, "ldc", c.LD); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == 0 {
		return fmt.Errorf("cublas: GemmEx on a closed handle")
	}
	return h.l.err("cublasGemmEx", C.gdcb_gemm_ex(h.l.c, C.int(h.dev), h.h, C.int(ta), C.int(tb), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.uintptr_t(a.Ptr), C.int(a.Type), C.int(a.LD), C.uintptr_t(b.Ptr), C.int(b.Type), C.int(b.LD),
		C.float(beta), C.uintptr_t(c.Ptr), C.int(c.Type), C.int(c.LD), C.int(compute)))
}

// GemmStridedBatchedEx is cublasGemmStridedBatchedEx: GemmEx's product
// over batch products at fixed strides, as SgemmStridedBatched (strides in
// elements of each matrix's type, 0 or more; no two C matrices
// overlapping). The product under bf16 autocast of attention's heads and
// a convolution's images.
func (h *Handle) GemmStridedBatchedEx(ta, tb Op, m, n, k int, alpha float32, a Matrix, strideA int64, b Matrix, strideB int64,
	beta float32, c Matrix, strideC int64, batch int, compute ComputeType) error {
	if err := checkBatched("cublasGemmStridedBatchedEx", m, n, k, a.LD, b.LD, c.LD, strideA, strideB, strideC, batch); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == 0 {
		return fmt.Errorf("cublas: GemmStridedBatchedEx on a closed handle")
	}
	return h.l.err("cublasGemmStridedBatchedEx", C.gdcb_gemm_strided_batched_ex(h.l.c, C.int(h.dev), h.h, C.int(ta), C.int(tb),
		C.int(m), C.int(n), C.int(k), C.float(alpha), C.uintptr_t(a.Ptr), C.int(a.Type), C.int(a.LD), C.longlong(strideA),
		C.uintptr_t(b.Ptr), C.int(b.Type), C.int(b.LD), C.longlong(strideB), C.float(beta), C.uintptr_t(c.Ptr), C.int(c.Type),
		C.int(c.LD), C.longlong(strideC), C.int(batch), C.int(compute)))
}

// HasGemmBatchedEx reports whether the library has cublasGemmBatchedEx
// (CUDA 9.1 and later do; a library without it still loads, and
// GemmBatchedEx then fails with StatusNotSupported).
func (h *Handle) HasGemmBatchedEx() bool {
	return h.l != nil && C.gdcb_has_gemm_batched_ex(h.l.c) != 0
}

// GemmBatchedEx is cublasGemmBatchedEx: GemmEx's product over batch
// products whose matrices are anywhere: a.Ptr, b.Ptr and c.Ptr are the
// device addresses of arrays of batch device pointers (8 bytes each),
// product i's A, B and C the i-th of each. cuBLAS reads the arrays, and
// the matrices, when the stream runs the product: they must stay
// allocated and unwritten until then. The C matrices must not overlap.
// It serves batches whose offsets are not one stride times the index
// (attention's heads read in place from (N T, 3C) rows: head h of
// sequence n at n T 3C + h D).
func (h *Handle) GemmBatchedEx(ta, tb Op, m, n, k int, alpha float32, a, b Matrix, beta float32, c Matrix, batch int, compute ComputeType) error {
	if err := checkInt32("cublasGemmBatchedEx", "m", m, "n", n, "k", k, "lda", a.LD, "ldb", b.LD, "ldc", c.LD, "batch", batch); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == 0 {
		return fmt.Errorf("cublas: GemmBatchedEx on a closed handle")
	}
	return h.l.err("cublasGemmBatchedEx", C.gdcb_gemm_batched_ex(h.l.c, C.int(h.dev), h.h, C.int(ta), C.int(tb),
		C.int(m), C.int(n), C.int(k), C.float(alpha), C.uintptr_t(a.Ptr), C.int(a.Type), C.int(a.LD),
		C.uintptr_t(b.Ptr), C.int(b.Type), C.int(b.LD), C.float(beta), C.uintptr_t(c.Ptr), C.int(c.Type),
		C.int(c.LD), C.int(batch), C.int(compute)))
}
