package launch

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestCPUBlocks(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		n    int
		want [][]int
	}{
		{[]int{0, 1}, 2, [][]int{{0}, {1}}},
		{[]int{0, 1}, 1, [][]int{{0, 1}}},
		{[]int{0, 1}, 3, nil},
		{[]int{2, 3, 5, 7, 8}, 2, [][]int{{2, 3, 5}, {7, 8}}},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, 3, [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7}}},
		{nil, 1, nil},
	} {
		got := cpuBlocks(tc.cpus, tc.n)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("cpuBlocks(%v, %d) = %v, want %v", tc.cpus, tc.n, got, tc.want)
		}
	}
	if got := cpuList([]int{2, 3}); got != "2,3" {
		t.Errorf("cpuList: %q", got)
	}
}

// childCPUs is the "cpus" child: it reports the CPUs it may run on, its
// GDIST_CPUS and its GOMAXPROCS.
func childCPUs() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 30
	}
	allowed := "?"
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			allowed = strings.TrimSpace(v)
		}
	}
	fmt.Fprintf(os.Stderr, "allowed=%s bound=%v gomaxprocs=%d\n", allowed, BoundCPUs(), runtime.GOMAXPROCS(0))
	return 0
}

// TestBindCPUs: with Spec.BindCPUs each rank starts on a block of CPUs of
// its own (as /proc reports its affinity) and learns it from BoundCPUs,
// with the GOMAXPROCS it would have had unbound; the launcher keeps its
// CPUs. With more ranks than CPUs nothing is bound.
func TestBindCPUs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("binding needs Linux")
	}
	cpus := allowedCPUs()
	if len(cpus) == 0 {
		t.Skip("no affinity mask")
	}
	for _, nproc := range []int{min(2, len(cpus)), len(cpus) + 1} {
		s, _, errOut := spec(t, nproc, "cpus")
		s.BindCPUs = true
		if err := Run(testCtx(t), s); err != nil {
			t.Fatalf("%v\nstderr:\n%s", err, errOut)
		}
		blocks := cpuBlocks(cpus, nproc)
		for r := range nproc {
			want := "bound=[]"
			if blocks != nil {
				want = fmt.Sprintf("bound=%v", blocks[r])
				want += fmt.Sprintf(" gomaxprocs=%d", runtime.GOMAXPROCS(0))
			}
			line := ""
			for _, l := range strings.Split(errOut.String(), "\n") {
				if strings.HasPrefix(l, fmt.Sprintf("[rank %d] allowed=", r)) {
					line = l
				}
			}
			if !strings.Contains(line, want) {
				t.Errorf("%d ranks, rank %d: %q, want %q", nproc, r, line, want)
			}
			if blocks != nil && !strings.Contains(line, "allowed="+rangeList(blocks[r])+" ") {
				t.Errorf("%d ranks, rank %d: %q, want allowed=%s", nproc, r, line, rangeList(blocks[r]))
			}
		}
	}
	if got := allowedCPUs(); !slices.Equal(got, cpus) {
		t.Errorf("the launcher's CPUs changed: %v, were %v", got, cpus)
	}
}

// rangeList formats cpus as /proc's Cpus_allowed_list does ("0", "2-3").
func rangeList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
