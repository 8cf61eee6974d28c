package rtc

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tree makes the files rels (with CUDART_VERSION v in each
// cuda_runtime_api.h) under a temporary root and returns it.
func tree(t *testing.T, v string, rels ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, rel := range rels {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		text := "//\n"
		if filepath.Base(rel) == "cuda_runtime_api.h" {
			text = "#define CUDART_VERSION " + v + "\n"
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func headers(dir string) []string {
	var out []string
	for _, h := range append(CUDAHeaders, "cuda_runtime_api.h") {
		out = append(out, filepath.Join(dir, h))
	}
	return out
}

// The CUDA include directory is found beside each layout of NVRTC that
// gdist loads: CUDA 13's pip wheel, CUDA 12's (the headers split between
// two wheels), a toolkit; $GDIST_CUDA_INCLUDE alone when set; one of
// another CUDA version only when no other, said in the note; none named
// with what is missing and the fix.
func TestIncludeSearch(t *testing.T) {
	t.Setenv("CUDA_HOME", "")
	t.Setenv("CUDA_PATH", "")
	t.Setenv(EnvInclude, "")
	if _, err := os.Stat("/usr/local/cuda/include/mma.h"); err == nil {
		t.Skip("/usr/local/cuda/include would be found by every search here")
	}
	cu13 := tree(t, "13000", append(headers("nvidia/cu13/include"), "nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cu13/include/cccl/nv/target")...)
	lib := filepath.Join(cu13, "nvidia/cu13/lib/libnvrtc.so.13")
	want13 := []string{filepath.Join(cu13, "nvidia/cu13/include"), filepath.Join(cu13, "nvidia/cu13/include/cccl")}
	if dirs, note := includeSearch(lib, 13); !reflect.DeepEqual(dirs, want13) || note != "" {
		t.Errorf("CUDA 13 wheel: %v, %q; want %v (libcu++ in cccl after it)", dirs, note, want13)
	}
	if dirs, note := includeSearch(lib, 12); dirs == nil || !strings.Contains(note, "of CUDA 13.0, NVRTC of CUDA 12") {
		t.Errorf("CUDA 13 headers for NVRTC 12: %v, %q; want them, noted", dirs, note)
	}

	cu12 := tree(t, "12040", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12", "nvidia/cuda_nvrtc/include/nvrtc.h",
		"nvidia/cuda_runtime/include/mma.h", "nvidia/cuda_runtime/include/cuda_fp16.h", "nvidia/cuda_runtime/include/cuda_bf16.h",
		"nvidia/cuda_runtime/include/cuda_runtime_api.h", "nvidia/cuda_nvcc/include/crt/mma.h", "nvidia/cuda_nvcc/include/crt/mma.hpp")
	lib = filepath.Join(cu12, "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
	want := []string{filepath.Join(cu12, "nvidia/cuda_runtime/include"), filepath.Join(cu12, "nvidia/cuda_nvcc/include")}
	if dirs, note := includeSearch(lib, 12); !reflect.DeepEqual(dirs, want) || note != "" {
		t.Errorf("CUDA 12 wheels: %v, %q; want %v", dirs, note, want)
	}
	os.Remove(filepath.Join(cu12, "nvidia/cuda_nvcc/include/crt/mma.h"))
	if dirs, note := includeSearch(lib, 12); dirs != nil || !strings.Contains(note, "crt/mma.h") || !strings.Contains(note, EnvInclude) {
		t.Errorf("no crt/mma.h: %v, %q; want none, naming the file and %s", dirs, note, EnvInclude)
	}

	tk := tree(t, "12080", append(headers("cuda/targets/x86_64-linux/include"), "cuda/targets/x86_64-linux/lib/libnvrtc.so.12")...)
	if dirs, _ := includeSearch(filepath.Join(tk, "cuda/targets/x86_64-linux/lib/libnvrtc.so.12"), 12); len(dirs) != 1 ||
		dirs[0] != filepath.Join(tk, "cuda/targets/x86_64-linux/include") {
		t.Errorf("toolkit: %v", dirs)
	}
	t.Setenv("CUDA_HOME", filepath.Join(tk, "cuda/targets/x86_64-linux"))
	if dirs, _ := includeSearch("libnvrtc.so.99", 12); len(dirs) != 1 || dirs[0] != filepath.Join(tk, "cuda/targets/x86_64-linux/include") {
		t.Errorf("$CUDA_HOME: %v", dirs)
	}

	t.Setenv(EnvInclude, filepath.Join(cu12, "nvidia/cuda_runtime/include"))
	if dirs, note := includeSearch(filepath.Join(cu13, "nvidia/cu13/lib/libnvrtc.so.13"), 13); dirs != nil || !strings.Contains(note, EnvInclude) {
		t.Errorf("%s lacking crt/mma.h: %v, %q; want it alone, refused", EnvInclude, dirs, note)
	}
	t.Setenv(EnvInclude, filepath.Join(cu13, "nvidia/cu13/include"))
	if dirs, note := includeSearch(lib, 12); !reflect.DeepEqual(dirs, want13) || note != "" {
		t.Errorf("%s: %v, %q", EnvInclude, dirs, note)
	}
}
