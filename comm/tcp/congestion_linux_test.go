package tcp

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/gdist/gdist/comm"
)

// congestion returns the congestion control of c's socket.
func congestion(t *testing.T, c *conn) string {
	rc, err := c.nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var gerr error
	rc.Control(func(fd uintptr) {
		var buf [32]byte
		n := uint32(len(buf))
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_CONGESTION,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e != 0 {
			gerr = e
			return
		}
		name = strings.TrimRight(string(buf[:n]), "\x00")
	})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return name
}

// TestCongestion: links over loopback run DefaultCongestion; "system"
// leaves the kernel's default.
func TestCongestion(t *testing.T) {
	t.Setenv(EnvCongestion, "")
	w := mkMesh(t, 2, comm.Options{})
	for r, tr := range w.ts {
		if got := congestion(t, tr.conns[1-r]); got != DefaultCongestion {
			t.Errorf("rank %d: congestion control %q, want %q", r, got, DefaultCongestion)
		}
	}
	t.Setenv(EnvCongestion, congestionSystem)
	w = mkMesh(t, 2, comm.Options{})
	def, err := readSysctl("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skip(err)
	}
	for r, tr := range w.ts {
		if got := congestion(t, tr.conns[1-r]); got != def {
			t.Errorf("rank %d with %s=%s: congestion control %q, want the kernel's %q", r, EnvCongestion, congestionSystem, got, def)
		}
	}
}

func readSysctl(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}
