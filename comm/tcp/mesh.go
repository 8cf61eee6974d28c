package tcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/auth"
	"github.com/gdist/gdist/comm/internal/host"
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
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
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
	t.postWait.Store(int64(postWait))
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

func (m mesh) infoKey(rank int) string { return m.ns + "/info/" + strconv.Itoa(rank) }

// failKey holds the first construction failure of this mesh, so that every
// rank fails with it rather than waiting out its timeouts.
func (m mesh) failKey() string { return m.ns + "/fail" }

// connect builds the mesh. It publishes this rank's address and peerInfo,
// reads those of its linked peers, checks that every link can work (no
// loopback address across hosts), then dials the lower ranks and accepts
// the higher ones, within the connect timeout. The first rank to fail
// posts its reason under the mesh's fail key, and every rank still
// building fails with it.
func (t *Transport) connect(ctx context.Context) error {
	cfg := t.cfg
	ct := t.opts.ConnectTimeout
	adv, err := advertise(cfg, t.opts)
	if err != nil {
		return fmt.Errorf("tcp: rank %d: %w", t.rank, err)
	}
	gen, err := cfg.Store.Add(ctx, t.opts.Prefix+"/"+cfg.Job+"/gen/"+strconv.Itoa(t.rank), 1)
	if err != nil {
		return fmt.Errorf("tcp: rank %d: rendezvous: %w", t.rank, err)
	}
	m := newMesh(t.opts.Prefix, cfg.Job, gen)
	who := fmt.Sprintf("tcp: rank %d of %d", t.rank, t.size)

	cctx, ccancel := context.WithCancel(ctx)
	var cw sync.WaitGroup // the goroutines of construction, all done on return
	stop := func() { ccancel(); cw.Wait() }
	defer stop()

	// post tells the other ranks why this one fails; the first post wins.
	post := func(err error) error {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		cfg.Store.CompareAndSet(pctx, m.failKey(), nil, []byte(err.Error()))
		return err
	}

	self := peerInfo{src: adv.src, host: t.opts.HostID, net: t.opts.netID}
	if self.net == "" {
		self.net = netID()
	}
	if self.host == "" {
		self.host = host.ID()
	}
	if slices.Contains(t.linked[t.rank+1:], true) { // higher ranks dial us
		ln, err := net.Listen("tcp", adv.listen)
		if err != nil {
			return fmt.Errorf("%s: listen on %s (address from %s): %w", who, adv.listen, adv.src, err)
		}
		t.ln = ln
		context.AfterFunc(cctx, func() { ln.Close() })
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		self.addr = net.JoinHostPort(adv.host, port)
		if err := cfg.Store.Set(ctx, m.addrKey(t.rank), []byte(self.addr)); err != nil {
			stop()
			return fmt.Errorf("%s: publishing address: %w", who, err)
		}
		cw.Go(func() { t.acceptLoop(cctx, &cw, m, ln) })
	}
	if err := cfg.Store.Set(ctx, m.infoKey(t.rank), self.encode()); err != nil {
		stop()
		return fmt.Errorf("%s: publishing address: %w", who, err)
	}

	failed := make(chan string, 1)
	cw.Go(func() {
		if v, err := cfg.Store.Get(cctx, m.failKey()); err == nil {
			failed <- string(v)
		}
	})

	// Read the linked peers' infos.
	var peers []int
	for r, l := range t.linked {
		if l && r != t.rank {
			peers = append(peers, r)
		}
	}
	infos := make([]peerInfo, t.size)
	infos[t.rank] = self
	var imu sync.Mutex
	have := make([]bool, t.size)
	gathered := make(chan struct{})
	var left sync.WaitGroup
	for _, p := range peers {
		left.Add(1)
		cw.Go(func() {
			b, err := cfg.Store.Get(cctx, m.infoKey(p))
			if err != nil {
				return // ctx ended: never Done, so gathered stays open
			}
			imu.Lock()
			infos[p], have[p] = decodeInfo(b), true
			imu.Unlock()
			left.Done()
		})
	}
	cw.Go(func() {
		done := make(chan struct{})
		go func() { left.Wait(); close(done) }()
		select {
		case <-done:
			close(gathered)
		case <-cctx.Done():
		}
	})
	select {
	case <-gathered:
	case <-t.ready: // every linked peer dialled us already
		return nil
	case reason := <-failed:
		stop()
		return fmt.Errorf("%s: mesh construction failed on another rank: %s", who, reason)
	case <-ctx.Done():
		stop()
		var missing []int
		imu.Lock()
		for _, p := range peers {
			if !have[p] {
				missing = append(missing, p)
			}
		}
		imu.Unlock()
		return fmt.Errorf("%s: mesh incomplete, no connection with rank(s) %v (they never published an address in the store): %w",
			who, missing, timeoutErr(ctx.Err()))
	}
	if err := checkReachable(t.rank, peers, infos); err != nil {
		stop()
		return post(fmt.Errorf("%s: %w", who, err))
	}

	// Every linked peer has published: the mesh must complete within ct.
	dctx, dcancel := context.WithTimeout(cctx, ct)
	defer dcancel()
	dialErrs := make(chan error, len(peers))
	for _, j := range peers {
		if j < t.rank {
			cw.Go(func() {
				if err := t.dialLoop(dctx, m, j, infos[j], ct); err != nil {
					dialErrs <- err
				}
			})
		}
	}
	timer := time.NewTimer(ct + time.Second) // let the dialers report first
	defer timer.Stop()
	var ferr error
	select {
	case <-t.ready:
	case <-ctx.Done():
	case <-t.dead:
	case reason := <-failed:
		ferr = fmt.Errorf("%s: mesh construction failed on another rank: %s", who, reason)
	case err := <-dialErrs:
		ferr = post(fmt.Errorf("%s: %w", who, err))
	case <-timer.C:
	}
	stop()

	t.mu.Lock()
	terr, complete := t.err, t.missing == 0
	var missing []int
	for r, c := range t.conns {
		if c == nil && t.linked[r] {
			missing = append(missing, r)
		}
	}
	t.mu.Unlock()
	switch {
	case terr != nil:
		return terr
	case complete:
		return nil
	case ferr != nil:
		return ferr
	case ctx.Err() != nil:
		return fmt.Errorf("%s: mesh incomplete, no connection with rank(s) %v: %w", who, missing, timeoutErr(ctx.Err()))
	}
	hint := "check that those ranks are alive"
	if self.addr != "" {
		hint = fmt.Sprintf("this rank listens at %s (%s): if they cannot reach it, %s", self.addr, self.src, fixHint(t.rank, self))
	}
	return post(fmt.Errorf("%s: mesh incomplete, no connection with rank(s) %v within %v (%s) after every rank published its address: %w; %s",
		who, missing, ct, EnvConnectTimeout, comm.ErrTimeout, hint))
}

