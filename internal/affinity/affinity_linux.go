// Package affinity reads and sets CPU affinity masks (Linux
// sched_getaffinity / sched_setaffinity): for the launcher, which starts
// ranks bound to CPUs of their own, and the benchmarks' -bind.
package affinity

import (
	"os"
	"syscall"
	"unsafe"
)

// Mask is a sched_setaffinity mask of up to 1024 CPUs.
type Mask [16]uint64

// Add puts cpu in the mask (CPUs past 1023 are ignored).
func (m *Mask) Add(cpu int) {
	if cpu >= 0 && cpu < len(m)*64 {
		m[cpu/64] |= 1 << (cpu % 64)
	}
}

// CPUs lists the mask's CPUs in increasing order.
func (m *Mask) CPUs() []int {
	var out []int
	for i := range len(m) * 64 {
		if m[i/64]&(1<<(i%64)) != 0 {
			out = append(out, i)
		}
	}
	return out
}

// Thread returns the calling thread's mask.
func Thread() (Mask, error) {
	var m Mask
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m))); e != 0 {
		return m, os.NewSyscallError("sched_getaffinity", e)
	}
	return m, nil
}

// Set sets thread tid's mask (0: the calling thread). The error is the
// system call's errno, wrapped (syscall.ESRCH for a thread that is gone).
func Set(tid int, m *Mask) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(*m), uintptr(unsafe.Pointer(m))); e != 0 {
		return os.NewSyscallError("sched_setaffinity", e)
	}
	return nil
}

// Allowed lists the CPUs the calling thread may run on, in increasing
// order (nil if the mask cannot be read).
func Allowed() []int {
	m, err := Thread()
	if err != nil {
		return nil
	}
	return m.CPUs()
}
