package cudafake

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
)

//go:embed testdata/fakecuda.c
var source []byte

// EnvNCCL is the variable comm/nccl reads for the path of libnccl (named
// here too, since this package cannot import comm/nccl).
const EnvNCCL = "GDIST_NCCL_PATH"

// The variables gpu/cublas and gpu/rtc read for the paths of cuBLAS, NVRTC
// and the CUDA driver (libcuda), named here too since those packages'
// tests import this one. The fake is all three as well.
const (
	EnvCUBLAS = "GDIST_CUBLAS_PATH"
	EnvNVRTC  = "GDIST_NVRTC_PATH"
	EnvDriver = "GDIST_LIBCUDA_PATH"
)

// Devices is the number of fake devices Main sets up (FAKE_CUDA_DEVICES),
// enough for every multi-rank test to give each rank its own device. Set
// FAKE_CUDA_DEVICES before the tests start to choose another number:
// FAKE_CUDA_DEVICES=1 runs them as on a machine with one GPU.
const Devices = 8

// Build compiles the fake into a shared library and returns its path. The
// result is cached by the source's hash in the user's cache directory (or,
// without one, built afresh in a temporary directory).
func Build() (string, error) {
	sum := sha256.Sum256(source)
	name := "fakecuda-" + hex.EncodeToString(sum[:8])
	var dir string
	if cache, err := os.UserCacheDir(); err == nil && os.MkdirAll(filepath.Join(cache, "gdist"), 0o700) == nil {
		dir = filepath.Join(cache, "gdist", name)
	} else if dir, err = os.MkdirTemp("", name); err != nil {
		return "", err
	}
	lib := filepath.Join(dir, "libfakecuda.so")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("cudafake: no C compiler (%s) to build the fake CUDA: %v", cc, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src := filepath.Join(dir, fmt.Sprintf("fakecuda-%d.c", os.Getpid()))
	tmp := filepath.Join(dir, fmt.Sprintf("libfakecuda-%d.so", os.Getpid()))
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	defer os.Remove(src)
	out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-pthread", "-fvisibility=hidden",
		"-o", tmp, src, "-ldl").CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("cudafake: building the fake CUDA: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, lib); err != nil {
		return "", err
	}
	return lib, nil
}

// Use points gpu/cuda, comm/nccl, gpu/cublas and gpu/rtc at the library at
// path (from Build) with devices fake devices, and reloads gpu/cuda. The
// others load lazily, so call Use before anything touches them.
func Use(path string, devices int) {
	os.Setenv(cuda.EnvLibrary, path)
	os.Setenv(EnvNCCL, path)
	os.Setenv(EnvCUBLAS, path)
	os.Setenv(EnvNVRTC, path)
	os.Setenv(EnvDriver, path)
	os.Setenv("FAKE_CUDA_DEVICES", strconv.Itoa(devices))
	cuda.Reload()
}

var (
	mode   = "none"
	reason string // why not real
	fake   string // why not fake
	path   string
)

// Main picks the mode (see the package comment) and runs the tests.
func Main(m *testing.M) int {
	setup()
	return m.Run()
}

func setup() {
	want := os.Getenv("GDIST_CUDA_TEST")
	if want != "fake" {
		ok, why := cuda.Available()
		if ok {
			mode = "real"
			return
		}
		reason = why
	} else {
		reason = "GDIST_CUDA_TEST=fake"
	}
	if want == "real" {
		fake = "GDIST_CUDA_TEST=real"
		return
	}
	p, err := Build()
	if err != nil {
		fake = err.Error()
		return
	}
	path = p
	devices := Devices
	if n, err := strconv.Atoi(os.Getenv("FAKE_CUDA_DEVICES")); err == nil && n >= 0 {
		devices = n
	}
	Use(p, devices)
	if ok, why := cuda.Available(); !ok {
		fake = "the fake CUDA does not load: " + why
		return
	}
	mode = "fake"
}

// Setup picks the mode as Main does, for a process that runs no tests: a
// rank that a test started as a child process (see ProcessEnv).
func Setup() { setup() }

// ProcessEnv is the environment of a child process that is one NCCL rank
// of a test, on the fake: it sees one device, the fake's physical device
// dev (FAKE_CUDA_VISIBLE_DEVICES, like CUDA_VISIBLE_DEVICES; and
// CUDA_VISIBLE_DEVICES names it too, as a launcher that gives each process
// its GPU does, which the fake ignores), and its NCCL unique ids name
// rendezvous files in dir, where the ranks of other processes meet it
// (FAKE_NCCL_PROCESSES). The child calls Setup.
func ProcessEnv(dev int, dir string) []string {
	return []string{
		"GDIST_CUDA_TEST=fake",
		"CUDA_VISIBLE_DEVICES=" + strconv.Itoa(dev),
		"FAKE_CUDA_VISIBLE_DEVICES=" + strconv.Itoa(dev),
		"FAKE_NCCL_PROCESSES=1",
		"FAKE_NCCL_DIR=" + dir,
	}
}

// SharedProcessEnv is the environment of a child process that is one NCCL
// rank of a test, on the fake, on a machine with one GPU that every rank
// sees as device 0 (FAKE_CUDA_DEVICES=1, nothing naming a device per
// process): the ranks share it, which the fake's NCCL, like NCCL, refuses
// unless each process poses as its own host (NCCL_HOSTID, which the test
// adds). Unique ids name rendezvous files in dir, as with ProcessEnv.
func SharedProcessEnv(dir string) []string {
	return []string{
		"GDIST_CUDA_TEST=fake",
		"FAKE_CUDA_DEVICES=1",
		"CUDA_VISIBLE_DEVICES=",
		"NVIDIA_VISIBLE_DEVICES=",
		"FAKE_CUDA_VISIBLE_DEVICES=",
		"FAKE_NCCL_PROCESSES=1",
		"FAKE_NCCL_DIR=" + dir,
	}
}

// Mode is "real", "fake" or "none".
func Mode() string { return mode }

// Path is the fake library's path in fake mode.
func Path() string { return path }

// Reason says why the real CUDA is not in use ("" in real mode).
func Reason() string { return reason }

// RequireCUDA skips t unless the tests run on a real or a fake CUDA.
func RequireCUDA(t testing.TB) {
	t.Helper()
	if mode == "none" {
		t.Skipf("no CUDA: %s; and no fake CUDA: %s", reason, fake)
	}
}

// RequireReal skips t unless a real GPU is in use.
func RequireReal(t testing.TB) {
	t.Helper()
	if mode != "real" {
		t.Skipf("no CUDA: %s", reason)
	}
}

// RequireFake skips t unless the fake is in use (tests of behaviour only
// the fake can stage, such as injected failures).
func RequireFake(t testing.TB) {
	t.Helper()
	if mode != "fake" {
		if mode == "real" {
			t.Skip("needs the fake CUDA; running on a real GPU")
		}
		t.Skipf("no fake CUDA: %s", fake)
	}
}
