package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/auth"
)

// Client is a connection to a Server; it implements comm.Store. Requests
// from many goroutines share one connection: each carries an id, and a
// reader goroutine hands every reply to its caller, so a blocked Get or Wait
// never holds up other requests. A Client is safe for concurrent use.
//
// If a request's ctx ends while it waits for its reply, the call returns an
// error wrapping ctx.Err() at once; a blocked Get or Wait is also cancelled
// on the server, while a Set, Add or CompareAndSet may or may not have taken
// effect. If the connection is lost, every pending and later call fails with
// an error wrapping comm.ErrPeerLost (comm.ErrClosed after Close); the
// client does not reconnect.
type Client struct {
	addr string
	conn net.Conn

	wmu sync.Mutex // serializes frame writes

	mu      sync.Mutex
	pending map[uint64]chan reply
	nextID  uint64
	err     error         // set before dead is closed
	dead    chan struct{} // closed once the connection is unusable

	wg sync.WaitGroup // the reader and cancel senders

	reachedAt net.Addr // set by Connect on rank 0 before the client is used
}

var _ comm.Store = (*Client)(nil)

// Dial connects to the store server at addr and proves token. It retries
// refused or failed connections until ctx ends, so ranks may start in any
// order; a failed handshake (wrong token, not a store server) is not retried
// and gives an error wrapping comm.ErrAuth.
func Dial(ctx context.Context, addr string, token []byte) (comm.Store, error) {
	c, err := dialClient(ctx, addr, token)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func dialClient(ctx context.Context, addr string, token []byte) (*Client, error) {
	if len(token) == 0 {
		return nil, comm.InvalidArgf("rendezvous: empty token")
	}
	var d net.Dialer
	delay := 10 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c, herr := handshake(ctx, conn, addr, token)
			if herr == nil {
				return c, nil
			}
			conn.Close()
			if errors.Is(herr, comm.ErrAuth) || ctx.Err() != nil {
				return nil, herr
			}
			err = herr // e.g. the server closed during the handshake: retry
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rendezvous: dial store %s: %w (last error: %v)", addr, ctx.Err(), err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, fmt.Errorf("rendezvous: dial store %s: %w (last error: %v)", addr, ctx.Err(), err)
		}
		delay = min(2*delay, time.Second)
	}
}

func handshake(ctx context.Context, conn net.Conn, addr string, token []byte) (*Client, error) {
	dl := time.Now().Add(HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	hello, err := auth.Client(conn, token, []byte(clientHello))
	stop()
	if err == nil && string(hello) != serverHello {
		err = fmt.Errorf("%w: %s is not a gdist store server (hello %.64q)", comm.ErrAuth, addr, hello)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rendezvous: handshake with %s: %w", addr, ctx.Err())
		}
		return nil, fmt.Errorf("rendezvous: handshake with %s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	c := &Client{addr: addr, conn: conn, pending: map[uint64]chan reply{}, dead: make(chan struct{})}
	c.wg.Add(1)
	go c.readLoop()
	return c, nil
}

// LocalAddr is the local address of the connection to the server: an
// address of this host that the server's host can reach (the tcp backend
// advertises it by default). On rank 0 of Connect, whose connection may be
// over loopback, it is the address the other hosts reached the store at.
func (c *Client) LocalAddr() net.Addr {
	if c.reachedAt != nil {
		return c.reachedAt
	}
	return c.conn.LocalAddr()
}

// fail marks the client unusable with err (the first error wins) and closes
// the connection.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.dead)
	}
	c.mu.Unlock()
	c.conn.Close()
}

func (c *Client) readLoop() {
	defer c.wg.Done()
	br := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		body, err := readFrame(br, maxReplyFrame)
		if err == nil {
			var r reply
			r, err = decodeReply(body)
			if err == nil {
				c.mu.Lock()
				ch, ok := c.pending[r.id]
				delete(c.pending, r.id)
				c.mu.Unlock()
				if ok {
					ch <- r // buffered
				}
				continue
			}
		}
		if !errors.Is(err, comm.ErrProtocol) {
			err = fmt.Errorf("%w: rendezvous store %s: connection lost: %v", comm.ErrPeerLost, c.addr, err)
		} else {
			err = fmt.Errorf("rendezvous store %s: %w", c.addr, err)
		}
		c.fail(err)
		return
	}
}

// Close closes the connection; pending calls fail with comm.ErrClosed. It is
// safe to call more than once.
func (c *Client) Close() error {
	c.fail(fmt.Errorf("%w: rendezvous store client", comm.ErrClosed))
	c.wg.Wait()
	return nil
}

