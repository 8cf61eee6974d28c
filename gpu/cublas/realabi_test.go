package cublas_test

import (
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// TestRealHeaders compiles testdata/abicheck.c against the real
// cublas_v2.h (cublas_api.h): every value and prototype of shim.h and types.go.
func TestRealHeaders(t *testing.T) {
	devtest.ABICheck(t, "cublas_v2.h", "testdata/abicheck.c", map[string]string{"shim.h": "shim.h"}, cublas.GoValues)
}

// TestRealLibrary loads the real libcublas (no GPU needed to load it):
// every function the shim calls resolves, and its version is read.
func TestRealLibrary(t *testing.T) {
	lib := devtest.RealLibrary("/usr/lib/*/libcublas.so.*", "/usr/local/cuda/lib64/libcublas.so.*")
	if lib == "" {
		t.Skip("no real cuBLAS (libcublas.so.N): " + devtest.RealHint)
	}
	cudafake.RequireCUDA(t) // loading cuBLAS needs a CUDA runtime, real or fake
	devtest.UseEnv(t, cublas.Reload, cublas.EnvLibrary, lib)
	path, version := cublas.Loaded()
	if path != lib {
		_, why := cublas.Available()
		t.Fatalf("%s did not load: %s", lib, why)
	}
	t.Logf("%s: cuBLAS %s", lib, version)
	if version == "" || !strings.Contains(lib, "so."+strings.Split(version, ".")[0]) {
		t.Errorf("version %q of %s", version, lib)
	}
}
