package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/internal/mailbox"
	"github.com/gdist/gdist/comm/internal/wire"
)

var _ algo.Transport = (*Transport)(nil)

// DefaultMaxUnexpected is the default cap on the bytes a connection may hold
// queued for receives not yet posted.
const DefaultMaxUnexpected = 1 << 30

// DefaultCongestion is the congestion control of the links between ranks
// on one host (Options.Congestion). Over loopback nothing is ever lost and
// the round trip is microseconds, so a congestion controller has nothing
// to find out; but BBR, the default of many kernels, paces what it sends
// by its bandwidth estimate, and on this project's 2-core test machine two
// processes exchanging 16-64 MiB each way over loopback moved 2.2-2.3 GB/s
// per direction with BBR against 2.8-3.0 with Reno (and 2.5-3.1 with
// CUBIC), every byte still copied twice. Reno is built into every Linux
// kernel and always allowed to unprivileged processes.
const DefaultCongestion = "reno"

// closeLinger bounds the goodbye exchange of Close.
const closeLinger = time.Second

// Options tunes the TCP transport beyond comm.Config. The zero value gives
// the defaults.
type Options struct {
	// Prefix namespaces the transport's rendezvous keys ("tcp" if empty).
	Prefix string
	// MaxUnexpected caps the payload bytes one connection may queue for
	// receives that are not posted yet (DefaultMaxUnexpected if <= 0). A
	// peer that sends more is a protocol error.
	MaxUnexpected int64
	// Peers, if not nil, lists the world ranks this transport connects to
	// (this rank may be listed or not; it always has its local mailbox):
	// a partial mesh, for composite transports that reach the other ranks
	// another way. Each listed rank must list this one. Sends to and
	// receives from unlisted ranks fail with comm.ErrInvalidArgument.
	Peers []int
	// Host is the address other ranks use to reach this one, when
	// comm.Config.Host is empty: $GDIST_HOST if empty. A host that is not
	// loopback is listened on on all interfaces (it may be a NAT address).
	Host string
	// SocketIfname names the network interface(s) whose address this
	// rank advertises when no host is given (comma-separated; the first
	// that exists and has an address wins): $GDIST_SOCKET_IFNAME if empty.
	SocketIfname string
	// ConnectTimeout bounds mesh construction once every linked rank has
	// published its address: connection retries toward a peer stop then,
	// and New fails naming the peer, its address and the cause. 0 means
	// $GDIST_CONNECT_TIMEOUT, else DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Congestion is the TCP congestion control algorithm of the links to
	// ranks on this host (Linux only; links whose two ends have the same
	// or a loopback address): "" means $GDIST_TCP_CONGESTION, else
	// DefaultCongestion; "system" leaves the kernel's default
	// (net.ipv4.tcp_congestion_control). Links between hosts always keep
	// the kernel's default. A name the kernel refuses (not built in, or
	// not in net.ipv4.tcp_allowed_congestion_control for an unprivileged
	// process) leaves the default and is logged once per transport.
	Congestion string
	// HostID names this rank's host in errors (default: $GDIST_HOST_ID,
	// else the hostname and boot id, as shm.HostID).
	HostID string

	netID string // tests: overrides netID(), to fake other hosts
}

// withDefaults fills o's empty fields from the environment (withEnv), then
// from the defaults.
func (o Options) withDefaults() (Options, error) {
	o, err := o.withEnv()
	if err != nil {
		return o, err
	}
	if o.Prefix == "" {
		o.Prefix = "tcp"
	}
	if o.MaxUnexpected <= 0 {
		o.MaxUnexpected = DefaultMaxUnexpected
	}
	if o.Congestion == "" {
		o.Congestion = DefaultCongestion
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	return o, nil
}

// Transport is the TCP implementation of algo.Transport for one rank. Its
// methods are safe for concurrent use.
type Transport struct {
	rank, size int
	cfg        comm.Config
	opts       Options
	peerDL     time.Duration
	logf       func(format string, args ...any)

	// conns[r] is the link to world rank r; conns[rank] is the local
	// mailbox (no socket). Written under mu during New, fixed afterwards.
	conns []*conn
	ln    net.Listener
	// linked[r] says whether rank r is linked (Options.Peers); fixed.
	linked []bool

	mu      sync.Mutex
	err     error         // first failure (or errTransportClosed); set once
	dead    chan struct{} // closed when err is set
	aborted map[uint64]error
	abortCh chan struct{} // closed and replaced whenever a group is aborted
	closed  bool          // Close has begun: no more goroutines start
	missing int           // links New still waits for
	claimed []bool        // links handed to a peer's handshake
	ready   chan struct{} // closed when missing reaches 0
	wg      sync.WaitGroup

	closeOnce sync.Once
	ccOnce    sync.Once // logs a refused congestion control once

	postWait atomic.Int64 // the reader's wait for a receive, ns (postWait; tests change it)
}

var errTransportClosed = fmt.Errorf("tcp: transport closed: %w", comm.ErrClosed)

// The errors of a link (see package mailbox).
var (
	peerClosedErr = mailbox.PeerClosedErr
	lostErr       = mailbox.LostErr
	protoErr      = mailbox.ProtoErr
)

// Rank is this rank's world rank.
func (t *Transport) Rank() int { return t.rank }

// Size is the world size.
func (t *Transport) Size() int { return t.size }

// Err returns the failure that ended the transport (errTransportClosed after
// Close), or nil while it works.
func (t *Transport) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// state returns the error that ops of group must fail with, or the channel
// that is closed at the next abort.
func (t *Transport) state(group uint64) (<-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, t.err
	}
	if err, ok := t.aborted[group]; ok {
		return nil, err
	}
	return t.abortCh, nil
}

