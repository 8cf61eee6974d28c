//go:build linux

package multihost

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Cluster is a set of simulated hosts joined by one switch.
type Cluster struct {
	Hosts []*Host
	sw    string // the switch's network namespace
	t     testing.TB
}

// Host is one simulated host.
type Host struct {
	Name string // hostname, also the name of its network namespace
	IP   string // IPv4 address on eth0
	IP6  string // IPv6 address on eth0
	port string // its veth end on the switch
	c    *Cluster
	pid  int // the keeper process holding its UTS and mount namespaces
}

var seq atomic.Int32

// Available reports whether simulated hosts can be built here, and if not
// why.
func Available() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "needs root (network namespaces)"
	}
	for _, p := range []string{"ip", "unshare", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			return false, fmt.Sprintf("needs %s (apt-get install iproute2 util-linux): %v", p, err)
		}
	}
	return true, ""
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// New builds n hosts, or skips t saying why it cannot.
func New(t testing.TB, n int) *Cluster {
	t.Helper()
	if ok, why := Available(); !ok {
		t.Skip("multihost: " + why)
	}
	sweep()
	n0 := seq.Add(1)
	id := fmt.Sprintf("%x%x", os.Getpid()&0xffff, n0) // for interface names (15 bytes at most)
	ns := fmt.Sprintf("%s%d-%d-", nsPrefix, os.Getpid(), n0)
	c := &Cluster{sw: ns + "sw", t: t}
	t.Cleanup(c.close)
	if err := run("ip", "netns", "add", c.sw); err != nil {
		t.Skipf("multihost: cannot make network namespaces here: %v", err)
	}
	must := func(args ...string) {
		t.Helper()
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("ip", "-n", c.sw, "link", "add", "br0", "type", "bridge")
	must("ip", "-n", c.sw, "link", "set", "br0", "up")
	for i := range n {
		h := &Host{Name: fmt.Sprintf("%sh%d", ns, i), IP: fmt.Sprintf("10.77.0.%d", i+1),
			IP6: fmt.Sprintf("fd77::%d", i+1), port: fmt.Sprintf("gdp%d%s", i, id), c: c}
		c.Hosts = append(c.Hosts, h)
		must("ip", "netns", "add", h.Name)
		tmp := fmt.Sprintf("gdv%d%s", i, id)
		must("ip", "link", "add", tmp, "type", "veth", "peer", "name", h.port)
		must("ip", "link", "set", h.port, "netns", c.sw)
		must("ip", "-n", c.sw, "link", "set", h.port, "master", "br0", "up")
		must("ip", "link", "set", tmp, "netns", h.Name)
		must("ip", "-n", h.Name, "link", "set", tmp, "name", "eth0")
		must("ip", "-n", h.Name, "addr", "add", h.IP+"/24", "dev", "eth0")
		must("ip", "-n", h.Name, "addr", "add", h.IP6+"/64", "dev", "eth0", "nodad")
		must("ip", "-n", h.Name, "link", "set", "eth0", "up")
		must("ip", "-n", h.Name, "link", "set", "lo", "up")
		if err := h.startKeeper(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// nsPrefix starts the names of the namespaces New makes:
// <nsPrefix><pid>-<n>-sw and <nsPrefix><pid>-<n>-h<i>.
const nsPrefix = "gdmh-"

// sweep removes what a test process that was killed (so its cleanups never
// ran) left behind: the namespaces named after a process that is gone, and
// the keepers holding them.
func sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its test still runs
		}
		if pids, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
			for _, f := range strings.Fields(string(pids)) {
				var p int
				if _, err := fmt.Sscan(f, &p); err == nil && p > 1 {
					syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
		run("ip", "netns", "del", name)
	}
}

// startKeeper starts the process that holds the host's UTS and mount
// namespaces (hostname, private /dev/shm) for the processes that join it.
func (h *Host) startKeeper() error {
	cmd := exec.Command("ip", "netns", "exec", h.Name, "unshare", "--uts", "--mount", "--propagation", "private", "--",
		"sh", "-c", "hostname \"$0\" && mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm && echo ready && exec sleep 86400", h.Name)
	cmd.Stderr = os.Stderr
	// The keeper dies with the test process, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("multihost: starting host %s: %w", h.Name, err)
	}
	h.pid = cmd.Process.Pid
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("multihost: host %s did not start (%q, %v)", h.Name, line, err)
	}
	go cmd.Wait()
	return nil
}

// Command returns a command that runs name with args on the host, with
// env added to this process's environment. Like exec.CommandContext, it is
// killed when ctx ends. Its process is the program itself (nsenter execs
// it), so killing it kills the program; it is also killed if the test
// process dies.
func (h *Host) Command(ctx context.Context, env []string, name string, args ...string) *exec.Cmd {
	a := append([]string{"-t", fmt.Sprint(h.pid), "--net", "--uts", "--mount", "--", name}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", a...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test process
	return cmd
}

// CutLink takes the host's cable out of the switch: its veth end on the
// bridge goes down, so packets stop flowing both ways with no reset.
func (h *Host) CutLink() error {
	return run("ip", "-n", h.c.sw, "link", "set", h.port, "down")
}

// Shape applies a tc queueing discipline (e.g. "netem rate 1gbit delay
// 100us", or "tbf rate 1gbit burst 128kb latency 5ms" where the kernel
// has no netem) to the host's link, both ways: on its eth0 and on its port
// on the switch.
func (h *Host) Shape(qdisc string) error {
	args := strings.Fields(qdisc)
	if err := run(append([]string{"ip", "netns", "exec", h.Name, "tc", "qdisc", "replace", "dev", "eth0", "root"}, args...)...); err != nil {
		return err
	}
	return run(append([]string{"ip", "netns", "exec", h.c.sw, "tc", "qdisc", "replace", "dev", h.port, "root"}, args...)...)
}

func (c *Cluster) close() {
	for _, h := range c.Hosts {
		if h.pid > 0 {
			syscall.Kill(h.pid, syscall.SIGKILL)
		}
		run("ip", "netns", "del", h.Name)
	}
	run("ip", "netns", "del", c.sw)
}
