package cuda_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// oldDriverRuntime is a CUDA runtime as a CUDA 13 wheel behaves on a driver
// too old for it: it loads, and cudaGetDeviceCount (like every call) says
// cudaErrorInsufficientDriver (35).
const oldDriverRuntime = `
#define STUB(f) int f() { return 35; }
STUB(cudaSetDevice) STUB(cudaGetDevice) STUB(cudaMalloc) STUB(cudaFree)
STUB(cudaHostAlloc) STUB(cudaFreeHost) STUB(cudaMemcpy) STUB(cudaMemcpyAsync)
STUB(cudaMemset) STUB(cudaMemsetAsync) STUB(cudaStreamCreateWithFlags)
STUB(cudaStreamSynchronize) STUB(cudaStreamDestroy) STUB(cudaStreamWaitEvent)
STUB(cudaEventCreateWithFlags) STUB(cudaEventRecord) STUB(cudaEventQuery)
STUB(cudaEventSynchronize) STUB(cudaEventDestroy) STUB(cudaPointerGetAttributes)
int cudaGetDeviceCount(int *n) { *n = 0; return 35; }
int cudaDriverGetVersion(int *v) { *v = 12020; return 0; }
int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
const char *cudaGetErrorName(int e) { return e == 35 ? "cudaErrorInsufficientDriver" : "cudaErrorUnknown"; }
const char *cudaGetErrorString(int e) {
	return e == 35 ? "CUDA driver version is insufficient for CUDA runtime version" : "unknown error";
}
`

// buildOldDriverRuntime compiles oldDriverRuntime into a shared library.
func buildOldDriverRuntime(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "old.c"), filepath.Join(dir, "libolddriver.so")
	if err := os.WriteFile(src, []byte(oldDriverRuntime), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Skipf("cannot build the old-driver runtime: %v\n%s", err, out)
	}
	return lib
}

// pythonEnv makes a Python environment in a temporary directory with
// bin/python3 and, for each site-packages path of files, a link to its
// library; it returns the environment's root and the links' paths.
func pythonEnv(t *testing.T, files [][2]string) (root string, links []string) {
	t.Helper()
	root = t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "python3"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		link := filepath.Join(devtest.SitePackages(root), f[0])
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(f[1], link); err != nil {
			t.Fatal(err)
		}
		links = append(links, link)
	}
	return root, links
}

// Issue 26, item 2: a runtime that loads but sees no device (a CUDA 13
// wheel on an older driver) does not hide a working runtime further down
// the list.
func TestSkipsRuntimeThatSeesNoDevice(t *testing.T) {
	cudafake.RequireFake(t)
	old := buildOldDriverRuntime(t)
	venv, links := pythonEnv(t, [][2]string{
		{"nvidia/cu13/lib/libcudart.so.13", old},
		{"nvidia/cuda_runtime/lib/libcudart.so.12", cudafake.Path()},
	})
	devtest.UseEnv(t, cuda.Reload, cuda.EnvLibrary, "", "VIRTUAL_ENV", venv, "CONDA_PREFIX", "")
	if ok, why := cuda.Available(); !ok {
		t.Fatalf("Available() = false, %q; want the second wheel's runtime", why)
	}
	if path, _ := cuda.Loaded(); path != links[1] {
		t.Fatalf("loaded %s, want %s", path, links[1])
	}
}

// Issue 26, item 2: when no runtime sees a device, the first that loaded
// stays loaded (Symbol works) and the reason names every runtime tried and
// what each said, on one line.
func TestNoRuntimeSeesADevice(t *testing.T) {
	cudafake.RequireFake(t)
	old := buildOldDriverRuntime(t)
	venv, links := pythonEnv(t, [][2]string{
		{"nvidia/cu13/lib/libcudart.so.13", old},
		{"nvidia/cuda_runtime/lib/libcudart.so.12", cudafake.Path()},
	})
	devtest.UseEnv(t, cuda.Reload, cuda.EnvLibrary, "", "VIRTUAL_ENV", venv, "CONDA_PREFIX", "", "FAKE_CUDA_DEVICES", "0")
	ok, why := cuda.Available()
	t.Logf("Available() = %v, %q", ok, why)
	if ok {
		t.Fatal("Available with no device")
	}
	if path, _ := cuda.Loaded(); path != links[0] {
		t.Errorf("Loaded() = %s, want the first runtime that loaded, %s", path, links[0])
	}
	if p, err := cuda.Symbol("cudaMalloc"); err != nil || p == 0 {
		t.Errorf("Symbol(cudaMalloc) = %#x, %v", p, err)
	}
	for _, want := range []string{links[0], "cudaErrorInsufficientDriver", links[1], "cudaErrorNoDevice", "libcudart.so.11.0"} {
		if !strings.Contains(why, want) {
			t.Errorf("the reason does not name %s", want)
		}
	}
	if strings.Contains(why, "\n") {
		t.Error("the reason is not one line")
	}
}

// Issue 26, item 2: a runtime named by EnvLibrary is the only one tried: if
// it sees no device, the reason says so and names the variable, and no
// other runtime replaces it.
func TestNamedRuntimeIsNotReplaced(t *testing.T) {
	cudafake.RequireFake(t)
	old := buildOldDriverRuntime(t)
	venv, _ := pythonEnv(t, [][2]string{{"nvidia/cuda_runtime/lib/libcudart.so.12", cudafake.Path()}})
	devtest.UseEnv(t, cuda.Reload, cuda.EnvLibrary, old, "VIRTUAL_ENV", venv, "CONDA_PREFIX", "")
	ok, why := cuda.Available()
	t.Logf("Available() = %v, %q", ok, why)
	if path, _ := cuda.Loaded(); ok || path != old {
		t.Fatalf("with %s=%s: Available() = %v, Loaded() = %s", cuda.EnvLibrary, old, ok, path)
	}
	for _, want := range []string{old, "cudaErrorInsufficientDriver", cuda.EnvLibrary} {
		if !strings.Contains(why, want) {
			t.Errorf("the reason does not name %s", want)
		}
	}
}

// Issue 26, item 2: the wheels of the python3 found on PATH are searched
// even when its virtualenv is not activated ($VIRTUAL_ENV unset).
func TestFindsWheelOfPythonOnPath(t *testing.T) {
	cudafake.RequireFake(t)
	venv, links := pythonEnv(t, [][2]string{{"nvidia/cu13/lib/libcudart.so.13", cudafake.Path()}})
	devtest.UseEnv(t, cuda.Reload, cuda.EnvLibrary, "", "VIRTUAL_ENV", "", "CONDA_PREFIX", "",
		"PATH", filepath.Join(venv, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if path, _ := cuda.Loaded(); path != links[0] {
		_, why := cuda.Available()
		t.Fatalf("with %s/bin on PATH, loaded %q (%s), want %s", venv, path, why, links[0])
	}
}
