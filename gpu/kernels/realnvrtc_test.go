package kernels_test

import (
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/gpu/rtc"
)

// TestRealNVRTC compiles the kernels with the real NVRTC where one is
// installed (no GPU needed): what the fake runs is CUDA C++ that NVRTC
// accepts, for the architectures of the GPUs gdist targets it knows.
func TestRealNVRTC(t *testing.T) {
	lib := devtest.RealLibrary("/usr/lib/*/libnvrtc.so.*", "/usr/local/cuda/lib64/libnvrtc.so.*")
	if lib == "" {
		t.Skip("no real NVRTC (libnvrtc.so.N): " + devtest.RealHint)
	}
	c, err := rtc.OpenCompiler(lib)
	if err != nil {
		if strings.Contains(err.Error(), "without cgo") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
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
