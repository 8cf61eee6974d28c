package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// The real CUDA headers and runtime, where no GPU is: Debian's non-free
// packages nvidia-cuda-dev (CUDA 11.8 headers) and libcudart11.0, which
// .ci/run installs.
const realHint = "install Debian's nvidia-cuda-dev and libcudart11.0 (component non-free; .ci/run does), or set CUDA_HOME"

func realInclude() string {
	var dirs []string
	if h := os.Getenv("CUDA_HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, "include"))
	}
	dirs = append(dirs, "/usr/local/cuda/include", "/usr/include")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "cuda_runtime_api.h")); err == nil {
			return d
		}
	}
	return ""
}

// TestRealHeaders compiles testdata/abicheck.c against the real
// cuda_runtime_api.h: every value, struct offset and prototype the shims
// (gpu/cuda/shim.h, comm/nccl/shim.h) and types.go rely on is asserted at
// compile time. A build with one deliberately wrong prototype must fail.
func TestRealHeaders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the check runs on Linux")
	}
	inc := realInclude()
	if inc == "" {
		t.Skip("no CUDA headers (cuda_runtime_api.h): " + realHint)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s): %v", cc, err)
	}
	dir := t.TempDir()
	copyFile(t, "shim.h", filepath.Join(dir, "shim.h"))
	copyFile(t, "../../comm/nccl/shim.h", filepath.Join(dir, "nccl_shim.h"))
	copyFile(t, "testdata/abicheck.c", filepath.Join(dir, "abicheck.c"))
	var names []string
	for k := range cuda.GoValues {
		names = append(names, k)
	}
	sort.Strings(names)
	var vals strings.Builder
	for _, k := range names {
		fmt.Fprintf(&vals, "#define GO_%s %d\n", k, cuda.GoValues[k])
	}
	if err := os.WriteFile(filepath.Join(dir, "go_values.h"), []byte(vals.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(extra ...string) ([]byte, error) {
		args := append([]string{"-std=c11", "-Wall", "-Werror", "-Werror=incompatible-pointer-types",
			"-I" + dir, "-I" + inc, "-c", "-o", filepath.Join(dir, "abicheck.o"), filepath.Join(dir, "abicheck.c")}, extra...)
		return exec.Command(cc, args...).CombinedOutput()
	}
	if out, err := build(); err != nil {
		t.Fatalf("the shims disagree with the real CUDA headers in %s:\n%s", inc, out)
	}
	ver, _ := os.ReadFile(filepath.Join(inc, "cuda_runtime_api.h"))
	if m := regexp.MustCompile(`#define CUDART_VERSION\s+(\d+)`).FindSubmatch(ver); m != nil {
		t.Logf("shims agree with %s/cuda_runtime_api.h (CUDART_VERSION %s)", inc, m[1])
	}
	if out, err := build("-DGDIST_ABICHECK_SELFTEST"); err == nil {
		t.Fatal("a deliberately wrong prototype compiled: the check does not catch mismatches")
	} else if !strings.Contains(string(out), "incompatible") {
		t.Fatalf("the self-test failed for another reason than the wrong prototype:\n%s", out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func realRuntime() string {
	if p := os.Getenv("GDIST_REAL_CUDART"); p != "" {
		return p
	}
	var found []string
	for _, pat := range []string{"/usr/lib/*/libcudart.so.*", "/usr/local/cuda/lib64/libcudart.so.*"} {
		m, _ := filepath.Glob(pat)
		found = append(found, m...)
	}
	for _, p := range found {
		if regexp.MustCompile(`libcudart\.so\.\d+(\.\d+)?$`).MatchString(p) {
			return p
		}
	}
	return ""
}

// TestRealRuntime loads the real libcudart through gpu/cuda: every function
// the two shims load must resolve, and with no GPU the runtime's answer must
// come back as the clear error the README promises (no crash), naming the
// library and what the runtime said.
func TestRealRuntime(t *testing.T) {
	lib := realRuntime()
	if lib == "" {
		t.Skip("no real CUDA runtime (libcudart.so.N): " + realHint + "; or set GDIST_REAL_CUDART")
	}
	if ok, why := cuda.Available(); !ok && strings.Contains(why, "without cgo") {
		t.Skip(why)
	}
	old, had := os.LookupEnv(cuda.EnvLibrary)
	t.Cleanup(func() {
		if had {
			os.Setenv(cuda.EnvLibrary, old)
		} else {
			os.Unsetenv(cuda.EnvLibrary)
		}
		cuda.Reload()
	})
	os.Setenv(cuda.EnvLibrary, lib)
	cuda.Reload()
	path, missing := cuda.Loaded()
	if path != lib {
		_, why := cuda.Available()
		t.Fatalf("%s did not load: %s", lib, why)
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks %v", lib, missing)
	}
	// The runtime functions comm/nccl's shim loads through cuda.Symbol.
	src, err := os.ReadFile("../../comm/nccl/lib.go")
	if err != nil {
		t.Fatal(err)
	}
	syms := regexp.MustCompile(`"(cuda[A-Za-z]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(syms) < 5 {
		t.Fatalf("found only %d CUDA function names in comm/nccl/lib.go", len(syms))
	}
	for _, m := range syms {
		if p, err := cuda.Symbol(m[1]); err != nil || p == 0 {
			t.Errorf("%s: %s does not resolve (%v)", lib, m[1], err)
		}
	}
	ok, why := cuda.Available()
	t.Logf("Available() = %v, %q; Info() = %q", ok, why, cuda.Info())
	if ok {
		if cudafake.Mode() != "real" {
			t.Errorf("the real runtime sees a GPU, but the tests chose mode %s", cudafake.Mode())
		}
		return
	}
	if !strings.Contains(why, lib) || !strings.Contains(why, "cudaGetDeviceCount") ||
		!regexp.MustCompile(`cudaErrorNoDevice|cudaErrorInsufficientDriver|cudaError(\w+)`).MatchString(why) {
		t.Errorf("no GPU is reported as %q; want the library, the call and the runtime's error", why)
	}
	if !strings.HasPrefix(cuda.Info(), "no CUDA: ") {
		t.Errorf("Info() = %q, want it to start with \"no CUDA: \"", cuda.Info())
	}
	if _, err := cuda.Malloc(0, 16); !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), lib) {
		t.Errorf("Malloc with no GPU: %v; want an error wrapping ErrUnavailable that names %s", err, lib)
	}
	if _, err := cuda.HostAlloc(0, 16); !errors.Is(err, cuda.ErrUnavailable) {
		t.Errorf("HostAlloc with no GPU: %v", err)
	}
}
