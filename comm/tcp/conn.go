package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/mailbox"
	"github.com/gdist/gdist/comm/internal/wire"
)

// conn is the link to one peer: a socket with its reader, heartbeats and
// write lock, and the mailbox of the streams that peer sends on. The link to
// the rank itself has a mailbox only (nc == nil).
type conn struct {
	t    *Transport
	peer int
	nc   net.Conn
	br   *bufio.Reader

	wsem      chan struct{}         // the write lock, one frame at a time
	hdr       [wire.HeaderSize]byte // header scratch, guarded by wsem
	lastWrite atomic.Int64          // unix nanos of the last frame written

	readerDone chan struct{} // closed when the reader has exited
	stage      []byte        // the reader's staging buffer (readStaged)

	// The reader's wait for a receive to be posted (awaitPost).
	postCh    chan struct{} // signalled by a receive that posts on waitKey
	waitTimer *time.Timer
	waitSkip  int // frames to queue without waiting, after a wait timed out
	// Waits that ended with a post, and that timed out (for tests).
	waitHits, waitMisses atomic.Int64

	mu         sync.Mutex   // guards box and the fields below
	box        *mailbox.Box // the streams the peer sends on
	waiting    bool         // the reader waits for a receive on waitKey
	waitKey    mailbox.Key
	peerClosed bool  // the peer said goodbye
	byeErr     error // what ops on this link fail with after the goodbye
}

func newConn(t *Transport, peer int, nc net.Conn) *conn {
	c := &conn{
		t: t, peer: peer, nc: nc,
		wsem:       make(chan struct{}, 1),
		readerDone: make(chan struct{}),
		postCh:     make(chan struct{}, 1),
	}
	c.box = mailbox.New(&c.mu)
	if nc != nil {
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
			t.tune(tc)
		}
		c.br = bufio.NewReaderSize(&deadlineReader{nc: nc, d: t.peerDL}, 64<<10)
		c.lastWrite.Store(time.Now().UnixNano())
	}
	return c
}

// tune sets the congestion control of a link within this host
// (Options.Congestion).
func (t *Transport) tune(tc *net.TCPConn) {
	cc := t.opts.Congestion
	if cc == congestionSystem || !sameHost(tc) {
		return
	}
	if err := setCongestion(tc, cc); err != nil {
		t.ccOnce.Do(func() {
			t.logf("tcp: rank %d: keeping the kernel's congestion control on links within the host: %s %q: %v", t.rank, EnvCongestion, cc, err)
		})
	}
}

// congestionSystem is the Options.Congestion that keeps the kernel's choice.
const congestionSystem = "system"

// sameHost reports whether both ends of tc are on this host: the peer has
// a loopback address or the local one (the kernel then routes the link
// through the loopback device).
func sameHost(tc *net.TCPConn) bool {
	l, lok := tc.LocalAddr().(*net.TCPAddr)
	r, rok := tc.RemoteAddr().(*net.TCPAddr)
	return lok && rok && (r.IP.IsLoopback() || r.IP.Equal(l.IP))
}

// deadlineReader pushes the read deadline forward before every read, so a
// peer is lost after PeerDeadline without a byte, however long a frame is.
type deadlineReader struct {
	nc net.Conn
	d  time.Duration
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	r.nc.SetReadDeadline(time.Now().Add(r.d))
	return r.nc.Read(p)
}

// writeFrameLocked writes one frame; the caller holds wsem.
func (c *conn) writeFrameLocked(h *wire.Header, payload []byte) error {
	return c.writeFrameDeadline(h, payload, time.Now().Add(c.t.peerDL))
}

func (c *conn) writeFrameDeadline(h *wire.Header, payload []byte, deadline time.Time) error {
	c.mu.Lock()
	bye := c.peerClosed
	c.mu.Unlock()
	if bye {
		return c.closedErr()
	}
	h.Encode(c.hdr[:])
	c.nc.SetWriteDeadline(deadline)
	var err error
	if len(payload) == 0 {
		_, err = c.nc.Write(c.hdr[:])
	} else {
		bufs := net.Buffers{c.hdr[:], payload}
		_, err = bufs.WriteTo(c.nc)
	}
	c.lastWrite.Store(time.Now().UnixNano())
	if err != nil {
		return c.writeFailed(err)
	}
	return nil
}

