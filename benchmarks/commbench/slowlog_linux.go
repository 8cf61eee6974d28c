//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// slowOp is the threshold of -slow-log.
const slowOp = 20 * time.Microsecond

// monoNow reads CLOCK_MONOTONIC, the clock of `perf record -k mono`.
func monoNow() int64 {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// threadSwitches returns the voluntary and involuntary context switches
// of each thread of this process, by thread id.
func threadSwitches() map[string][2]int {
	m := map[string][2]int{}
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var v [2]int
		for _, l := range strings.Split(string(b), "\n") {
			fmt.Sscanf(l, "voluntary_ctxt_switches: %d", &v[0])
			fmt.Sscanf(l, "nonvoluntary_ctxt_switches: %d", &v[1])
		}
		m[e.Name()] = v
	}
	return m
}

// slowLog records one timed run for -slow-log.
type slowLog struct {
	dir    string
	rank   int
	before map[string][2]int
}

func startSlowLog(dir string, rank int) *slowLog {
	if dir == "" {
		return nil
	}
	return &slowLog{dir: dir, rank: rank, before: threadSwitches()}
}

// write writes DIR/rankN.txt: the ops of the timed run that took slowOp
// or more, as "iteration start_ns duration_ns" with CLOCK_MONOTONIC start
// times (to line up with a perf trace), after a header with the pid and
// the run's window; then each thread's context switches during the run
// and where it is blocked now (its wchan: a Go thread asleep in
// hrtimer_nanosleep is sysmon).
func (s *slowLog) write(start time.Time, starts, per []time.Duration) error {
	if s == nil || len(per) == 0 {
		return nil
	}
	after := threadSwitches()
	off := monoNow() - int64(time.Since(start))
	var b strings.Builder
	end := off + int64(starts[len(starts)-1]+per[len(per)-1])
	fmt.Fprintf(&b, "# pid %d window %d %d\n", os.Getpid(), off, end)
	for i := range per {
		if per[i] >= slowOp {
			fmt.Fprintf(&b, "%d %d %d\n", i, off+int64(starts[i]), per[i].Nanoseconds())
		}
	}
	tids := make([]string, 0, len(after))
	for tid := range after {
		tids = append(tids, tid)
	}
	sort.Strings(tids)
	for _, tid := range tids {
		a, o := after[tid], s.before[tid]
		wchan, _ := os.ReadFile("/proc/self/task/" + tid + "/wchan")
		fmt.Fprintf(&b, "# thread %s voluntary %d involuntary %d wchan %s\n", tid, a[0]-o[0], a[1]-o[1], wchan)
	}
	return os.WriteFile(filepath.Join(s.dir, fmt.Sprintf("rank%d.txt", s.rank)), []byte(b.String()), 0o644)
}
