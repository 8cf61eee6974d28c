//go:build linux

package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gdist/gdist/internal/affinity"
)

// TestBindToCPU: -bind pins the process to the rank's CPU (rank modulo
// the allowed CPUs), on every thread, as /proc reports it, and (unless
// $GOMAXPROCS says otherwise) runs it with GOMAXPROCS 1 to match.
func TestBindToCPU(t *testing.T) {
	before, err := affinity.Thread()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := setAffinity(&before); err != nil {
			t.Errorf("restoring the affinity: %v", err)
		}
		fitGOMAXPROCS()
	}()
	cpu, err := bindToCPU(1)
	if err != nil {
		t.Fatal(err)
	}
	fitGOMAXPROCS()
	if os.Getenv("GOMAXPROCS") == "" {
		if n := runtime.GOMAXPROCS(0); n != 1 {
			t.Errorf("GOMAXPROCS %d after binding to one CPU", n)
		}
	}
	if before[cpu/64]&(1<<(cpu%64)) == 0 {
		t.Fatalf("bound to CPU %d, which the process may not use", cpu)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if got := strings.TrimSpace(v); got != strconv.Itoa(cpu) {
					t.Errorf("thread %s: allowed CPUs %q, want %d", task.Name(), got, cpu)
				}
			}
		}
	}
}
