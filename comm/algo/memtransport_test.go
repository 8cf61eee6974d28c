package algo

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/wire"
)

// memTransport is a minimal in-memory Transport for the tests of this
// package. With payload set it is also a PayloadReceiver that hands the
// sender's memory over in randomly cut pieces (elements split across
// pieces included), so the tests cover the reduce-from-payload path.

type memKey struct {
	from, to int
	group    uint64
	kind     wire.Kind
	tag      uint64
}

type memMsg struct {
	h    wire.Header
	data []byte
	done chan error
}

type memHub struct {
	n       int
	payload bool
	mu      sync.Mutex
	q       map[memKey][]*memMsg
	failed  map[[2]uint64]error // (rank, group) -> error
	closed  []bool
	changed chan struct{}
}

func (h *memHub) wake() {
	close(h.changed)
	h.changed = make(chan struct{})
}

type memTransport struct {
	hub  *memHub
	rank int
	rng  *rand.Rand // piece cuts (used by the receiving goroutine only under mu)
}

// newMemWorld returns n Comms over one memHub.
func newMemWorld(n int, payload bool) []comm.Comm {
	h := &memHub{n: n, payload: payload, q: map[memKey][]*memMsg{}, failed: map[[2]uint64]error{},
		closed: make([]bool, n), changed: make(chan struct{})}
	out := make([]comm.Comm, n)
	for r := range out {
		var t Transport = &memTransport{hub: h, rank: r, rng: rand.New(rand.NewPCG(uint64(r), 9))}
		if payload {
			t = &memPayloadTransport{t.(*memTransport)}
		}
		out[r] = NewComm(t, comm.Options{})
	}
	return out
}

func (t *memTransport) Rank() int { return t.rank }
func (t *memTransport) Size() int { return t.hub.n }

func (t *memTransport) key(from, to int, h wire.Header) memKey {
	k := memKey{from: from, to: to, group: h.Group, kind: h.Kind}
	if h.Kind == wire.KindP2P {
		k.tag = h.Seq
	}
	return k
}

func (t *memTransport) errLocked(group uint64) error {
	if t.hub.closed[t.rank] {
		return comm.ErrClosed
	}
	return t.hub.failed[[2]uint64{uint64(t.rank), group}]
}

func (t *memTransport) Send(ctx context.Context, to int, h wire.Header, payload []byte) error {
	hub := t.hub
	h.Total, h.Offset, h.Len = uint64(len(payload)), 0, 0
	m := &memMsg{h: h, data: payload, done: make(chan error, 1)}
	hub.mu.Lock()
	if err := t.errLocked(h.Group); err != nil {
		hub.mu.Unlock()
		return err
	}
	k := t.key(t.rank, to, h)
	hub.q[k] = append(hub.q[k], m)
	hub.wake()
	for {
		ch := hub.changed
		hub.mu.Unlock()
		select {
		case err := <-m.done:
			return err
		case <-ctx.Done():
		case <-ch:
		}
		hub.mu.Lock()
		err := t.errLocked(h.Group)
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			// Withdraw the message if nobody took it yet.
			q := hub.q[k]
			for i, x := range q {
				if x == m {
					hub.q[k] = append(q[:i:i], q[i+1:]...)
					hub.mu.Unlock()
					return err
				}
			}
			hub.mu.Unlock()
			return <-m.done // being received right now
		}
	}
}

// take waits for the next message of the stream and checks it.
func (t *memTransport) take(ctx context.Context, from int, h wire.Header, n int) (*memMsg, error) {
	hub := t.hub
	want := h
	want.Total, want.Offset, want.Len = uint64(n), 0, 0
	k := t.key(from, t.rank, h)
	hub.mu.Lock()
	for {
		if err := t.errLocked(h.Group); err != nil {
			hub.mu.Unlock()
			return nil, err
		}
		if q := hub.q[k]; len(q) > 0 {
			m := q[0]
			hub.q[k] = q[1:]
			hub.mu.Unlock()
			if err := wire.Match(m.h, want); err != nil {
				m.done <- &wire.MismatchError{Got: want, Want: m.h}
				return nil, err
			}
			return m, nil
		}
		ch := hub.changed
		hub.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
		hub.mu.Lock()
	}
}

func (t *memTransport) Recv(ctx context.Context, from int, h wire.Header, dst []byte) error {
	m, err := t.take(ctx, from, h, len(dst))
	if err != nil {
		return err
	}
	copy(dst, m.data)
	m.done <- nil
	return nil
}