// writeFailed turns a write error into the error the caller returns, failing
// the transport if the peer is lost.
func (c *conn) writeFailed(err error) error {
	if c.t.isDead() {
		return c.t.Err()
	}
	c.mu.Lock()
	bye := c.peerClosed
	c.mu.Unlock()
	if bye {
		return c.closedErr()
	}
	if isTimeout(err) {
		c.t.fail(lostErr(c.peer, "a write stalled for %v", c.t.peerDL))
	} else {
		c.t.fail(lostErr(c.peer, "write: %v", err))
	}
	return c.t.Err()
}

// readFailed turns a read error into the transport's failure.
func (c *conn) readFailed(err error) error {
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return lostErr(c.peer, "connection closed without goodbye")
	case isTimeout(err):
		return lostErr(c.peer, "nothing heard for %v", c.t.peerDL)
	}
	return lostErr(c.peer, "read: %v", err)
}

// readLoop reads frames until the link ends. Any failure that is not an
// orderly end fails the whole transport.
func (c *conn) readLoop() {
	defer c.t.wg.Done()
	defer close(c.readerDone)
	err := c.readFrames()
	if c.t.isDead() {
		return // closed or failed already: the end of the link is expected
	}
	c.mu.Lock()
	bye := c.peerClosed
	c.mu.Unlock()
	if bye && err == nil {
		// The peer closed in good order; our half closes too.
		c.nc.Close()
		return
	}
	c.t.fail(err)
}

// readFrames returns nil after the EOF that follows a goodbye, else the
// transport error that ends the link.
func (c *conn) readFrames() error {
	var hb [wire.HeaderSize]byte
	for {
		if _, err := io.ReadFull(c.br, hb[:]); err != nil {
			c.mu.Lock()
			bye := c.peerClosed
			c.mu.Unlock()
			if bye {
				return nil
			}
			return c.readFailed(err)
		}
		h, err := wire.Decode(hb[:])
		if err != nil {
			return protoErr(c.peer, "%v", err)
		}
		c.mu.Lock()
		bye := c.peerClosed
		c.mu.Unlock()
		if bye {
			return protoErr(c.peer, "%v frame after goodbye", h.Kind)
		}
		switch h.Kind {
		case wire.KindHeartbeat:
		case wire.KindGoodbye:
			var reason []byte
			if h.Len > 0 {
				reason = make([]byte, h.Len)
				if _, err := io.ReadFull(c.br, reason); err != nil {
					return c.readFailed(err)
				}
			}
			c.onGoodbye(string(reason))
		case wire.KindAbort:
			text := make([]byte, h.Len)
			if _, err := io.ReadFull(c.br, text); err != nil {
				return c.readFailed(err)
			}
			c.t.logf("tcp: rank %d: rank %d aborted group %#x: %s", c.t.rank, c.peer, h.Group, text)
			c.t.abortGroup(h.Group, fmt.Errorf("%w: rank %d aborted: %s", comm.ErrAborted, c.peer, text))
		default:
			if err := c.readData(h); err != nil {
				return err
			}
		}
	}
}

func (c *conn) discard(n uint32) error {
	if _, err := c.br.Discard(int(n)); err != nil {
		return c.readFailed(err)
	}
	return nil
}

