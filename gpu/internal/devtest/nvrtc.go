package devtest

import (
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/rtc"
)

// RealNVRTC opens the real NVRTC installed here (no GPU needed), or skips
// the test where there is none or no cgo.
func RealNVRTC(t testing.TB) (c *rtc.Compiler, lib string) {
	t.Helper()
	lib = RealLibrary("/usr/lib/*/libnvrtc.so.*", "/usr/local/cuda/lib64/libnvrtc.so.*")
	if lib == "" {
		t.Skip("no real NVRTC (libnvrtc.so.N): " + RealHint)
	}
	c, err := rtc.OpenCompiler(lib)
	if err != nil {
		if strings.Contains(err.Error(), "without cgo") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return c, lib
}
