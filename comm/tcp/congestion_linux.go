package tcp

import (
	"net"
	"syscall"
)

// setCongestion sets the TCP congestion control algorithm of tc.
func setCongestion(tc *net.TCPConn, name string) error {
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	return serr
}
