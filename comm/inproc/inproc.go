// Package inproc is the in-process backend: the ranks are goroutines of one
// process and messages are never serialized. A Send hands the receiver a
// reference to the sender's memory; the receiver copies it straight into its
// own buffer (one copy per message) and releases the sender. Messages of at
// most EagerBytes (16 KiB) are copied out by the sender instead, which
// returns at once (algo.EagerSender): the algorithms then send and receive
// on one goroutine, and a small collective costs no goroutine, channel or
// allocation beyond its Work (the messages and their copies are reused).
//
// Build the ranks with New (returns every rank's Comm at once), or through
// the registry: comm.New(ctx, "inproc", comm.Config{Rank, Size, Job}) called
// from Size goroutines with the same Job.
package inproc

import (
	"context"
	"fmt"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/internal/wire"
)

// New returns n connected Comms, one per rank, sharing this process.
func New(n int, opts comm.Options) ([]comm.Comm, error) {
	if n < 1 {
		return nil, comm.InvalidArgf("inproc: world size %d < 1", n)
	}
	h := newHub(n)
	out := make([]comm.Comm, n)
	for r := range out {
		out[r] = algo.NewComm(&Transport{hub: h, rank: r}, opts)
	}
	return out, nil
}

func init() {
	comm.Register("inproc", join)
}

var (
	jobsMu sync.Mutex
	jobs   = map[string]*pending{}
)

type pending struct {
	hub    *hub
	joined []bool
	left   int
}

// join is the registry factory: ranks of one Job meet in a shared hub.
func join(ctx context.Context, cfg comm.Config) (comm.Comm, error) {
	jobsMu.Lock()
	pj := jobs[cfg.Job]
	if pj == nil {
		pj = &pending{hub: newHub(cfg.Size), joined: make([]bool, cfg.Size), left: cfg.Size}
		jobs[cfg.Job] = pj
	}
	if pj.hub.n != cfg.Size {
		jobsMu.Unlock()
		return nil, comm.InvalidArgf("inproc: job %q has world size %d, rank %d asked for %d", cfg.Job, pj.hub.n, cfg.Rank, cfg.Size)
	}
	if pj.joined[cfg.Rank] {
		jobsMu.Unlock()
		return nil, comm.InvalidArgf("inproc: rank %d of job %q joined twice", cfg.Rank, cfg.Job)
	}
	pj.joined[cfg.Rank] = true
	pj.left--
	if pj.left == 0 {
		delete(jobs, cfg.Job)
	}
	jobsMu.Unlock()
	return algo.NewComm(&Transport{hub: pj.hub, rank: cfg.Rank}, cfg.Options), nil
}

type streamKey struct {
	from  int
	group uint64
	kind  wire.Kind
	tag   uint64
}

type groupKey struct {
	rank  int
	group uint64
}

const (
	pending_ = iota
	taken
	cancelled
)

type msg struct {
	h       wire.Header
	payload []byte
	state   int
	done    chan error // receives the receiver's verdict once (not for eager messages)
	eager   bool       // payload is buf, a copy: nobody waits for the verdict
	buf     []byte     // an eager message's copy (kept with the message for reuse)
}

// eagerBytes: see EagerBytes.
const eagerBytes = 16 << 10

// EagerBytes is the longest message that Send copies and returns without
// waiting for the receiver (algo.EagerSender).
func (t *Transport) EagerBytes(to int) int { return eagerBytes }

var _ algo.EagerSender = (*Transport)(nil)

// msgs keeps messages (with their done channels) for reuse: a Send whose
// message the receiver took and answered owns it again and puts it back,
// so a message costs no allocation in steady state.
var msgs = sync.Pool{New: func() any { return &msg{done: make(chan error, 1)} }}

// recycle puts an eager message back once its receiver is done with it.
func recycle(m *msg) {
	m.payload = nil
	msgs.Put(m)
}

type stream struct {
	q      []*msg
	notify chan struct{} // 1-buffered: a message was queued
}

type hub struct {
	n       int
	mu      sync.Mutex
	boxes   []map[streamKey]*stream
	closed  []bool
	aborted map[groupKey]error
	changed chan struct{} // closed and replaced on every failure event
}

func newHub(n int) *hub {
	h := &hub{n: n, boxes: make([]map[streamKey]*stream, n), closed: make([]bool, n),
		aborted: map[groupKey]error{}, changed: make(chan struct{})}
	for i := range h.boxes {
		h.boxes[i] = map[streamKey]*stream{}
	}
	return h
}

// wake must be called with mu held.
func (h *hub) wake() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *hub) stream(to int, k streamKey) *stream {
	s := h.boxes[to][k]
	if s == nil {
		s = &stream{notify: make(chan struct{}, 1)}
		h.boxes[to][k] = s
	}
	return s
}

func key(from int, hd wire.Header) streamKey {
	k := streamKey{from: from, group: hd.Group, kind: hd.Kind}
	if hd.Kind == wire.KindP2P {
		k.tag = hd.Seq
	}
	return k
}

// Transport is one rank's end of a hub. It implements algo.Transport.
type Transport struct {
	hub  *hub
	rank int
}

var _ algo.Transport = (*Transport)(nil)

// Rank is this rank.
func (t *Transport) Rank() int { return t.rank }

// Size is the world size.
func (t *Transport) Size() int { return t.hub.n }

