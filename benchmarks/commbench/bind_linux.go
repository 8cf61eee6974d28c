//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"github.com/gdist/gdist/internal/affinity"
)

// bindToCPU pins every thread of this process (and so every thread it
// starts later, which inherits the mask) to one CPU: rank r gets CPU r
// modulo the CPUs this process may use, as mpirun --bind-to core does.
func bindToCPU(rank int) (int, error) {
	set, err := affinity.Thread()
	if err != nil {
		return -1, err
	}
	cpus := set.CPUs()
	if len(cpus) == 0 {
		return -1, fmt.Errorf("no CPU in this process's affinity mask")
	}
	cpu := cpus[rank%len(cpus)]
	var one affinity.Mask
	one.Add(cpu)
	if err := setAffinity(&one); err != nil {
		return -1, fmt.Errorf("CPU %d: %w", cpu, err)
	}
	return cpu, nil
}

// fitGOMAXPROCS sets GOMAXPROCS to what the runtime would have chosen had
// the process started with its present affinity mask (1 after bindToCPU),
// unless $GOMAXPROCS sets it. The runtime reads the mask at start and then
// about once a second; until then a pinned rank would keep two Ps on one
// CPU, and the idle one's thread (waking for timers and to steal work)
// takes that CPU from the rank's polling thread for 20-40 us each time on
// the 2-core VM of issue 16.
func fitGOMAXPROCS() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
	}
}

// setAffinity sets the affinity mask of every thread of this process.
func setAffinity(set *affinity.Mask) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := affinity.Set(tid, set); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}
