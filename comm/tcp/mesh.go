package tcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/auth"
)

// handshakeTimeout bounds one connection's handshake (within New's ctx).
const handshakeTimeout = 10 * time.Second

// Verdict bytes exchanged after the auth handshake: each side checks the
// other's hello and says whether it keeps the connection.
const (
	verdictRefuse byte = 0
	verdictAccept byte = 1
)

// New builds the TCP transport of rank cfg.Rank: it listens, publishes its
// address in cfg.Store, and connects to every other rank (see the package
// documentation). It blocks until the mesh is complete, ctx ends, or
// cfg.OpTimeout() passes; then it fails naming the ranks it could not reach.
func New(ctx context.Context, cfg comm.Config) (*Transport, error) {
	return NewWithOptions(ctx, cfg, Options{})
}

// NewWithOptions is New with transport options.
func NewWithOptions(ctx context.Context, cfg comm.Config, o Options) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	linked := make([]bool, cfg.Size)
	missing := 0
	for r := range linked {
		linked[r] = o.Peers == nil || r == cfg.Rank
		if linked[r] && r != cfg.Rank {
			missing++
		}
	}
	for _, r := range o.Peers {
		if r < 0 || r >= cfg.Size {
			return nil, comm.InvalidArgf("tcp: peer rank %d out of range [0, %d)", r, cfg.Size)
		}
		if r != cfg.Rank && linked[r] {
			return nil, comm.InvalidArgf("tcp: peer rank %d listed twice", r)
		}
		if r != cfg.Rank {
			linked[r] = true
			missing++
		}
	}
	t := &Transport{
		rank: cfg.Rank, size: cfg.Size, cfg: cfg, opts: o,
		peerDL:  cfg.PeerDeadline(),
		logf:    cfg.Logger(),
		dead:    make(chan struct{}),
		aborted: map[uint64]error{},
		abortCh: make(chan struct{}),
		conns:   make([]*conn, cfg.Size),
		linked:  linked,
		claimed: make([]bool, cfg.Size),
		ready:   make(chan struct{}),
		missing: missing,
	}
	t.conns[t.rank] = newConn(t, t.rank, nil)
	if missing == 0 {
		return t, nil
	}
	if cfg.Store == nil {
		return nil, comm.InvalidArgf("tcp: world size %d needs a Store", cfg.Size)
	}
	if d := cfg.OpTimeout(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	if err := t.connect(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

type mesh struct {
	ns    string // store namespace of this generation
	jobID string // hash of (prefix, job), carried in the hellos
	gen   int64
}

func newMesh(prefix, job string, gen int64) mesh {
	sum := sha256.Sum256([]byte(prefix + "\x00" + job))
	return mesh{ns: fmt.Sprintf("%s/%s/%d", prefix, job, gen), jobID: hex.EncodeToString(sum[:8]), gen: gen}
}

func (m mesh) addrKey(rank int) string { return m.ns + "/addr/" + strconv.Itoa(rank) }

// serverHello is what rank says when it accepts; clientHello what from says
// when it dials to.
func (t *Transport) serverHello(m mesh, rank int) string {
	return fmt.Sprintf("gdist-tcp/1 job=%s gen=%d size=%d rank=%d", m.jobID, m.gen, t.size, rank)
}

func (t *Transport) clientHello(m mesh, from, to int) string {
	return fmt.Sprintf("gdist-tcp/1 job=%s gen=%d size=%d from=%d to=%d", m.jobID, m.gen, t.size, from, to)
}

// advertised returns the host other ranks dial and the address to listen on.
func advertised(cfg comm.Config) (host, listen string) {
	host = cfg.Host
	if host == "" {
		host = os.Getenv("GDIST_HOST")
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1" // one address family for listener and dialers
	}
	listen = ":0"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		listen = net.JoinHostPort(host, "0")
	}
	return host, listen
}

func (t *Transport) connect(ctx context.Context) error {
	cfg := t.cfg
	gen, err := cfg.Store.Add(ctx, t.opts.Prefix+"/"+cfg.Job+"/gen/"+strconv.Itoa(t.rank), 1)
	if err != nil {
		return fmt.Errorf("tcp: rank %d: rendezvous: %w", t.rank, err)
	}
	m := newMesh(t.opts.Prefix, cfg.Job, gen)

	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	var cw sync.WaitGroup // the goroutines of construction, all done on return

	if slices.Contains(t.linked[t.rank+1:], true) { // higher ranks dial us
		host, laddr := advertised(cfg)
		ln, err := net.Listen("tcp", laddr)
		if err != nil {
			return fmt.Errorf("tcp: rank %d: listen on %s: %w", t.rank, laddr, err)
		}
		t.ln = ln
		context.AfterFunc(cctx, func() { ln.Close() })
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		addr := net.JoinHostPort(host, port)
		if err := cfg.Store.Set(ctx, m.addrKey(t.rank), []byte(addr)); err != nil {
			return fmt.Errorf("tcp: rank %d: publishing address: %w", t.rank, err)
		}
		cw.Go(func() { t.acceptLoop(cctx, &cw, m, ln) })
	}
	for j := 0; j < t.rank; j++ {
		if t.linked[j] {
			cw.Go(func() { t.dialLoop(cctx, m, j) })
		}
	}

	select {
	case <-t.ready:
	case <-ctx.Done():
	case <-t.dead:
	}
	ccancel()
	cw.Wait()

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if t.missing == 0 {
		return nil
	}
	var missing []int
	for r, c := range t.conns {
		if c == nil && t.linked[r] {
			missing = append(missing, r)
		}
	}
	cause := ctx.Err()
	if errors.Is(cause, context.DeadlineExceeded) {
		cause = fmt.Errorf("%w (%w)", comm.ErrTimeout, cause)
	}
	return fmt.Errorf("tcp: rank %d of %d: mesh incomplete, no connection with rank(s) %v: %w",
		t.rank, t.size, missing, cause)
}

// addConn installs an authenticated link and starts its goroutines.
func (t *Transport) addConn(peer int, nc net.Conn) {
	nc.SetDeadline(time.Time{})
	c := newConn(t, peer, nc)
	t.mu.Lock()
	if t.err != nil || t.closed || t.conns[peer] != nil {
		t.mu.Unlock()
		nc.Close()
		return
	}
	t.conns[peer] = c
	if t.missing--; t.missing == 0 {
		close(t.ready)
	}
	t.wg.Add(2)
	t.mu.Unlock()
	go c.readLoop()
	go c.heartbeatLoop()
}

// claim reserves the link with peer for one handshake.
func (t *Transport) claim(peer int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.claimed[peer] {
		return false
	}
	t.claimed[peer] = true
	return true
}

func (t *Transport) unclaim(peer int) {
	t.mu.Lock()
	t.claimed[peer] = false
	t.mu.Unlock()
}

func (t *Transport) acceptLoop(ctx context.Context, cw *sync.WaitGroup, m mesh, ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			t.logf("tcp: rank %d: accept: %v", t.rank, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		cw.Go(func() { t.serve(ctx, m, nc) })
	}
}

// serve runs the server side of a handshake; refusals are logged.
func (t *Transport) serve(ctx context.Context, m mesh, nc net.Conn) {
	remote := nc.RemoteAddr()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	peer, err := t.serverHandshake(m, nc)
	if err == nil && !stop() {
		err = fmt.Errorf("mesh construction ended")
		t.unclaim(peer)
	}
	if err != nil {
		stop()
		nc.Close()
		t.logf("tcp: rank %d: refused connection from %s: %v", t.rank, remote, err)
		return
	}
	t.addConn(peer, nc)
}

func (t *Transport) serverHandshake(m mesh, nc net.Conn) (int, error) {
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	hc, err := auth.Server(nc, t.cfg.Token, []byte(t.serverHello(m, t.rank)))
	if err != nil {
		return -1, err
	}
	from, herr := t.checkClientHello(m, string(hc))
	var v [1]byte
	if _, err := io.ReadFull(nc, v[:]); err != nil {
		return -1, fmt.Errorf("%w: reading the client's verdict: %v", comm.ErrAuth, err)
	}
	if v[0] != verdictAccept {
		return -1, fmt.Errorf("%w: the client refused our hello", comm.ErrAuth)
	}
	if herr == nil && !t.claim(from) {
		herr = fmt.Errorf("%w: rank %d is already connected", comm.ErrAuth, from)
	}
	if herr != nil {
		nc.Write([]byte{verdictRefuse})
		return -1, herr
	}
	if _, err := nc.Write([]byte{verdictAccept}); err != nil {
		t.unclaim(from)
		return -1, fmt.Errorf("%w: %v", comm.ErrAuth, err)
	}
	return from, nil
}

// checkClientHello returns the dialling rank if hello is one this rank
// expects: same job, generation and world size, addressed to us, from a
// higher rank.
func (t *Transport) checkClientHello(m mesh, hello string) (int, error) {
	var from, to int
	var job string
	var gen int64
	var size int
	_, err := fmt.Sscanf(hello, "gdist-tcp/1 job=%s gen=%d size=%d from=%d to=%d", &job, &gen, &size, &from, &to)
	if err != nil || from <= t.rank || from >= t.size || !t.linked[from] || hello != t.clientHello(m, from, t.rank) {
		return -1, fmt.Errorf("%w: unexpected hello %q (want job %s gen %d size %d, to rank %d from a higher rank)",
			comm.ErrAuth, hello, m.jobID, m.gen, t.size, t.rank)
	}
	return from, nil
}

// dialLoop connects to rank peer, retrying until ctx ends.
func (t *Transport) dialLoop(ctx context.Context, m mesh, peer int) {
	b, err := t.cfg.Store.Get(ctx, m.addrKey(peer))
	if err != nil {
		if ctx.Err() == nil {
			t.logf("tcp: rank %d: looking up rank %d: %v", t.rank, peer, err)
		}
		return
	}
	addr := string(b)
	backoff := 10 * time.Millisecond
	for {
		err := t.dial(ctx, m, peer, addr)
		if err == nil || ctx.Err() != nil {
			return
		}
		t.logf("tcp: rank %d: connecting to rank %d at %s: %v (retrying)", t.rank, peer, addr, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (t *Transport) dial(ctx context.Context, m mesh, peer int, addr string) error {
	d := net.Dialer{Timeout: handshakeTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	if err := t.clientHandshake(m, nc, peer); err != nil {
		stop()
		nc.Close()
		return err
	}
	if !stop() {
		nc.Close()
		return ctx.Err()
	}
	t.addConn(peer, nc)
	return nil
}

func (t *Transport) clientHandshake(m mesh, nc net.Conn, peer int) error {
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	hs, err := auth.Client(nc, t.cfg.Token, []byte(t.clientHello(m, t.rank, peer)))
	if err != nil {
		return err
	}
	if want := t.serverHello(m, peer); string(hs) != want {
		nc.Write([]byte{verdictRefuse})
		return fmt.Errorf("%w: the listener answered %q, want %q", comm.ErrAuth, hs, want)
	}
	if _, err := nc.Write([]byte{verdictAccept}); err != nil {
		return fmt.Errorf("%w: %v", comm.ErrAuth, err)
	}
	var v [1]byte
	if _, err := io.ReadFull(nc, v[:]); err != nil {
		return fmt.Errorf("%w: reading the verdict of rank %d: %v", comm.ErrAuth, peer, err)
	}
	if v[0] != verdictAccept {
		return fmt.Errorf("%w: rank %d refused the connection", comm.ErrAuth, peer)
	}
	return nil
}
