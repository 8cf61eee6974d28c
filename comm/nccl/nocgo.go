//go:build !cgo

package nccl

// Without cgo NCCL cannot be loaded: the backend is registered but reports
// itself unavailable, so programs still build (CGO_ENABLED=0).

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
)

const noCgo = "no CUDA: built without cgo (CGO_ENABLED=0), so CUDA and NCCL cannot be loaded"

// Comm is the NCCL Comm; New never returns one without cgo.
type Comm struct{ comm.Comm }

// Device is -1 without cgo.
func (c *Comm) Device() int { return -1 }

// New fails without cgo.
func New(ctx context.Context, cfg comm.Config) (*Comm, error) {
	return nil, fmt.Errorf("%w: %s", ErrUnavailable, noCgo)
}

// Reload does nothing without cgo.
func Reload() {}

// Version fails without cgo.
func Version() (version, path string, err error) {
	return "", "", fmt.Errorf("%w: %s", ErrUnavailable, noCgo)
}

// Usable is false without cgo.
func Usable() (ok bool, reason string) { return false, noCgo }

// GPUOf fails without cgo.
func GPUOf(cfg comm.Config) (string, error) { return "", fmt.Errorf("%w: %s", ErrUnavailable, noCgo) }

// SharedGPU says why ranks a and b cannot both use NCCL: GPUOf gave
// both gpu.
func SharedGPU(a, b int, gpu string) string {
	return fmt.Sprintf("ranks %d and %d would both use GPU %s; %s", a, b, gpu, oneGPUPerRank)
}

// UsableFor is false without cgo.
func UsableFor(localSize int) (ok bool, reason string) { return false, noCgo }

func (c *Comm) stopHeartbeat() {}
