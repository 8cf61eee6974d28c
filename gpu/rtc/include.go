package rtc

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvInclude names CUDA's include directory for NVRTC (several separated
// by ':'), alone: the one that holds mma.h, crt/mma.h, cuda_fp16.h and
// cuda_bf16.h, of the NVRTC's CUDA version.
const EnvInclude = "GDIST_CUDA_INCLUDE"

// CUDAHeaders are the files of CUDA's toolkit headers that NVRTC does not
// have built in and that kernels include: the warp matrix API (mma.h,
// which includes crt/mma.h, cuda_fp16.h and cuda_bf16.h). An include
// directory is used only when it holds all of them.
var CUDAHeaders = []string{"mma.h", "crt/mma.h", "crt/mma.hpp", "cuda_fp16.h", "cuda_bf16.h"}

// includeSearch finds the CUDA include directories to give NVRTC (lib,
// a path or a dlopen name, of CUDA major): EnvInclude alone when set;
// else, from the library's directory D, D/../include (a toolkit's lib64
// or targets/*/lib, CUDA 13's pip wheel nvidia/cu13/lib), CUDA 12's pip
// wheels (nvidia/cuda_nvrtc/lib: nvidia/cuda_runtime/include with
// nvidia/cuda_nvcc/include), D/../../include (a Debian library directory
// /usr/lib/<triplet>: /usr/include); then $CUDA_HOME/include,
// $CUDA_PATH/include and /usr/local/cuda/include. The first that holds
// CUDAHeaders and whose CUDA (cuda_runtime_api.h's CUDART_VERSION) is
// major's wins, else the first that holds them (note says so); a cccl
// directory in one (CUDA 13's libcu++) comes after it. With none, dirs is
// nil and note says why.
func includeSearch(lib string, major int) (dirs []string, note string) {
	if v := os.Getenv(EnvInclude); v != "" {
		group := filepath.SplitList(v)
		if miss := missing(group); miss != "" {
			return nil, fmt.Sprintf("%s=%s lacks %s", EnvInclude, v, miss)
		}
		return withCCCL(group), ""
	}
	var groups [][]string
	seen := map[string]bool{}
	add := func(g ...string) {
		var keep []string
		for _, d := range g {
			d = filepath.Clean(d)
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				keep = append(keep, d)
			}
		}
		if len(keep) > 0 && !seen[strings.Join(keep, ":")] {
			seen[strings.Join(keep, ":")] = true
			groups = append(groups, keep)
		}
	}
	if p := libraryFile(lib); p != "" {
		ds := []string{filepath.Dir(p)}
		if r, err := filepath.EvalSymlinks(p); err == nil && filepath.Dir(r) != ds[0] {
			ds = append(ds, filepath.Dir(r))
		}
		for _, d := range ds {
			add(filepath.Join(d, "..", "include"))
			add(filepath.Join(d, "..", "..", "cuda_runtime", "include"), filepath.Join(d, "..", "..", "cuda_nvcc", "include"))
			add(filepath.Join(d, "..", "..", "include"))
		}
	}
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := os.Getenv(env); v != "" {
			add(filepath.Join(v, "include"))
		}
	}
	add("/usr/local/cuda/include")
	var first []string
	firstV := 0
	for _, g := range groups {
		if missing(g) != "" {
			continue
		}
		g = withCCCL(g)
		v := cudartVersion(g)
		if v/1000 == major {
			return g, ""
		}
		if first == nil {
			first, firstV = g, v
		}
	}
	if first != nil {
		return first, fmt.Sprintf("CUDA headers %s are of CUDA %d.%d, NVRTC of CUDA %d (set %s to those of CUDA %d)",
			strings.Join(first, ":"), firstV/1000, firstV%1000/10, major, EnvInclude, major)
	}
	var looked []string
	for _, g := range groups {
		looked = append(looked, strings.Join(g, ":"))
	}
	where := "no candidate directory exists"
	if len(looked) > 0 {
		where = "none of " + strings.Join(looked, ", ") + " holds them all"
	}
	return nil, fmt.Sprintf("no CUDA include directory with %s found for %s (%s): set %s to one "+
		"(a CUDA toolkit's include; for pip's CUDA 12, nvidia-cuda-runtime-cu12's and nvidia-cuda-nvcc-cu12's)",
		strings.Join(CUDAHeaders, ", "), lib, where, EnvInclude)
}

// withCCCL is dirs and, after them, the cccl directory of each that has
// one: CUDA 13 moved libcu++ (nv/target, cuda/std, which its cuda_fp16.h
// and cuda_bf16.h may include) to include/cccl.
func withCCCL(dirs []string) []string {
	out := dirs
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, "cccl")); err == nil && st.IsDir() {
			out = append(out[:len(out):len(out)], filepath.Join(d, "cccl"))
		}
	}
	return out
}

// missing names the CUDAHeaders none of dirs holds ("" when none is
// missing).
func missing(dirs []string) string {
	var out []string
	for _, h := range CUDAHeaders {
		found := false
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, h)); err == nil {
				found = true
				break
			}
		}
		if !found {
			out = append(out, h)
		}
	}
	return strings.Join(out, ", ")
}

// cudartVersion is CUDART_VERSION (12040 for 12.4) from the first of dirs
// with a cuda_runtime_api.h, 0 when none says.
func cudartVersion(dirs []string) int {
	for _, d := range dirs {
		f, err := os.Open(filepath.Join(d, "cuda_runtime_api.h"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		v := 0
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) == 3 && fs[0] == "#define" && fs[1] == "CUDART_VERSION" {
				fmt.Sscanf(fs[2], "%d", &v)
				break
			}
		}
		f.Close()
		if v > 0 {
			return v
		}
	}
	return 0
}

// libraryFile is lib's file: lib itself when it is a path, else the file
// of that name (or of a name it begins: libnvrtc.so.12 is
// libnvrtc.so.12.4.127 there) mapped into the process (/proc/self/maps),
// "" when none is.
func libraryFile(lib string) string {
	if strings.Contains(lib, "/") {
		return lib
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 {
			continue
		}
		p := fs[len(fs)-1]
		if strings.HasPrefix(filepath.Base(p), lib) {
			return p
		}
	}
	return ""
}
