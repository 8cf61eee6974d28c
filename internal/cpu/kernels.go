package cpu

import (
	"fmt"
	"os"
	"sync"
)

// KernelSets are the names of the kernel sets of the packages with
// assembly (internal/reduce, internal/vecmath, internal/winograd),
// narrowest first: "go"
// (portable Go), "avx2" (AVX2 and FMA), "avx512" (AVX-512 F, DQ, BW, VL).
var KernelSets = []string{"go", "avx2", "avx512"}

// EnvKernels caps the kernel set ChooseKernels picks: go, avx2 or avx512.
const EnvKernels = "GDIST_KERNELS"

// kernelsEnv is EnvKernels, read once, at the first ChooseKernels (not at
// import): the one place this package reads its environment.
var kernelsEnv = sync.OnceValue(func() string { return os.Getenv(EnvKernels) })

var warnOnce sync.Once

// ChooseKernels returns the kernel set to use of sets (the sets a package
// runs on this machine, narrowest first, each named by name as one of
// KernelSets): the widest, or, with GDIST_KERNELS=go|avx2|avx512 (for
// measurements), the widest no wider than the one it names. An unknown
// GDIST_KERNELS is reported on stderr, once, and ignored. GDIST_KERNELS is
// read at the first call, once for the process.
func ChooseKernels[S any](sets []S, name func(S) string) S {
	names := make([]string, len(sets))
	for i, s := range sets {
		names[i] = name(s)
	}
	return sets[chooseKernels(names, kernelsEnv())]
}

func chooseKernels(have []string, env string) int {
	if env == "" {
		return len(have) - 1
	}
	rank := func(name string) int {
		for i, n := range KernelSets {
			if n == name {
				return i
			}
		}
		return -1
	}
	limit := rank(env)
	if limit < 0 {
		warnOnce.Do(func() {
			fmt.Fprintf(os.Stderr, "gdist: ignoring %s=%q (want one of %v)\n", EnvKernels, env, KernelSets)
		})
		return len(have) - 1
	}
	i := 0
	for j, name := range have {
		if rank(name) <= limit {
			i = j
		}
	}
	return i
}
