package devtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// RealHint says how to get the real CUDA headers and libraries on a
// machine with no GPU.
const RealHint = "install Debian's nvidia-cuda-dev (component non-free: CUDA 11.8's headers, libcublas, libnvrtc), or set CUDA_HOME"

// RealInclude is the directory of the real CUDA headers that holds header
// ($CUDA_HOME/include, /usr/local/cuda/include, /usr/include), or "".
func RealInclude(header string) string {
	var dirs []string
	if h := os.Getenv("CUDA_HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, "include"))
	}
	dirs = append(dirs, "/usr/local/cuda/include", "/usr/include")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, header)); err == nil {
			return d
		}
	}
	return ""
}

// RealLibrary is the first file matching one of the globs whose name ends
// in a version (libnvrtc.so.11.2), or "".
func RealLibrary(globs ...string) string {
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		sort.Strings(m)
		for _, p := range m {
			if regexp.MustCompile(`\.so\.\d+(\.\d+)?$`).MatchString(p) {
				return p
			}
		}
	}
	return ""
}

// ABICheck compiles the C file check against the real headers that hold
// header: files (name in the build directory -> path) are copied beside it
// (the shims), and go_values.h defines GO_<name> for each of values. The
// build must succeed, and fail with -DGDIST_ABICHECK_SELFTEST (a
// deliberately wrong prototype) for a type mismatch. It skips, saying why,
// without the headers or a C compiler.
func ABICheck(t *testing.T, header, check string, files map[string]string, values map[string]int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the check runs on Linux")
	}
	inc := RealInclude(header)
	if inc == "" {
		t.Skipf("no CUDA headers (%s): %s", header, RealHint)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s): %v", cc, err)
	}
	dir := t.TempDir()
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, from := range files {
		copyFile(from, filepath.Join(dir, name))
	}
	copyFile(check, filepath.Join(dir, "abicheck.c"))
	var names []string
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	var vals strings.Builder
	for _, k := range names {
		fmt.Fprintf(&vals, "#define GO_%s %d\n", k, values[k])
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
		t.Fatalf("the shim disagrees with the real headers in %s:\n%s", inc, out)
	}
	t.Logf("the shim agrees with %s/%s", inc, header)
	if out, err := build("-DGDIST_ABICHECK_SELFTEST"); err == nil {
		t.Fatal("a deliberately wrong prototype compiled: the check does not catch mismatches")
	} else if !strings.Contains(string(out), "incompatible") {
		t.Fatalf("the self-test failed for another reason than the wrong prototype:\n%s", out)
	}
}
