//go:build !linux

package tcp

import (
	"errors"
	"net"
)

// setCongestion is Linux only.
func setCongestion(tc *net.TCPConn, name string) error {
	return errors.New("choosing the congestion control needs Linux")
}
