//go:build linux

package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// bindToCPU pins every thread of this process (and so every thread it
// starts later, which inherits the mask) to one CPU: rank r gets CPU r
// modulo the CPUs this process may use, as mpirun --bind-to core does.
func bindToCPU(rank int) (int, error) {
	set, err := getAffinity()
	if err != nil {
		return -1, err
	}
	var cpus []int
	for i := range len(set) * 64 {
		if set[i/64]&(1<<(i%64)) != 0 {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) == 0 {
		return -1, fmt.Errorf("no CPU in this process's affinity mask")
	}
	cpu := cpus[rank%len(cpus)]
	var one cpuSet
	one[cpu/64] = 1 << (cpu % 64)
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

// cpuSet is a sched_setaffinity mask of up to 1024 CPUs.
type cpuSet [16]uint64

// getAffinity returns the affinity mask of the calling thread.
func getAffinity() (cpuSet, error) {
	var set cpuSet
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(set), uintptr(unsafe.Pointer(&set))); e != 0 {
		return set, fmt.Errorf("sched_getaffinity: %w", e)
	}
	return set, nil
}

// setAffinity sets the affinity mask of every thread of this process.
func setAffinity(set *cpuSet) error {
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
		if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(*set), uintptr(unsafe.Pointer(set))); e != 0 && e != syscall.ESRCH {
			return fmt.Errorf("sched_setaffinity(thread %d): %w", tid, e)
		}
	}
	return nil
}
