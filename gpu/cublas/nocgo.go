//go:build !cgo

package cublas

// Without cgo there is no way to load cuBLAS: everything reports it as
// unavailable, so the packages above still build (CGO_ENABLED=0).

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
)

const noCgo = "built without cgo (CGO_ENABLED=0), so cuBLAS cannot be loaded"

var errNoCgo = fmt.Errorf("%w: %s", cuda.ErrUnavailable, noCgo)

// Reload does nothing without cgo.
func Reload() {}

// Available is false without cgo.
func Available() (ok bool, reason string) { return false, noCgo }

// Loaded is empty without cgo.
func Loaded() (path, version string) { return "", "" }

// Info says that cuBLAS is not available.
func Info() string { return "no cuBLAS: " + noCgo }

// Handle is a cuBLAS handle (none without cgo).
type Handle struct{ dev int }

// New fails without cgo.
func New(device int, s *cuda.Stream) (*Handle, error) { return nil, errNoCgo }

// Device is the handle's device.
func (h *Handle) Device() int { return h.dev }

// Stream is nil without cgo.
func (h *Handle) Stream() *cuda.Stream { return nil }

// Math is DefaultMath without cgo.
func (h *Handle) Math() Math { return DefaultMath }

// SetMath fails without cgo.
func (h *Handle) SetMath(m Math) error { return errNoCgo }

// Close does nothing without cgo.
func (h *Handle) Close() error { return nil }

// Sgemm fails without cgo.
func (h *Handle) Sgemm(ta, tb Op, m, n, k int, alpha float32, a uintptr, lda int, b uintptr, ldb int,
	beta float32, c uintptr, ldc int) error {
	if err := checkInt32("cublasSgemm", "m", m, "n", n, "k", k, "lda", lda, "ldb", ldb, "ldc", ldc); err != nil {
		return err
	}
	return errNoCgo
}

// GemmEx fails without cgo.
func (h *Handle) GemmEx(ta, tb Op, m, n, k int, alpha float32, a, b Matrix, beta float32, c Matrix, compute ComputeType) error {
	return errNoCgo
}

// SgemmStridedBatched fails without cgo.
func (h *Handle) SgemmStridedBatched(ta, tb Op, m, n, k int, alpha float32, a uintptr, lda int, strideA int64,
	b uintptr, ldb int, strideB int64, beta float32, c uintptr, ldc int, strideC int64, batch int) error {
	if err := checkBatched("cublasSgemmStridedBatched", m, n, k, lda, ldb, ldc, strideA, strideB, strideC, batch); err != nil {
		return err
	}
	return errNoCgo
}

// GemmStridedBatchedEx fails without cgo.
func (h *Handle) GemmStridedBatchedEx(ta, tb Op, m, n, k int, alpha float32, a Matrix, strideA int64, b Matrix, strideB int64,
	beta float32, c Matrix, strideC int64, batch int, compute ComputeType) error {
	if err := checkBatched("cublasGemmStridedBatchedEx", m, n, k, a.LD, b.LD, c.LD, strideA, strideB, strideC, batch); err != nil {
		return err
	}
	return errNoCgo
}

// HasGemmBatchedEx is false without cgo.
func (h *Handle) HasGemmBatchedEx() bool { return false }

// GemmBatchedEx fails without cgo.
func (h *Handle) GemmBatchedEx(ta, tb Op, m, n, k int, alpha float32, a, b Matrix, beta float32, c Matrix, batch int, compute ComputeType) error {
	return errNoCgo
}
