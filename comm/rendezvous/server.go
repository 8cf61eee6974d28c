package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/auth"
)

// HandshakeTimeout bounds the authentication of a new connection, on both
// the server and the client side.
const HandshakeTimeout = 10 * time.Second

// writeTimeout bounds one reply write on the server, so a client that stops
// reading cannot pin a server goroutine.
const writeTimeout = time.Minute

// The hellos bound into the handshake, so that a store client cannot be
// mistaken for a backend's peer connection and vice versa.
const (
	clientHello = "gdist-store-client/1"
	serverHello = "gdist-store-server/1"
)

// Server is a TCP key-value store server. Every connection must prove the
// job token (see package comm/internal/auth) before its first request. The
// data lives in the server's memory. Its methods are safe for concurrent use.
type Server struct {
	ln     net.Listener
	token  []byte
	logf   func(string, ...any)
	store  *memStore
	ctx    context.Context // ends when the server closes
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]*serverConn // nil until authenticated
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
	errCl  error

	rmu        sync.Mutex
	refused    int       // connections refused
	unlogged   int       // refusals not logged yet (rate limit)
	lastLogged time.Time // of the last refusal log line
}

// Refusal logging: the first logRefusalsFirst refusals are logged one line
// each; later ones are counted and summed up in one line at most every
// logRefusalsEvery (and at Close).
const (
	logRefusalsFirst = 3
	logRefusalsEvery = 10 * time.Second
)

// RefusedKey is the store key under which the server records the last
// connection it refused for a wrong token ("from <address>: <reason>"),
// so that ranks waiting for others to join can tell why no one comes.
const RefusedKey = "rdzv/refused"

// NewServer listens on addr ("127.0.0.1:0", ":29500", ...) and serves the
// store in the background until Close. logf receives diagnostics, refused
// connections among them; nil logs to the standard logger.
func NewServer(addr string, token []byte, logf func(string, ...any)) (*Server, error) {
	if len(token) == 0 {
		return nil, comm.InvalidArgf("rendezvous: empty token")
	}
	if logf == nil {
		logf = log.Printf
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: listen on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		ln:     ln,
		token:  append([]byte(nil), token...),
		logf:   logf,
		store:  newMemStore(),
		ctx:    ctx,
		cancel: cancel,
		conns:  map[net.Conn]*serverConn{},
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the address the server listens on (host:port).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: it stops listening, drops every connection (their
// pending requests fail on the clients) and waits for its goroutines. It is
// safe to call more than once.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.cancel()
		s.errCl = s.ln.Close()
		s.wg.Wait()
		s.rmu.Lock()
		if s.unlogged > 0 {
			s.logf("rendezvous: refused %d more connection(s) (%d in all)", s.unlogged, s.refused)
			s.unlogged = 0
		}
		s.rmu.Unlock()
	})
	return s.errCl
}

// waitDone blocks until the integer at key reaches n and no authenticated
// client is connected any more, or ctx ends. Rank 0 uses it so that its
// server outlives the other ranks' last requests: a client closes only
// after it has its reply. Every rank holds its connection from its join to
// its done, so when the count is short and no client has been connected
// for goneAfter, the missing ranks are gone (killed, say): it returns at
// once with an error saying so rather than waiting for ctx.
func (s *Server) waitDone(ctx context.Context, key string, n int64) error {
	var idle time.Time // since when no client is connected (zero: one is)
	for {
		s.store.mu.Lock()
		v := s.store.m[key]
		ch := s.store.changed
		s.store.mu.Unlock()
		cur, _ := strconv.ParseInt(string(v), 10, 64)
		clients := s.clients()
		if clients == 0 {
			if cur >= n {
				return nil
			}
			if idle.IsZero() {
				idle = time.Now()
			} else if time.Since(idle) >= goneAfter {
				return fmt.Errorf("%w: %s reached %d of %d and no rank has been connected for %v: the others exited without closing their store (killed, or crashed)",
					comm.ErrPeerLost, key, cur, n, goneAfter)
			}
		} else {
			idle = time.Time{}
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Millisecond): // connections closing do not notify
		case <-ctx.Done():
			return fmt.Errorf("%s reached %d of %d, %d clients still connected: %w", key, cur, n, s.clients(), ctx.Err())
		}
	}
}

// goneAfter is how long waitDone waits with the count short and no client
// connected before it takes the missing ranks for gone (a client between
// its done and its close is connected, so this only covers reconnects).
const goneAfter = time.Second

// clients counts the authenticated connections.
func (s *Server) clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sc := range s.conns {
		if sc != nil {
			n++
		}
	}
	return n
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	delay := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or similar: back off and go on.
			s.logf("rendezvous: accept: %v", err)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 5 * time.Millisecond
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = nil
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serverConn is one authenticated connection.
type serverConn struct {
	s       *Server
	c       net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[uint64]context.CancelFunc
	wg      sync.WaitGroup
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	remote := c.RemoteAddr().String()
	c.SetDeadline(time.Now().Add(HandshakeTimeout))
	rc := &recordingConn{Conn: c, head: make([]byte, 0, helloLen)}
	hello, err := auth.Server(rc, s.token, []byte(serverHello))
	if err == nil && string(hello) != clientHello {
		err = fmt.Errorf("%w: not a store client (hello %.64q)", comm.ErrAuth, hello)
	}
	if err != nil {
		if s.ctx.Err() == nil {
			s.refuse(remote, err, rc.storeClient())
		}
		return
	}
	c.SetDeadline(time.Time{})

	ctx, cancel := context.WithCancel(s.ctx)
	sc := &serverConn{s: s, c: c, pending: map[uint64]context.CancelFunc{}}
	s.mu.Lock()
	s.conns[c] = sc
	s.mu.Unlock()
	defer func() {
		cancel()
		c.Close() // unblocks writers stuck on a client that stopped reading
		sc.wg.Wait()
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		body, err := readFrame(br, maxRequestFrame)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && s.ctx.Err() == nil {
				s.logf("rendezvous: closing connection from %s: %v", remote, err)
			}
			return
		}
		req, err := decodeRequest(body)
		if err != nil {
			s.logf("rendezvous: closing connection from %s: malformed request: %v", remote, err)
			return
		}
		if err := sc.handle(ctx, req); err != nil {
			if s.ctx.Err() == nil {
				s.logf("rendezvous: closing connection from %s: %v", remote, err)
			}
			return
		}
	}
}

