package algo

import (
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gdist/gdist/comm"
)

// Router is implemented by transports made of several (comm/auto: shared
// memory inside a host, TCP across): Route names the one that reaches
// world rank peer ("shm", "tcp"). Comm.Moved counts per route; a
// transport that is no Router is named after its package (shm, tcp,
// inproc).
type Router interface {
	Route(peer int) string
}

// peerTraffic is what this rank moved to and from one peer (comm.Moved).
type peerTraffic struct {
	sent, received, written, read atomic.Int64
}

// traffic returns the counters of peer q of c (a rank of c) on the Comm
// that counts for c (the one it is a view of).
func (c *Comm) traffic(q int) *peerTraffic {
	c0, _ := c.outer(0)
	return &c0.moved[c.members[q]]
}

// Moved returns what this rank moved to and from the other ranks of c
// since c was made, per transport, in payload bytes (see comm.Moved):
// messages as sent and received, the zero-copy collectives' bytes as
// written into and read from the peers' shared buffers. Sorted by
// transport name.
func (c *Comm) Moved() []comm.Moved {
	var out []comm.Moved
	rt, _ := c.t.(Router)
	for w := range c.moved {
		pt := &c.moved[w]
		m := comm.Moved{Sent: pt.sent.Load(), Received: pt.received.Load(), Written: pt.written.Load(), Read: pt.read.Load()}
		if m == (comm.Moved{}) {
			continue
		}
		m.Transport = transportName(c.t)
		if rt != nil {
			m.Transport = rt.Route(w)
		}
		i := slices.IndexFunc(out, func(o comm.Moved) bool { return o.Transport == m.Transport })
		if i < 0 {
			out = append(out, m)
			continue
		}
		o := &out[i]
		o.Sent, o.Received, o.Written, o.Read = o.Sent+m.Sent, o.Received+m.Received, o.Written+m.Written, o.Read+m.Read
	}
	slices.SortFunc(out, func(a, b comm.Moved) int { return strings.Compare(a.Transport, b.Transport) })
	return out
}

// transportName is the last element of t's package path.
func transportName(t Transport) string {
	ty := reflect.TypeOf(t)
	for ty.Kind() == reflect.Pointer {
		ty = ty.Elem()
	}
	p := ty.PkgPath()
	return p[strings.LastIndex(p, "/")+1:]
}

var _ comm.MovedCounter = (*Comm)(nil)