// readData reads the payload of a data frame: straight into a posted
// receive's buffer (or, for RecvPayload, through the reader's staging
// buffer to its fn) when possible, else into a pooled buffer queued on the
// stream.
func (c *conn) readData(h wire.Header) error {
	if c.t.isDead() {
		return c.discard(h.Len)
	}
	key := mailbox.KeyOf(h)
	box := c.box
	c.mu.Lock()
	s := box.Stream(key)
	if s.Posted() == nil && c.shouldWait(h) {
		select {
		case <-c.postCh: // left by a post that came as the last wait ended
		default:
		}
		c.waiting, c.waitKey = true, key
		c.mu.Unlock()
		ok := c.awaitPost()
		c.mu.Lock()
		c.waiting = false
		if !ok {
			c.waitSkip = waitSkipFrames
		}
		s = box.Stream(key)
	} else if c.waitSkip > 0 {
		c.waitSkip--
	}
	if op := s.Posted(); op != nil {
		off, ok := box.Start(key, s, op, h)
		if !ok {
			c.mu.Unlock()
			return c.discard(h.Len)
		}
		// Direct path: the socket writes the caller's buffer (or the
		// staging buffer that fn reads). Recv waits for this frame
		// before it returns (op.Writing).
		c.mu.Unlock()
		var rerr error
		if op.Fn == nil {
			_, rerr = io.ReadFull(c.br, op.Dst[off:off+int(h.Len)])
		} else {
			rerr = c.readStaged(op.Fn, off, int(h.Len))
		}
		var lerr error
		if rerr != nil {
			lerr = c.readFailed(rerr)
			c.t.fail(lerr)
		}
		c.mu.Lock()
		op.Written(int(h.Len), rerr, c.t.Err())
		box.Unpost(key, s, op)
		c.mu.Unlock()
		return lerr
	}
	if box.Queued+int64(h.Len) > c.t.opts.MaxUnexpected {
		c.mu.Unlock()
		return protoErr(c.peer, "sent more than %d bytes that no receive was posted for", c.t.opts.MaxUnexpected)
	}
	box.Queued += int64(h.Len) // reserved while the payload is read
	c.mu.Unlock()
	buf := getBuf(int(h.Len))
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return c.readFailed(err)
	}
	c.mu.Lock()
	box.Queued -= int64(h.Len)
	s = box.Stream(key)
	if op := s.Posted(); op != nil && op.Fn != nil {
		// The receive was posted while the payload was read: hand it
		// to fn outside the lock, as on the direct path.
		off, ok := box.Start(key, s, op, h)
		c.mu.Unlock()
		if ok {
			op.Put(off, buf)
		}
		putBuf(buf)
		if ok {
			c.mu.Lock()
			op.Written(int(h.Len), nil, nil)
			box.Unpost(key, s, op)
			c.mu.Unlock()
		}
		return nil
	}
	if !box.Queue(key, s, h, buf) {
		putBuf(buf)
	}
	c.mu.Unlock()
	return nil
}

// The reader's wait for a receive: a data frame of at least waitMinBytes
// that arrives on a stream with no receive posted (and nothing queued) makes
// the reader wait up to postWait (Transport.postWait) for one to be posted, before it reads the
// payload into a queued buffer. Collective algorithms post the receive of
// chunk k+1 right after chunk k completes, which is usually after the
// reader has read the header of chunk k+1; waiting a few microseconds saves
// a copy of the payload (from the queued buffer into place) and lets a
// RecvPayload reduce it while it is in cache. The wait is bounded, so a
// receive that is posted late (or never) costs at most postWait; after a
// wait that timed out the reader queues the next waitSkipFrames frames
// without waiting.
const (
	waitMinBytes   = 64 << 10
	postWait       = 200 * time.Microsecond
	waitSkipFrames = 8
)

// shouldWait reports whether the reader should wait for a receive of the
// data frame h on s (see postWait). Callers hold c.mu.
func (c *conn) shouldWait(h wire.Header) bool {
	return h.Len >= waitMinBytes && c.waitSkip == 0 && c.box.Queued == 0
}

// awaitPost waits (without c.mu) until a receive is posted on c.waitKey,
// postWait passes or the transport dies, and reports whether one was.
func (c *conn) awaitPost() bool {
	d := time.Duration(c.t.postWait.Load())
	if c.waitTimer == nil {
		c.waitTimer = time.NewTimer(d)
	} else {
		c.waitTimer.Reset(d)
	}
	defer c.waitTimer.Stop()
	select {
	case <-c.postCh:
		c.waitHits.Add(1)
		return true
	case <-c.waitTimer.C:
		c.waitMisses.Add(1)
		return false
	case <-c.t.dead:
		return false
	}
}

