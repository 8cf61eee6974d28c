package kernels_test

import (
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// TestRealNVRTC compiles the kernels with the real NVRTC where one is
// installed (no GPU needed): what the fake runs is CUDA C++ that NVRTC
// accepts, for the architectures of the GPUs gdist targets it knows.
func TestRealNVRTC(t *testing.T) {
	c, lib := devtest.RealNVRTC(t)
	major, minor := c.Version()
	ccs := [][2]int{{8, 0}, {9, 0}}
	if testing.Short() {
		ccs = ccs[1:] // NVRTC takes seconds a program here
	}
	for _, cc := range ccs {
		arch := c.Target(cc[0], cc[1])
		for _, p := range kernels.Programs() {
			img, err := c.Compile(p.Name, p.Source, arch, p.Options...)
			if err != nil {
				t.Fatalf("NVRTC %d.%d (%s), %s: %v", major, minor, lib, arch, err)
			}
			t.Logf("NVRTC %d.%d: %s for %s: %d bytes%s", major, minor, p.Name, arch, len(img.Data), strings.TrimSpace(" "+img.Log))
		}
	}
}
