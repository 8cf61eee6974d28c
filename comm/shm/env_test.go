//go:build linux

package shm

import (
	"testing"
	"time"
)

// The spin time comes from $GDIST_SHM_SPIN_US as documented.
func TestEnvUS(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 50 * time.Microsecond, "7": 7 * time.Microsecond, "0": 0, "-1": 50 * time.Microsecond, "x": 50 * time.Microsecond} {
		t.Setenv("GDIST_SHM_SPIN_US", v)
		if got := envUS("GDIST_SHM_SPIN_US", 50); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