// errLocked reports why rank may not talk on group (mu held).
func (t *Transport) errLocked(group uint64, peer int) error {
	h := t.hub
	if h.closed[t.rank] {
		return comm.ErrClosed
	}
	if err := h.aborted[groupKey{t.rank, group}]; err != nil {
		return err
	}
	if peer >= 0 && h.closed[peer] {
		return &comm.PeerError{Rank: peer, Err: fmt.Errorf("%w: it closed its comm", comm.ErrClosed)}
	}
	return nil
}

// Send queues a reference to payload for rank to and waits until the
// receiver has copied it.
func (t *Transport) Send(ctx context.Context, to int, hd wire.Header, payload []byte) error {
	h := t.hub
	if to < 0 || to >= h.n {
		return comm.InvalidArgf("inproc: send to rank %d of %d", to, h.n)
	}
	hd.Total, hd.Offset, hd.Len = uint64(len(payload)), 0, uint32(min(len(payload), 1<<31))
	m := msgs.Get().(*msg)
	m.h, m.payload, m.state, m.eager = hd, payload, pending_, len(payload) <= eagerBytes
	if m.eager {
		m.buf = append(m.buf[:0], payload...)
		m.payload = m.buf
	}
	h.mu.Lock()
	if err := t.errLocked(hd.Group, to); err != nil {
		h.mu.Unlock()
		return err
	}
	s := h.stream(to, key(t.rank, hd))
	s.q = append(s.q, m)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if m.eager {
		// The receiver owns m now (and recycles it).
		h.mu.Unlock()
		return nil
	}
	for {
		changed := h.changed
		h.mu.Unlock()
		select {
		case err := <-m.done:
			// The receiver is done with m, and its channel is empty.
			m.payload = nil
			msgs.Put(m)
			return err
		case <-ctx.Done():
		case <-changed:
		}
		h.mu.Lock()
		err := t.errLocked(hd.Group, to)
		if err == nil {
			err = ctx.Err()
		}
		if err == nil {
			continue
		}
		if m.state == pending_ {
			m.state = cancelled
			h.mu.Unlock()
			return err
		}
		// The receiver is copying right now; it will be quick.
		h.mu.Unlock()
		return <-m.done
	}
}

// Recv takes the next message of the stream and copies it into dst.
func (t *Transport) Recv(ctx context.Context, from int, hd wire.Header, dst []byte) error {
	return t.recv(ctx, from, hd, len(dst), func(p []byte) { copy(dst, p) })
}

var _ algo.PayloadReceiver = (*Transport)(nil)

// RecvPayload takes the next message of the stream and hands fn the
// sender's memory (one piece) instead of copying it (algo.PayloadReceiver).
func (t *Transport) RecvPayload(ctx context.Context, from int, hd wire.Header, n int, fn func(off int, payload []byte)) error {
	return t.recv(ctx, from, hd, n, func(p []byte) { fn(0, p) })
}

func (t *Transport) recv(ctx context.Context, from int, hd wire.Header, n int, deliver func(payload []byte)) error {
	h := t.hub
	if from < 0 || from >= h.n {
		return comm.InvalidArgf("inproc: recv from rank %d of %d", from, h.n)
	}
	want := hd
	want.Total, want.Offset, want.Len = uint64(n), 0, 0
	h.mu.Lock()
	s := h.stream(t.rank, key(from, hd))
	for {
		if err := t.errLocked(hd.Group, -1); err != nil {
			h.mu.Unlock()
			return err
		}
		var m *msg
		for len(s.q) > 0 && m == nil {
			m = s.q[0]
			s.q[0] = nil
			if len(s.q) == 1 {
				s.q = s.q[:0] // keep the array for the next message
			} else {
				s.q = s.q[1:]
			}
			if m.state == cancelled {
				m = nil
			}
		}
		if m != nil {
			m.state = taken
			h.mu.Unlock()
			got := m.h
			got.Offset, got.Len = 0, 0
			if err := wire.Match(got, want); err != nil {
				if m.eager {
					recycle(m)
				} else {
					m.done <- &wire.MismatchError{Got: want, Want: got}
				}
				return err
			}
			deliver(m.payload)
			if m.eager {
				recycle(m)
			} else {
				m.done <- nil
			}
			return nil
		}
		if h.closed[from] {
			h.mu.Unlock()
			return &comm.PeerError{Rank: from, Err: fmt.Errorf("%w: it closed its comm", comm.ErrClosed)}
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-s.notify:
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		h.mu.Lock()
	}
}

// Abort fails group on this rank and on peers.
func (t *Transport) Abort(group uint64, peers []int, cause error) {
	h := t.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	k := groupKey{t.rank, group}
	if h.aborted[k] == nil {
		h.aborted[k] = cause
	}
	for _, p := range peers {
		pk := groupKey{p, group}
		if p >= 0 && p < h.n && h.aborted[pk] == nil {
			h.aborted[pk] = fmt.Errorf("%w: rank %d aborted: %w", comm.ErrAborted, t.rank, cause)
		}
	}
	h.wake()
}

// Close marks this rank closed: its pending calls fail with ErrClosed and
// peers waiting on it fail with a PeerError.
func (t *Transport) Close() error {
	h := t.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed[t.rank] {
		h.closed[t.rank] = true
		h.wake()
	}
	return nil
}
