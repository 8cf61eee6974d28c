package launch

import (
	"strconv"
	"strings"
)

// Binding ranks to CPUs (Spec.BindCPUs).
//
// With the ranks spread by the kernel, two busy ranks on a 2-core machine
// end up on one CPU for stretches (the wake-affine placement after a
// wake-up), each thread wake-up of a rank's process (the Go runtime's
// sysmon and idle threads) lands on whichever CPU, and a rank's goroutines
// move between CPUs. mpirun binds each rank to a core by default for the
// same reasons. Measured on the 2-core VM of issue 16 (benchmarks/NOTES.md,
// the 4 KiB section): train -nproc 2 mlp and cnn took more samples/s with
// the ranks bound, and the 4 KiB all-reduce's slow operations went.

// cpuBlocks splits cpus (the CPUs the launcher may run on, in order) into
// n blocks of consecutive CPUs, as even as can be (the first len(cpus)%n
// blocks one CPU larger), or returns nil when there are fewer CPUs than
// ranks: ranks that share CPUs are better left to the kernel (mpirun does
// not bind an oversubscribed job either).
func cpuBlocks(cpus []int, n int) [][]int {
	if n < 1 || len(cpus) < n {
		return nil
	}
	out := make([][]int, n)
	k, extra := len(cpus)/n, len(cpus)%n
	at := 0
	for r := range out {
		m := k
		if r < extra {
			m++
		}
		out[r] = cpus[at : at+m : at+m]
		at += m
	}
	return out
}

// cpuList formats cpus as GDIST_CPUS holds them: "0", "2,3".
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// BoundCPUs returns the CPUs this worker's launcher bound it to
// (GDIST_CPUS, set with Spec.BindCPUs), or nil if it did not. A bound
// worker runs on CPUs of its own: it should size its thread pools (BLAS)
// to them rather than divide the host's CPUs among the local ranks. (Its
// Go runtime already does: the process started with that affinity, so
// GOMAXPROCS defaults to their number.)
func BoundCPUs() []int {
	v := cpusVar()
	if !IsWorker() || v == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 0 {
			return nil
		}
		out = append(out, c)
	}
	return out
}