func (t *Transport) isDead() bool {
	select {
	case <-t.dead:
		return true
	default:
		return false
	}
}

// fail records the transport's first failure and ends every link, so that
// every pending op ends promptly. The link to the culprit (the rank the
// PeerError names) is cut; the healthy peers get a goodbye, so that they
// blame the culprit for the failure rather than this rank.
func (t *Transport) fail(err error) {
	culprit := -1
	var pe *comm.PeerError
	if errors.As(err, &pe) {
		culprit = pe.Rank
	}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	t.endLocked(err, culprit)
	t.mu.Unlock()
	t.logf("tcp: rank %d: transport failed: %v", t.rank, err)
}

// endLocked sets the transport's final error, closes the listener, cuts the
// link to culprit and says goodbye on the others in the background (within
// closeLinger). Callers hold t.mu and have checked that t.err is nil.
func (t *Transport) endLocked(err error, culprit int) {
	t.err = err
	close(t.dead)
	if t.ln != nil {
		t.ln.Close()
	}
	deadline := time.Now().Add(closeLinger)
	reason := ""
	if err != errTransportClosed {
		reason = fmt.Sprintf("rank %d: %v", t.rank, err)
	}
	for _, c := range t.conns {
		switch {
		case c == nil || c.nc == nil:
		case c.peer == culprit:
			c.nc.Close()
		default:
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				c.goodbye(deadline, reason)
				c.nc.Close()
			}()
		}
	}
}

func (t *Transport) abortGroup(group uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.aborted[group]; ok {
		return
	}
	t.aborted[group] = err
	close(t.abortCh)
	t.abortCh = make(chan struct{})
}

// acquire takes the one-slot semaphore sem, giving up when ctx ends, the
// transport fails or group is aborted.
func (t *Transport) acquire(ctx context.Context, sem chan struct{}, group uint64) error {
	for {
		ch, err := t.state(group)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		select {
		case sem <- struct{}{}:
			if _, err := t.state(group); err != nil {
				<-sem
				return err
			}
			return nil
		case <-ctx.Done():
		case <-t.dead:
		case <-ch:
		}
	}
}

func ctxErr(ctx context.Context) error {
	return fmt.Errorf("tcp: %w", ctx.Err())
}

// checkArgs validates a peer and a header for Send and Recv.
func (t *Transport) checkArgs(what string, peer int, h wire.Header) error {
	if peer < 0 || peer >= t.size {
		return comm.InvalidArgf("tcp: %s rank %d out of range [0, %d)", what, peer, t.size)
	}
	if !t.linked[peer] {
		return comm.InvalidArgf("tcp: %s rank %d: not one of this transport's peers %v", what, peer, t.opts.Peers)
	}
	if err := wire.CheckMessage(h); err != nil {
		return comm.InvalidArgf("tcp: %s rank %d: %v", what, peer, err)
	}
	return nil
}

// Send delivers payload as one message to world rank to (see
// algo.Transport). It blocks until payload has been handed to the kernel (or
// copied, for to == Rank()). ctx is honoured while waiting for the
// connection and between frames; a frame already being written is finished.
func (t *Transport) Send(ctx context.Context, to int, h wire.Header, payload []byte) error {
	if err := t.checkArgs("send to", to, h); err != nil {
		return err
	}
	if _, err := t.state(h.Group); err != nil {
		return err
	}
	c := t.conns[to]
	if c.nc == nil {
		c.mu.Lock()
		c.box.DeliverLocal(h, payload, getBuf)
		c.mu.Unlock()
		return nil
	}
	group := h.Group
	return c.box.SendFrames(ctx, h, payload, wire.MaxFrame, c.wsem,
		func(ctx context.Context, sem chan struct{}) error { return t.acquire(ctx, sem, group) },
		func(h wire.Header, p []byte) error { return c.writeFrameLocked(&h, p) })
}