// timeoutErr marks a deadline as a comm.ErrTimeout.
func timeoutErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (%w)", comm.ErrTimeout, err)
	}
	return err
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

// dialLoop connects to rank peer at its advertised address, retrying
// until ctx ends (the connect timeout ct, or the end of construction); if
// the connect timeout ends it, it returns an error naming the peer, the
// address, where it came from, the last cause and the fix.
func (t *Transport) dialLoop(ctx context.Context, m mesh, peer int, pi peerInfo, ct time.Duration) error {
	if pi.addr == "" {
		return fmt.Errorf("%w: rank %d does not listen for rank %d (do both list each other in Options.Peers?)", comm.ErrInvalidArgument, peer, t.rank)
	}
	backoff := 10 * time.Millisecond
	logged := 0
	for {
		err := t.dial(ctx, m, peer, pi.addr)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil // construction ended for another reason
			}
			return fmt.Errorf("%w: cannot connect to rank %d at %s (advertised from %s) within %v (%s): %v; %s",
				comm.ErrTimeout, peer, pi.addr, pi.src, ct, EnvConnectTimeout, err, fixHint(peer, pi))
		}
		if logged++; logged <= 3 || logged%20 == 0 {
			t.logf("tcp: rank %d: connecting to rank %d at %s: %v (retrying, attempt %d)", t.rank, peer, pi.addr, err, logged)
		}
		select {
		case <-ctx.Done():
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