func (t *memTransport) Abort(group uint64, peers []int, cause error) {
	hub := t.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	set := func(r int, err error) {
		k := [2]uint64{uint64(r), group}
		if hub.failed[k] == nil {
			hub.failed[k] = err
		}
	}
	set(t.rank, cause)
	for _, p := range peers {
		set(p, fmt.Errorf("%w: rank %d aborted: %w", comm.ErrAborted, t.rank, cause))
	}
	hub.wake()
}

func (t *memTransport) Close() error {
	hub := t.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	hub.closed[t.rank] = true
	hub.wake()
	return nil
}

type memPayloadTransport struct{ *memTransport }

var _ PayloadReceiver = memPayloadTransport{}

func (t memPayloadTransport) RecvPayload(ctx context.Context, from int, h wire.Header, n int, fn func(off int, payload []byte)) error {
	m, err := t.take(ctx, from, h, n)
	if err != nil {
		return err
	}
	t.hub.mu.Lock()
	var cuts []int
	for off := 0; off < len(m.data); {
		step := 1 + t.rng.IntN(max(1, len(m.data)/3))
		if t.rng.IntN(2) == 0 {
			step = len(m.data) - off
		}
		off = min(len(m.data), off+step)
		cuts = append(cuts, off)
	}
	t.hub.mu.Unlock()
	prev := 0
	for _, c := range cuts {
		fn(prev, m.data[prev:c])
		prev = c
	}
	m.done <- nil
	return nil
}

// memEagerTransport is a memPayloadTransport whose Send of up to eagerBytes
// hands a copy over and returns at once: an EagerSender, so that the tests
// cover sending, then receiving, on one goroutine.
type memEagerTransport struct{ memPayloadTransport }

const eagerBytes = 1 << 12

var _ EagerSender = memEagerTransport{}

func (t memEagerTransport) EagerBytes(int) int { return eagerBytes }

func (t memEagerTransport) Send(ctx context.Context, to int, h wire.Header, payload []byte) error {
	if len(payload) > eagerBytes {
		return t.memTransport.Send(ctx, to, h, payload)
	}
	hub := t.hub
	h.Total, h.Offset, h.Len = uint64(len(payload)), 0, 0
	m := &memMsg{h: h, data: bytes.Clone(payload), done: make(chan error, 1)}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if err := t.errLocked(h.Group); err != nil {
		return err
	}
	k := t.key(t.rank, to, h)
	hub.q[k] = append(hub.q[k], m)
	hub.wake()
	return nil
}

// newMemEagerWorld returns n Comms with opts over one memHub of
// memEagerTransports.
func newMemEagerWorld(n int, opts comm.Options) []comm.Comm {
	h := &memHub{n: n, payload: true, q: map[memKey][]*memMsg{}, failed: map[[2]uint64]error{},
		closed: make([]bool, n), changed: make(chan struct{})}
	out := make([]comm.Comm, n)
	for r := range out {
		mt := &memTransport{hub: h, rank: r, rng: rand.New(rand.NewPCG(uint64(r), 9))}
		out[r] = NewComm(memEagerTransport{memPayloadTransport{mt}}, opts)
	}
	return out
}

// memHostTransport and memHostStaged add a HostMap to the test transports.
type memHostTransport struct {
	memEagerTransport
	hosts []string
}

type memHostStaged struct {
	*memTransport
	hosts []string
}

func (t memHostTransport) Hosts() []string { return t.hosts }
func (t memHostStaged) Hosts() []string    { return t.hosts }

func newMemHostWorld(hosts []string, kind string) []comm.Comm {
	n := len(hosts)
	h := &memHub{n: n, payload: kind == "eager", q: map[memKey][]*memMsg{}, failed: map[[2]uint64]error{},
		closed: make([]bool, n), changed: make(chan struct{})}
	out := make([]comm.Comm, n)
	for r := range out {
		mt := &memTransport{hub: h, rank: r, rng: rand.New(rand.NewPCG(uint64(r), 9))}
		if kind == "eager" {
			out[r] = NewComm(memHostTransport{memEagerTransport{memPayloadTransport{mt}}, hosts}, comm.Options{})
		} else {
			out[r] = NewComm(memHostStaged{mt, hosts}, comm.Options{})
		}
	}
	return out
}