// Recv receives the next message of stream (from, h.Group, h.Kind[, h.Seq])
// into dst (see algo.Transport). It blocks until the whole message is in
// dst, or fails; it never returns while the transport still writes dst.
func (t *Transport) Recv(ctx context.Context, from int, h wire.Header, dst []byte) error {
	return t.recv(ctx, from, h, mailbox.NewRecv(dst, nil, len(dst)))
}

// RecvPayload receives like Recv but hands the payload to fn instead of
// copying it into a buffer (see algo.PayloadReceiver): frames that arrive
// while it waits pass through a small staging buffer of the connection's
// reader, which calls fn; frames that arrived before are handed over from
// the queue (and a message to this rank itself by its Send). fn runs one
// call at a time, on the reader's goroutine, the caller's or the local
// sender's, and never after RecvPayload returns.
func (t *Transport) RecvPayload(ctx context.Context, from int, h wire.Header, n int, fn func(off int, payload []byte)) error {
	if n < 0 || fn == nil {
		return comm.InvalidArgf("tcp: RecvPayload of %d bytes with fn %p", n, fn)
	}
	return t.recv(ctx, from, h, mailbox.NewRecv(nil, fn, n))
}

var _ algo.PayloadReceiver = (*Transport)(nil)

// recv runs op (its dst or fn and n set) as the next receive of stream
// (from, h.Group, h.Kind[, h.Seq]).
func (t *Transport) recv(ctx context.Context, from int, h wire.Header, op *mailbox.Recv) error {
	if err := t.checkArgs("recv from", from, h); err != nil {
		return err
	}
	if _, err := t.state(h.Group); err != nil {
		return err
	}
	c := t.conns[from]
	box := c.box
	key := mailbox.KeyOf(h)
	op.Want = h
	op.Want.Offset, op.Want.Len, op.Want.Total = 0, 0, uint64(op.N)
	op.Notify = make(chan struct{})

	c.mu.Lock()
	s := box.Stream(key)
	s.Join()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		box.Leave(key, s)
		c.mu.Unlock()
	}()
	if err := t.acquire(ctx, s.RSem, h.Group); err != nil {
		return err
	}
	defer func() { <-s.RSem }()

	// Take the frames that came first (each copied, or handed to fn,
	// outside the lock), then post op.
	c.mu.Lock()
	box.Take(s, op, c.byeErrLocked, true, putBuf)
	if !op.Finished {
		c.posted(key)
	}
	c.mu.Unlock()

	cancel := func(err error) error {
		return box.Cancel(s, op, err, func(op *mailbox.Recv) { <-op.Notify })
	}
	ch, err := t.state(h.Group)
	for {
		if err != nil {
			return cancel(err)
		}
		select {
		case <-op.Notify:
			return op.Err
		case <-ctx.Done():
			return cancel(ctxErr(ctx))
		case <-t.dead:
			ch, err = t.state(h.Group)
		case <-ch:
			ch, err = t.state(h.Group)
		}
	}
}

// Abort fails every pending and later Send and Recv of group on this rank
// with cause, and sends abort frames carrying cause's text (truncated to
// wire.MaxAbortText) to the listed world ranks, in the background.
func (t *Transport) Abort(group uint64, peers []int, cause error) {
	if cause == nil {
		cause = comm.ErrAborted
	}
	t.abortGroup(group, cause)
	text := truncateText(cause.Error(), wire.MaxAbortText)
	seen := map[int]bool{}
	for _, p := range peers {
		if p < 0 || p >= t.size || p == t.rank || seen[p] {
			continue
		}
		seen[p] = true
		c := t.conns[p]
		if c == nil || c.nc == nil {
			continue
		}
		t.mu.Lock()
		if t.closed || t.err != nil {
			t.mu.Unlock()
			return
		}
		t.wg.Add(1)
		t.mu.Unlock()
		go func() {
			defer t.wg.Done()
			c.sendAbort(group, text)
		}()
	}
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cutting may split a rune; drop the pieces.
	return strings.ToValidUTF8(s[:n], "")
}

// Close says goodbye to every peer (within about a second), closes the
// connections and the listener, and fails pending calls with comm.ErrClosed.
// It never hangs and may be called more than once.
func (t *Transport) Close() error {
	t.closeOnce.Do(t.close)
	return nil
}

func (t *Transport) close() {
	t.mu.Lock()
	t.closed = true
	if t.err == nil {
		t.endLocked(errTransportClosed, -1)
	}
	t.mu.Unlock()
	if t.ln != nil {
		t.ln.Close()
	}
	t.wg.Wait()
}

// isTimeout reports whether err is a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
