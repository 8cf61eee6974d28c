package launch

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/gdist/gdist/internal/affinity"
)

// childAttr puts a child in its own process group (a terminal's Ctrl-C
// then reaches the launcher only, which stops the ranks in order) and asks
// the kernel to send it SIGTERM when the launcher dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// startChild starts cmd from a thread that never exits: Linux sends the
// parent-death signal when the thread that forked the child ends, not the
// process, and the Go runtime may end a thread a goroutine was locked to.
// If cpus is not empty the child starts bound to them: the forking thread
// takes that affinity for the fork (a child inherits its forking thread's
// mask, every thread of the child then its main thread's), then gets its
// own back.
func startChild(cmd *exec.Cmd, cpus []int) error {
	errc := make(chan error)
	forker() <- func() {
		if len(cpus) > 0 {
			old, err := affinity.Thread()
			if err == nil {
				var set affinity.Mask
				for _, c := range cpus {
					set.Add(c)
				}
				err = affinity.Set(0, &set)
			}
			if err != nil {
				errc <- fmt.Errorf("binding to CPUs %v: %w", cpus, err)
				return
			}
			defer affinity.Set(0, &old)
		}
		errc <- cmd.Start()
	}
	return <-errc
}

// allowedCPUs lists the CPUs this process may run on (its calling
// thread's mask), in increasing order.
func allowedCPUs() []int { return affinity.Allowed() }

// forker runs its functions on one OS thread, locked for the process's
// life (started by the first launch).
var forker = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for f := range ch {
			f()
		}
	}()
	return ch
})

// processStopped reports whether process pid is stopped by a signal
// (state T, or t: stopped under a tracer), from /proc/<pid>/stat.
func processStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st == 'T' || st == 't'
}
