package cudafake_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// A bad $FAKE_CUDA_KERNEL_DELAY_MS (a rank run as a process sets it for
// KernelDelay) stops the process naming it, rather than being read as
// no delay. The child runs one cuBLAS GEMM, which reads it.
func TestKernelDelayEnvBad(t *testing.T) {
	if os.Getenv("GDIST_TEST_DELAY_CHILD") == "1" {
		// the fake, through the environment the parent set up (the
		// child sees it as a CUDA)
		cudafake.RequireCUDA(t)
		s := devtest.Stream(t, 0)
		h, err := cublas.New(0, s)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		a := devtest.Upload(t, 0, []float32{1})
		c := devtest.Alloc(t, 0, 1, 4)
		if err := h.Sgemm(cublas.NoTrans, cublas.NoTrans, 1, 1, 1, 1, a, 1, a, 1, 0, c, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		return
	}
	cudafake.RequireFake(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelDelayEnvBad$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GDIST_TEST_DELAY_CHILD=1", "FAKE_CUDA_KERNEL_DELAY_MS=5ms")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("FAKE_CUDA_KERNEL_DELAY_MS=5ms was taken:\n%s", out)
	}
	if !strings.Contains(string(out), "FAKE_CUDA_KERNEL_DELAY_MS") || !strings.Contains(string(out), "5ms") {
		t.Fatalf("FAKE_CUDA_KERNEL_DELAY_MS=5ms: %v, not named:\n%s", err, out)
	}
}
