package nccl_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Issue 26, item 2: NCCL's pip wheel (nvidia-nccl-cu12, nvidia-nccl-cu13:
// site-packages/nvidia/nccl/lib/libnccl.so.2) is found in the active
// virtualenv, and in the environment of the python3 on PATH when none is
// active.
func TestFindsNCCLWheel(t *testing.T) {
	cudafake.RequireFake(t)
	venv := t.TempDir()
	wheel := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib", "libnccl.so.2")
	for _, dir := range []string{filepath.Dir(wheel), filepath.Join(venv, "bin")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(venv, "bin", "python3"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cudafake.Path(), wheel); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, venv, path string }{
		{"VIRTUAL_ENV", venv, os.Getenv("PATH")},
		{"python3 on PATH", "", filepath.Join(venv, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")},
	} {
		t.Run(c.name, func(t *testing.T) {
			swapEnv(t, "VIRTUAL_ENV", c.venv, "CONDA_PREFIX", "", "PATH", c.path, nccl.EnvLibrary, "")
			os.Unsetenv(nccl.EnvLibrary)
			nccl.Reload()
			if _, path, err := nccl.Version(); err != nil || path != wheel {
				t.Fatalf("Version() = %q, %v; want %s", path, err, wheel)
			}
		})
	}
}
