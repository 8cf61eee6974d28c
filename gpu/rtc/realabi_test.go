package rtc_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/rtc"
)

// TestRealHeaders compiles testdata/abicheck.c against the real nvrtc.h
// and cuda.h: every value and prototype of shim.h.
func TestRealHeaders(t *testing.T) {
	if devtest.RealInclude("cuda.h") == "" {
		t.Skip("no cuda.h: " + devtest.RealHint)
	}
	devtest.ABICheck(t, "nvrtc.h", "testdata/abicheck.c", map[string]string{"shim.h": "shim.h"}, nil)
}

// TestRealNVRTC compiles this package's test kernels with the real NVRTC
// (no GPU needed): what the fake runs is CUDA C++ that NVRTC accepts, as a
// cubin for a real architecture and as PTX for a virtual one.
func TestRealNVRTC(t *testing.T) {
	c, _ := devtest.RealNVRTC(t)
	major, minor := c.Version()
	t.Logf("%s: NVRTC %d.%d, architectures %v", c.Path(), major, minor, c.Archs())
	for _, arch := range []string{c.Target(8, 0), "compute_80"} { // CUDA 13 dropped sm_70
		img, err := c.Compile("rtc_test.cu", testSource, arch)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if len(img.Data) == 0 {
			t.Fatalf("%s: empty image", arch)
		}
		if strings.HasPrefix(arch, "compute_") && !strings.Contains(string(img.Data), ".entry block_sum") {
			t.Errorf("the PTX has no entry block_sum")
		}
		t.Logf("%s: %d bytes%s", arch, len(img.Data), strings.TrimSpace(" "+img.Log))
	}
	if _, err := c.Compile("broken.cu", "extern \"C\" __global__ void k(float *x) { x[0] = undefined_name; }", "compute_80"); err == nil {
		t.Error("the real NVRTC compiled a broken kernel")
	} else if !strings.Contains(err.Error(), "undefined_name") {
		t.Errorf("the real NVRTC's log does not name the fault: %v", err)
	}
	if c.Target(8, 0) != "sm_80" || c.Target(99, 0) == "sm_990" {
		t.Errorf("Target(8, 0) = %s, Target(99, 0) = %s", c.Target(8, 0), c.Target(99, 0))
	}
}

// TestRealDriver loads the real libcuda: every function the shim calls
// resolves, and with no GPU cuInit's answer comes back as a clear error
// naming the library, not a crash.
func TestRealDriver(t *testing.T) {
	lib := devtest.RealLibrary("/usr/lib/*/libcuda.so.1", "/lib/*/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1")
	if lib == "" {
		t.Skip("no real libcuda.so.1 (the NVIDIA driver's)")
	}
	cudafake.RequireCUDA(t) // the driver is loaded after a CUDA runtime, real or fake
	if env := os.Getenv(rtc.EnvDriver); cudafake.Mode() == "real" && env != "" && env != lib {
		// verify.sh's dry run: "real" mode on the fake's runtime
		t.Skipf("the tests use %s=%s: the real driver is checked with the real runtime only", rtc.EnvDriver, env)
	}
	devtest.UseEnv(t, rtc.Reload, rtc.EnvDriver, lib)
	ok, why := rtc.Available()
	t.Logf("Available() = %v, %q", ok, why)
	if cudafake.Mode() == "real" {
		if !ok {
			t.Fatalf("a GPU, and the driver at %s is unavailable: %s", lib, why)
		}
		return
	}
	if ok {
		t.Skip("the real driver initialized on a machine where the tests run on the fake")
	}
	if !strings.Contains(why, lib) || !strings.Contains(why, "cuInit") {
		t.Errorf("no GPU is reported as %q; want the library and cuInit's error", why)
	}
	if _, _, err := rtc.Arch(0); !errors.Is(err, cuda.ErrUnavailable) {
		t.Errorf("Arch with no GPU: %v", err)
	}
}
