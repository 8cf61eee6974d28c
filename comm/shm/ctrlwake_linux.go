//go:build linux

package shm

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The control goroutine's sleep. It used to sleep on the control bell, a
// futex word, for up to a tick. A goroutine blocked in a system call keeps
// its P (the runtime's processor) until sysmon takes it back, which on a
// rank that polls has two costs, both measured on the 2-core VM of issue 16
// (benchmarks/NOTES.md, the 4 KiB section):
//
//   - with GOMAXPROCS=1 (a rank pinned to one core) the polling goroutine
//     waits for that P: up to sysmon's period, 10 ms, every tick;
//   - sysmon takes the P back and then, having found work, polls every
//     20 us for a millisecond and doubles its period from there: about 60
//     wake-ups of a thread on the rank's core per tick, each of which
//     costs the rank 20-40 us of its core on this VM (a pinned spinner
//     beside a thread that sleeps 20 us at a time loses 34% of its time).
//
// So the control goroutine sleeps in the network poller instead, which
// holds no P: each rank binds an abstract unix datagram socket named after
// the job token and the segment's nonce, and whoever rings a control bell
// also sends one byte to that socket (ringCtrl). The bell word stays the
// record of what happened; a datagram only wakes the reader, so a spoofed
// one costs a look at the segment, nothing else. Where the socket cannot
// be bound the control goroutine sleeps on the futex as before.

// ctrlName is the abstract socket name of world rank rank's control
// goroutine.
func ctrlName(token, nonce []byte, rank int) string {
	m := hmac.New(sha256.New, token)
	fmt.Fprintf(m, "gdist-shm/1 ctrl\x00%x\x00%d", nonce, rank)
	return "@gdist-shm-ctl-" + hex.EncodeToString(m.Sum(nil)[:16])
}

// ctrlAddr is the address of a control socket, in the kernel's form
// (built once: syscall.Sendto would rebuild it on every call, in place, so
// that concurrent sends to one address race).
type ctrlAddr struct {
	raw syscall.RawSockaddrUnix
	n   uintptr // its length
}

// newCtrlAddr returns the address of an abstract socket name ("@...").
func newCtrlAddr(name string) *ctrlAddr {
	a := &ctrlAddr{n: 2 + uintptr(len(name))} // sun_family, then the name without a NUL
	a.raw.Family = syscall.AF_UNIX
	for i := 1; i < len(name); i++ {
		a.raw.Path[i] = int8(name[i])
	} // a.raw.Path[0] == 0: abstract
	return a
}

// ctrlWaker is this rank's end of the control wake-ups: the socket its
// control goroutine reads, and a socket to send wake-ups from.
type ctrlWaker struct {
	conn *net.UnixConn // nil: the control goroutine sleeps on the futex
	self *ctrlAddr     // conn's address
	send atomic.Int64  // datagram socket to send from, plus one (0: none)
}

// listen binds this rank's control socket (name from ctrlName). On
// failure the rank falls back to the futex; the error is for the log.
func (w *ctrlWaker) listen(name string) error {
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		c.Close()
		return os.NewSyscallError("socket", err)
	}
	w.conn, w.self = c, newCtrlAddr(name)
	w.send.Store(int64(fd) + 1)
	return nil
}

// wake sends one byte to the control socket at to (nil: none), without
// blocking (a raw system call, then): if the reader's queue is full, a
// wake-up is pending already.
func (w *ctrlWaker) wake(to *ctrlAddr) { w.send1(to) }

// send1 sends the byte and returns the error (EAGAIN: the queue is full).
func (w *ctrlWaker) send1(to *ctrlAddr) error {
	fd := w.send.Load()
	if to == nil || fd <= 0 {
		return syscall.EBADF
	}
	b := byte(1)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd-1), uintptr(unsafe.Pointer(&b)), 1,
		syscall.MSG_DONTWAIT, uintptr(unsafe.Pointer(&to.raw)), to.n); e != 0 {
		return e
	}
	return nil
}

// checkCtrlPeers is called once every rank has bound its socket (after
// attach), before the control goroutine starts. Abstract socket names
// live in a network namespace: ranks that share the segment but not the
// namespace (containers sharing /dev/shm) cannot reach each other's
// sockets, in either direction, so a rank that cannot reach some peer's
// sleeps on the futex instead (every ringer rings both).
func (t *Transport) checkCtrlPeers() {
	w := &t.ctrlWake
	if w.conn == nil {
		return
	}
	for _, l := range t.peers {
		if err := w.send1(l.peerCtrlAddr); err != nil && err != syscall.EAGAIN {
			t.logf("shm: rank %d: rank %d's control socket is unreachable (%v; another network namespace?): sleeping on the futex", t.rank, l.peer, err)
			w.conn.Close()
			w.conn = nil
			return
		}
	}
}

// sleep waits until the control bell moves past seen (a datagram
// arrives), the tick passes, or close is called. Control goroutine only.
func (t *Transport) ctrlSleep(seen uint32) {
	w := &t.ctrlWake
	if w.conn == nil {
		futexWait(t.ctrlBell, seen, t.tick)
		return
	}
	if atomic.LoadUint32(t.ctrlBell) != seen {
		return
	}
	var b [8]byte
	w.conn.SetReadDeadline(time.Now().Add(t.tick))
	if _, _, err := w.conn.ReadFrom(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !t.stopCtrl.Load() {
		// Should not happen; sleep on the futex from now on rather
		// than spin on a broken socket.
		t.logf("shm: rank %d: control socket: %v; sleeping on the futex instead", t.rank, err)
		w.conn.Close()
		w.conn = nil
	}
}

// close releases the sockets once the control goroutine has stopped.
func (w *ctrlWaker) close() {
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
	if fd := w.send.Swap(0); fd > 0 {
		syscall.Close(int(fd - 1))
	}
}

// ringCtrl bumps the peer's control bell and wakes its control goroutine.
func (l *link) ringCtrl() {
	ring(l.peerCtrlBell) // a peer without a control socket sleeps on the futex
	l.t.ctrlWake.wake(l.peerCtrlAddr)
}