// handle runs one request. Blocking requests run in their own goroutine so
// that the connection keeps serving others. A returned error closes the
// connection.
func (sc *serverConn) handle(ctx context.Context, req request) error {
	st := sc.s.store
	switch req.op {
	case opSet:
		st.set(req.key, req.value)
		return sc.reply(reply{id: req.id})
	case opAdd:
		n, err := st.add(req.key, req.delta)
		if err != nil {
			return sc.reply(reply{id: req.id, status: statusInvalid, payload: []byte(err.Error())})
		}
		return sc.reply(reply{id: req.id, payload: binary.LittleEndian.AppendUint64(nil, uint64(n))})
	case opCAS:
		v := st.cas(req.key, req.old, req.value)
		return sc.reply(reply{id: req.id, payload: v})
	case opCancel:
		sc.mu.Lock()
		if cancel, ok := sc.pending[req.id]; ok {
			cancel()
		}
		sc.mu.Unlock()
		return nil
	case opGet, opWait:
		sc.mu.Lock()
		if _, dup := sc.pending[req.id]; dup {
			sc.mu.Unlock()
			return fmt.Errorf("%w: request id %d reused while pending", comm.ErrProtocol, req.id)
		}
		if len(sc.pending) >= MaxPending {
			sc.mu.Unlock()
			return sc.reply(reply{id: req.id, status: statusBusy,
				payload: fmt.Appendf(nil, "more than %d blocking requests pending on one connection", MaxPending)})
		}
		rctx, cancel := context.WithCancel(ctx)
		sc.pending[req.id] = cancel
		sc.wg.Add(1)
		sc.mu.Unlock()
		go sc.block(rctx, cancel, req)
		return nil
	}
	return fmt.Errorf("%w: unknown op %d", comm.ErrProtocol, req.op)
}

func (sc *serverConn) block(ctx context.Context, cancel context.CancelFunc, req request) {
	defer sc.wg.Done()
	defer func() {
		sc.mu.Lock()
		delete(sc.pending, req.id)
		sc.mu.Unlock()
		cancel()
	}()
	var rep reply
	if req.op == opGet {
		v, err := sc.s.store.get(ctx, req.key)
		if err != nil {
			return // cancelled by the client or the connection/server closed
		}
		rep = reply{id: req.id, payload: v}
	} else {
		if err := sc.s.store.wait(ctx, req.keys); err != nil {
			return
		}
		rep = reply{id: req.id}
	}
	if err := sc.reply(rep); err != nil {
		sc.c.Close() // the reader loop notices and cleans up
	}
}

func (sc *serverConn) reply(r reply) error {
	frame := encodeReply(r)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := sc.c.Write(frame); err != nil {
		return fmt.Errorf("writing reply: %w", err)
	}
	return nil
}

// helloLen is the length of a store client's auth hello: magic, version,
// nonce, length and clientHello (see package comm/internal/auth).
const helloLen = 4 + 1 + 32 + 2 + len(clientHello)

// recordingConn keeps the first bytes read from a connection, so that a
// failed handshake can tell a store client with the wrong token (it sent a
// store client's hello, then failed or dropped the proof) from anything else.
type recordingConn struct {
	net.Conn
	head []byte
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if room := cap(r.head) - len(r.head); room > 0 {
		r.head = append(r.head, p[:min(n, room)]...)
	}
	return n, err
}

func (r *recordingConn) storeClient() bool {
	return len(r.head) == helloLen && string(r.head[4+1+32+2:]) == clientHello
}

// refuse logs a refused connection (rate-limited) and, for a store client
// that failed the token proof, records it under RefusedKey.
func (s *Server) refuse(remote string, err error, storeClient bool) {
	if storeClient {
		err = fmt.Errorf("a store client failed the token check (wrong GDIST_TOKEN?): %w", err)
		s.store.set(RefusedKey, fmt.Appendf(nil, "from %s: %v", remote, err))
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.refused++
	now := time.Now()
	switch {
	case s.refused <= logRefusalsFirst:
		s.logf("rendezvous: refused connection from %s: %v", remote, err)
		s.lastLogged = now
	case now.Sub(s.lastLogged) >= logRefusalsEvery:
		s.logf("rendezvous: refused %d more connection(s) (%d in all), the last from %s: %v", s.unlogged+1, s.refused, remote, err)
		s.unlogged, s.lastLogged = 0, now
	default:
		if s.unlogged == 0 && s.refused == logRefusalsFirst+1 {
			s.logf("rendezvous: refusing more connections; logging a count at most every %v", logRefusalsEvery)
		}
		s.unlogged++
	}
}

// refusals counts the connections refused so far.
func (s *Server) refusals() int {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.refused
}

// reachedAt returns the local address of an authenticated connection that
// came from another host (its remote address is not loopback), or nil.
func (s *Server) reachedAt() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, sc := range s.conns {
		if sc == nil {
			continue
		}
		if ra, ok := c.RemoteAddr().(*net.TCPAddr); ok && !ra.IP.IsLoopback() {
			return c.LocalAddr()
		}
	}
	return nil
}
