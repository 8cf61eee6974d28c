//go:build linux

package shm

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The futex operations on a shared (not process-private) word: the word
// lives in a MAP_SHARED mapping, so the kernel keys waiters by the
// underlying page, and a wake from another process reaches them.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// pidfd system calls (the same number on every Linux architecture).
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

// futexWait sleeps while *addr == val, for at most d. Spurious returns are
// fine: callers re-check their condition.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every waiter on addr.
func futexWake(addr *uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// ring bumps the futex word at addr and wakes its waiters.
func ring(addr *uint32) {
	atomic.AddUint32(addr, 1)
	futexWake(addr)
}

// osYield gives the CPU to another thread or process.
// (A raw system call: sched_yield never blocks, so the runtime need not
// hand the processor to another thread around it.)
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// procStart returns the start time of process pid (field 22 of
// /proc/pid/stat, in clock ticks since boot), which together with the pid
// names one process even after the pid is reused. It returns 0 if the
// process does not exist.
func procStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// procWatch tells whether one process is still alive.
type procWatch struct {
	pid   int
	start uint64
	pidfd int // -1 if pidfd_open is unavailable
}

func watchProc(pid int, start uint64) *procWatch {
	w := &procWatch{pid: pid, start: start, pidfd: -1}
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == 0 {
		syscall.CloseOnExec(int(fd))
		w.pidfd = int(fd)
	}
	return w
}

// alive reports whether the process still runs. A pidfd names exactly the
// process it was opened for; without one, kill(pid, 0) plus the start time
// guard against a reused pid.
func (w *procWatch) alive() bool {
	if w.pidfd >= 0 {
		_, _, errno := syscall.Syscall6(sysPidfdSendSignal, uintptr(w.pidfd), 0, 0, 0, 0, 0)
		return errno != syscall.ESRCH
	}
	if err := syscall.Kill(w.pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	if w.start != 0 {
		if s := procStart(w.pid); s != 0 && s != w.start {
			return false
		}
	}
	return true
}

func (w *procWatch) close() {
	if w.pidfd >= 0 {
		syscall.Close(w.pidfd)
		w.pidfd = -1
	}
}

// pidAlive reports whether a process with this pid and start time runs.
func pidAlive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	if start != 0 {
		if s := procStart(pid); s != 0 && s != start {
			return false
		}
	}
	return true
}
