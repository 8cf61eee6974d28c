//go:build !cgo

package cudafake

import (
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
)

// Contexts skips t: without cgo there is no fake.
func Contexts(t testing.TB) (mask uint64, implicit int, last string) {
	RequireFake(t)
	return 0, 0, ""
}

// ResetContexts skips t: without cgo there is no fake.
func ResetContexts(t testing.TB) { RequireFake(t) }

// OnlyContexts skips t: without cgo there is no fake.
func OnlyContexts(t testing.TB, devices ...int) { RequireFake(t) }

// HoldFunc skips t: without cgo there is no fake.
func HoldFunc(t testing.TB) uintptr { RequireFake(t); return 0 }

// Gate skips t: without cgo there is no fake.
func Gate(t testing.TB, open bool) { RequireFake(t) }

// CopyDelay skips t: without cgo there is no fake.
func CopyDelay(t testing.TB, d time.Duration) { RequireFake(t) }

// NoImplicitContexts skips t: without cgo there is no fake.
func NoImplicitContexts(t testing.TB) { RequireFake(t) }

// CommInits skips t: without cgo there is no fake.
func CommInits(t testing.TB) int { RequireFake(t); return 0 }

// ResetCommInits skips t: without cgo there is no fake.
func ResetCommInits(t testing.TB) { RequireFake(t) }

// Vanish skips t: without cgo there is no fake.
func Vanish(t testing.TB, dev int) { RequireFake(t) }

// KernelFailure skips t: without cgo there is no fake.
func KernelFailure(t testing.TB) string { RequireFake(t); return "" }

// StickyError skips t: without cgo there is no fake.
func StickyError(t testing.TB, code int) { RequireFake(t) }

// MemLimit skips t: without cgo there is no fake.
func MemLimit(t testing.TB, bytes int64) { RequireFake(t) }

// ReferenceGEMM skips t: without cgo there is no fake.
func ReferenceGEMM(t testing.TB, on bool) { RequireFake(t) }

// StreamDelay skips t: without cgo there is no fake.
func StreamDelay(t testing.TB, s *cuda.Stream, d time.Duration) { RequireFake(t) }

// NCCLDelay skips t: without cgo there is no fake.
func NCCLDelay(t testing.TB, d time.Duration) { RequireFake(t) }

// KernelDelay skips t: without cgo there is no fake.
func KernelDelay(t testing.TB, d time.Duration) { RequireFake(t) }

// SpinWaits skips t: without cgo there is no fake.
func SpinWaits(t testing.TB, on bool) { RequireFake(t) }

// LiveEvents skips t: without cgo there is no fake.
func LiveEvents(t testing.TB) int { RequireFake(t); return 0 }

// FreedUses skips t: without cgo there is no fake.
func FreedUses(t testing.TB) int { RequireFake(t); return 0 }
