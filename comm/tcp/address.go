package tcp

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gdist/gdist/comm"
)

// Environment variables read by the transport.
const (
	// EnvHost is the address other ranks use to reach this one.
	EnvHost = "GDIST_HOST"
	// EnvSocketIfname names the network interface(s) whose address this
	// rank advertises (comma-separated; the first one that exists and has
	// an address wins), like GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME.
	EnvSocketIfname = "GDIST_SOCKET_IFNAME"
	// EnvConnectTimeout bounds mesh construction once every rank has
	// published its address: a Go duration ("45s") or a number of seconds.
	EnvConnectTimeout = "GDIST_CONNECT_TIMEOUT"
	// EnvCongestion names the TCP congestion control of the links between
	// ranks on one host (Options.Congestion).
	EnvCongestion = "GDIST_TCP_CONGESTION"
)

// DefaultConnectTimeout is the default of Options.ConnectTimeout.
const DefaultConnectTimeout = 20 * time.Second

// Where an advertised address came from (named in errors).
const (
	srcConfig = "Config.Host"
	srcEnv    = EnvHost
	srcStore  = "the local address of its connection to the store"
	srcNone   = "the default, 127.0.0.1"
)

// advert is this rank's advertised host and the address it listens on.
type advert struct {
	host   string // what the other ranks dial (without port)
	listen string // host:port to listen on
	src    string // where host came from
}

// localAddrer is implemented by store clients that know the local address
// of their connection (rendezvous.Client).
type localAddrer interface{ LocalAddr() net.Addr }

// advertise picks the address this rank advertises: Config.Host, else
// o.Host ($GDIST_HOST), else the address of o.SocketIfname
// ($GDIST_SOCKET_IFNAME), else the local
// address of this rank's connection to the store (which the master, and so
// by construction the other hosts, can reach), else 127.0.0.1. A host given
// by the user (Config.Host, GDIST_HOST) that is not loopback is listened on
// on all interfaces (it may be a NAT address); an address found on a local
// interface is listened on as is.
func advertise(cfg comm.Config, o Options) (advert, error) {
	host, src := cfg.Host, srcConfig
	if host == "" {
		host, src = o.Host, srcEnv
	}
	if host != "" {
		if host == "localhost" {
			host = "127.0.0.1" // one address family for listener and dialers
		}
		listen := ":0"
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			listen = net.JoinHostPort(host, "0")
		}
		return advert{host: host, listen: listen, src: src}, nil
	}
	if names := o.SocketIfname; names != "" {
		ip, name, err := interfaceAddr(names)
		if err != nil {
			return advert{}, err
		}
		return advert{host: ip, listen: net.JoinHostPort(ip, "0"), src: EnvSocketIfname + "=" + name}, nil
	}
	if la, ok := cfg.Store.(localAddrer); ok {
		if ta, ok := la.LocalAddr().(*net.TCPAddr); ok && ta.IP != nil && !ta.IP.IsUnspecified() {
			ip := ta.IP.String()
			if ta.Zone != "" {
				ip += "%" + ta.Zone
			}
			return advert{host: ip, listen: net.JoinHostPort(ip, "0"), src: srcStore}, nil
		}
	}
	return advert{host: "127.0.0.1", listen: "127.0.0.1:0", src: srcNone}, nil
}

// interfaceAddr returns an address of the first interface in the
// comma-separated list names that exists and has one: IPv4 first, then a
// global IPv6 address, then a link-local IPv6 one (with its zone).
func interfaceAddr(names string) (ip, name string, err error) {
	var tried []string
	for _, name := range strings.Split(names, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			tried = append(tried, name+": no such interface")
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		var v6, ll string
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			switch {
			case ipn.IP.To4() != nil:
				return ipn.IP.String(), name, nil
			case ipn.IP.IsLinkLocalUnicast():
				if ll == "" {
					ll = ipn.IP.String() + "%" + name
				}
			case v6 == "":
				v6 = ipn.IP.String()
			}
		}
		if v6 != "" {
			return v6, name, nil
		}
		if ll != "" {
			return ll, name, nil
		}
		tried = append(tried, name+": no address")
	}
	var have []string
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifi := range ifs {
			have = append(have, ifi.Name)
		}
	}
	return "", "", comm.InvalidArgf("tcp: %s=%q: no usable interface (%s); this host has %s",
		EnvSocketIfname, names, strings.Join(tried, "; "), strings.Join(have, ", "))
}

// netID identifies the network namespace of this process: two processes
// with equal non-empty netIDs reach each other's loopback addresses. It is
// empty where it cannot tell (not Linux).
func netID() string {
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
}

// peerInfo is what each rank publishes about itself in the store (the
// info key), read by every rank linked with it.
type peerInfo struct {
	addr string // host:port to dial; empty if this rank does not listen
	src  string // where the host of addr came from
	host string // host id (for messages)
	net  string // netID
}

func (p peerInfo) encode() []byte {
	return fmt.Appendf(nil, "addr=%s\nsrc=%s\nhost=%s\nnet=%s", p.addr, p.src, p.host, p.net)
}

func decodeInfo(b []byte) peerInfo {
	var p peerInfo
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "addr":
			p.addr = v
		case "src":
			p.src = v
		case "host":
			p.host = v
		case "net":
			p.net = v
		}
	}
	return p
}

// sameNetwork reports whether a and b share a network namespace, so that
// one reaches the other's loopback addresses.
func sameNetwork(a, b peerInfo) bool {
	if a.net != "" && b.net != "" {
		return a.net == b.net
	}
	return a.host == b.host
}

// isLoopback reports whether addr (host:port) is a loopback address.
func isLoopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// shortHost is the hostname part of a host id (for messages).
func shortHost(id string) string {
	h, _, _ := strings.Cut(id, "/")
	if h == "" {
		return id
	}
	return h
}

// fixHint says what to set so that rank r is reached at another address.
func fixHint(r int, p peerInfo) string {
	return fmt.Sprintf("set %s on rank %d (host %s) to an address the other hosts can reach, or %s to the interface to use",
		EnvHost, r, shortHost(p.host), EnvSocketIfname)
}

// checkReachable fails if, of this rank and a peer linked with it, the
// lower one (which the other dials) advertised a loopback address while the
// two run in different network namespaces (on different hosts), so that the
// address cannot reach it. Both ends of such a link fail with the same
// message.
func checkReachable(self int, peers []int, infos []peerInfo) error {
	for _, p := range peers {
		i, j := min(self, p), max(self, p)
		if !isLoopback(infos[i].addr) || sameNetwork(infos[i], infos[j]) {
			continue
		}
		return fmt.Errorf("%w: rank %d advertised %s (%s), a loopback address, but rank %d runs on another host (%s; rank %d is on %s) and cannot reach it: %s",
			comm.ErrInvalidArgument, i, infos[i].addr, infos[i].src, j, shortHost(infos[j].host), i, shortHost(infos[i].host), fixHint(i, infos[i]))
	}
	return nil
}