// call sends req and waits for its reply.
func (c *Client) call(ctx context.Context, req request) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	req.id = c.nextID
	c.pending[req.id] = ch
	c.mu.Unlock()

	frame := encodeRequest(req)
	c.wmu.Lock()
	_, err := c.conn.Write(frame)
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("%w: rendezvous store %s: write: %v", comm.ErrPeerLost, c.addr, err))
		c.mu.Lock()
		err = c.err
		c.mu.Unlock()
		return nil, err
	}

	select {
	case r := <-ch:
		switch r.status {
		case statusOK:
			return r.payload, nil
		case statusInvalid:
			return nil, fmt.Errorf("%w: store: %s", comm.ErrInvalidArgument, r.payload)
		case statusClosed:
			return nil, fmt.Errorf("%w: store: %s", comm.ErrClosed, r.payload)
		default:
			return nil, fmt.Errorf("%w: store status %d: %.200s", comm.ErrProtocol, r.status, r.payload)
		}
	case <-c.dead:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, err
	case <-ctx.Done():
		c.mu.Lock()
		_, stillPending := c.pending[req.id]
		delete(c.pending, req.id)
		// Tell the server to drop a blocked request. Adding to wg only
		// while the client is alive keeps Close's wg.Wait correct.
		sendCancel := stillPending && c.err == nil && (req.op == opGet || req.op == opWait)
		if sendCancel {
			c.wg.Add(1)
		}
		c.mu.Unlock()
		if sendCancel {
			go func() {
				defer c.wg.Done()
				f := encodeRequest(request{op: opCancel, id: req.id})
				c.wmu.Lock()
				defer c.wmu.Unlock()
				c.conn.Write(f) // best effort; a failure shows up on the reader
			}()
		}
		return nil, ctx.Err()
	}
}

func checkKey(key string) error {
	if len(key) > MaxKeyLen {
		return comm.InvalidArgf("rendezvous: key of %d bytes exceeds %d", len(key), MaxKeyLen)
	}
	return nil
}

func checkValue(v []byte) error {
	if len(v) > MaxValueLen {
		return comm.InvalidArgf("rendezvous: value of %d bytes exceeds %d", len(v), MaxValueLen)
	}
	return nil
}

func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rendezvous: %s %q: %w", op, key, err)
}

// Set stores value at key, replacing any value there. Blocking; safe for
// concurrent use. The value is copied before Set returns.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	if err := errors.Join(checkKey(key), checkValue(value)); err != nil {
		return err
	}
	_, err := c.call(ctx, request{op: opSet, key: key, value: value})
	return wrap("set", key, err)
}

// Get returns the value at key, blocking until the key exists or ctx ends.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	v, err := c.call(ctx, request{op: opGet, key: key})
	return v, wrap("get", key, err)
}

// Add adds delta to the integer at key (absent counts as 0) and returns the
// new value. The value is stored as a decimal string, so Get of a counter
// returns e.g. "3". Adding to a key holding something else, or overflowing
// int64, fails with comm.ErrInvalidArgument.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	v, err := c.call(ctx, request{op: opAdd, key: key, delta: delta})
	if err != nil {
		return 0, wrap("add", key, err)
	}
	if len(v) != 8 {
		err := fmt.Errorf("%w: add reply of %d bytes, want 8", comm.ErrProtocol, len(v))
		c.fail(err)
		return 0, wrap("add", key, err)
	}
	return int64(binary.LittleEndian.Uint64(v)), nil
}

// CompareAndSet sets key to value if its current value equals old (an absent
// key matches a nil or empty old) and returns the value now stored, which
// is value if the swap happened. An absent key comes back as an empty value.
func (c *Client) CompareAndSet(ctx context.Context, key string, old, value []byte) ([]byte, error) {
	if err := errors.Join(checkKey(key), checkValue(old), checkValue(value)); err != nil {
		return nil, err
	}
	v, err := c.call(ctx, request{op: opCAS, key: key, old: old, value: value})
	return v, wrap("compare_and_set", key, err)
}

// Wait blocks until every key exists or ctx ends. Long key lists are sent in
// parts of MaxWaitKeys.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	for len(keys) > 0 {
		part := keys[:min(len(keys), MaxWaitKeys)]
		keys = keys[len(part):]
		if _, err := c.call(ctx, request{op: opWait, keys: part}); err != nil {
			return wrap("wait", part[0], err)
		}
	}
	return nil
}