// posted tells a waiting reader that a receive was posted on key. Callers
// hold c.mu.
func (c *conn) posted(key mailbox.Key) {
	if c.waiting && c.waitKey == key {
		select {
		case c.postCh <- struct{}{}:
		default:
		}
	}
}

// stagePiece is the most payload the reader stages at a time for
// RecvPayload: fn reduces each piece while it is still in cache.
const stagePiece = 256 << 10

// readStaged reads n payload bytes through the reader's staging buffer,
// calling fn(off, piece) for each piece (off counts from base).
func (c *conn) readStaged(fn func(off int, payload []byte), base, n int) error {
	if c.stage == nil && n > 0 {
		c.stage = make([]byte, stagePiece)
	}
	for off := 0; off < n; {
		k := min(n-off, len(c.stage))
		if _, err := io.ReadFull(c.br, c.stage[:k]); err != nil {
			return err
		}
		fn(base+off, c.stage[:k])
		off += k
	}
	return nil
}

// onGoodbye marks the peer closed and fails the receives posted on it.
// onGoodbye records the peer's goodbye (reason, when not empty, is the
// failure that made it close) and fails the posted receives.
func (c *conn) onGoodbye(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peerClosed = true
	c.byeErr = peerClosedErr(c.peer, reason)
	// The reader calls this, so no frame is being written.
	c.box.FailPosted(c.byeErr)
}

// heartbeatLoop writes a heartbeat whenever the link has been quiet for a
// third of the peer deadline.
func (c *conn) heartbeatLoop() {
	defer c.t.wg.Done()
	quiet := c.t.peerDL / 3
	tk := time.NewTicker(max(quiet/2, time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-c.t.dead:
			return
		case <-c.readerDone:
			return
		case <-tk.C:
		}
		if time.Since(time.Unix(0, c.lastWrite.Load())) < quiet {
			continue
		}
		select {
		case c.wsem <- struct{}{}:
		default:
			continue // someone is writing: that proves liveness too
		}
		err := c.writeFrameLocked(&wire.Header{Kind: wire.KindHeartbeat}, nil)
		<-c.wsem
		if err != nil {
			return
		}
	}
}

// sendAbort writes an abort frame for group, best effort.
func (c *conn) sendAbort(group uint64, text string) {
	timer := time.NewTimer(c.t.peerDL)
	defer timer.Stop()
	select {
	case c.wsem <- struct{}{}:
	case <-c.t.dead:
		return
	case <-timer.C:
		c.t.logf("tcp: rank %d: could not tell rank %d about the abort: link busy", c.t.rank, c.peer)
		return
	}
	defer func() { <-c.wsem }()
	if c.t.isDead() {
		return
	}
	h := wire.Header{Kind: wire.KindAbort, Group: group, Len: uint32(len(text)), Total: uint64(len(text))}
	if err := c.writeFrameLocked(&h, []byte(text)); err != nil {
		c.t.logf("tcp: rank %d: could not tell rank %d about the abort: %v", c.t.rank, c.peer, err)
	}
}

// byeErrLocked is what a receive fails with once the peer said goodbye,
// or nil. Callers hold c.mu.
func (c *conn) byeErrLocked() error {
	if c.peerClosed {
		return c.byeErr
	}
	return nil
}

// closedErr is the error of an op on a link whose peer said goodbye.
func (c *conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byeErr == nil {
		return peerClosedErr(c.peer, "")
	}
	return c.byeErr
}

// goodbye tells the peer we close (with reason, the failure that ends this
// transport, when not empty), half-closes the socket and waits (until
// deadline) for the peer to close its half, so that nothing in flight is
// lost to a reset.
func (c *conn) goodbye(deadline time.Time, reason string) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case c.wsem <- struct{}{}:
	case <-c.readerDone:
		return
	case <-timer.C:
		return
	}
	reason = truncateText(reason, wire.MaxAbortText)
	h := wire.Header{Kind: wire.KindGoodbye, Len: uint32(len(reason)), Total: uint64(len(reason))}
	err := c.writeFrameDeadline(&h, []byte(reason), deadline)
	<-c.wsem
	if err != nil {
		return
	}
	if tc, ok := c.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	select {
	case <-c.readerDone:
	case <-timer.C:
	}
}
