package auto

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/internal/wire"
	"github.com/gdist/gdist/comm/shm"
	"github.com/gdist/gdist/comm/tcp"
)

var (
	_ algo.Transport = (*Transport)(nil)
	_ algo.HostMap   = (*Transport)(nil) // the Comm's Layout: hierarchical all-reduce, per-link costs
)

// Options tunes the auto transport beyond comm.Config. The zero value gives
// the defaults.
type Options struct {
	// Prefix namespaces the rendezvous keys ("auto" if empty); the parts
	// use Prefix+"/shm" and Prefix+"/tcp".
	Prefix string
	// HostID identifies this rank's host: shm.HostID() if empty (the
	// hostname and boot id, or $GDIST_HOST_ID).
	HostID string
	// SHM and TCP tune the parts. Their Prefix, Ranks, Peers and HostID
	// are set by the auto transport.
	SHM shm.Options
	TCP tcp.Options
}

// Transport is the auto implementation of algo.Transport for one rank: it
// sends to the ranks on this host through a shared-memory transport and to
// the others through a TCP transport. Its methods are safe for concurrent
// use.
type Transport struct {
	rank, size int
	hosts      []string       // host id of every world rank
	onHost     []bool         // world rank -> reached through shm
	local      []int          // the ranks on this host, this one included
	remote     []int          // the others
	shm        *shm.Transport // nil where shared memory is unsupported
	tcp        *tcp.Transport // nil when every rank is on this host

	// life ends when the transport fails or closes; ops of one part are
	// cancelled when the other part fails.
	life   context.Context
	end    context.CancelFunc
	mu     sync.Mutex
	err    error // the failure that ended the transport, if any
	closed bool

	watchDone chan struct{}
	closeOnce sync.Once
}

// New builds the auto transport of rank cfg.Rank (see the package
// documentation).
func New(ctx context.Context, cfg comm.Config) (*Transport, error) {
	return NewWithOptions(ctx, cfg, Options{})
}

// NewWithOptions is New with transport options.
func NewWithOptions(ctx context.Context, cfg comm.Config, o Options) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = "auto"
	}
	if o.HostID == "" {
		o.HostID = shm.HostID()
	}
	t := &Transport{
		rank: cfg.Rank, size: cfg.Size,
		hosts:     make([]string, cfg.Size),
		onHost:    make([]bool, cfg.Size),
		watchDone: make(chan struct{}),
	}
	t.life, t.end = context.WithCancel(context.Background())
	t.hosts[t.rank] = o.HostID
	if cfg.Size > 1 {
		if cfg.Store == nil {
			return nil, comm.InvalidArgf("auto: world size %d needs a Store", cfg.Size)
		}
		if d := cfg.OpTimeout(); d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		if err := t.exchangeHosts(ctx, cfg, o); err != nil {
			return nil, err
		}
	}
	for r, h := range t.hosts {
		if shm.Supported && (h == o.HostID || r == t.rank) {
			t.onHost[r] = true
			t.local = append(t.local, r)
		} else if r != t.rank {
			t.remote = append(t.remote, r)
		}
	}
	var err error
	if shm.Supported {
		so := o.SHM
		so.Prefix, so.Ranks, so.HostID = o.Prefix+"/shm", t.local, o.HostID
		so.OnAbort = t.abortedViaSHM
		if t.shm, err = shm.NewWithOptions(ctx, cfg, so); err != nil {
			return nil, fmt.Errorf("auto: rank %d: shared memory with ranks %v: %w", t.rank, t.local, err)
		}
	}
	if len(t.remote) > 0 || t.shm == nil {
		to := o.TCP
		to.Prefix, to.Peers, to.HostID = o.Prefix+"/tcp", t.remote, o.HostID
		tt, err := tcp.NewWithOptions(ctx, cfg, to)
		if err != nil {
			if t.shm != nil {
				t.shm.Close()
			}
			return nil, fmt.Errorf("auto: rank %d: tcp with ranks %v: %w", t.rank, t.remote, err)
		}
		t.mu.Lock() // abortedViaSHM may run already
		t.tcp = tt
		t.mu.Unlock()
	}
	go t.watch(cfg.PeerDeadline())
	return t, nil
}

// exchangeHosts publishes this rank's host id and reads every other's.
func (t *Transport) exchangeHosts(ctx context.Context, cfg comm.Config, o Options) error {
	gen, err := cfg.Store.Add(ctx, o.Prefix+"/"+cfg.Job+"/gen/"+strconv.Itoa(t.rank), 1)
	if err != nil {
		return fmt.Errorf("auto: rank %d: rendezvous: %w", t.rank, err)
	}
	ns := fmt.Sprintf("%s/%s/%d/host/", o.Prefix, cfg.Job, gen)
	if err := cfg.Store.Set(ctx, ns+strconv.Itoa(t.rank), []byte(o.HostID)); err != nil {
		return fmt.Errorf("auto: rank %d: publishing the host id: %w", t.rank, err)
	}
	for r := range t.size {
		if r == t.rank {
			continue
		}
		b, err := cfg.Store.Get(ctx, ns+strconv.Itoa(r))
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w (%w)", comm.ErrTimeout, err)
			}
			return fmt.Errorf("auto: rank %d: waiting for the host id of rank %d: %w", t.rank, r, err)
		}
		t.hosts[r] = string(b)
	}
	return nil
}

// Rank is this rank's world rank.
func (t *Transport) Rank() int { return t.rank }

// Size is the world size.
func (t *Transport) Size() int { return t.size }

// Local returns the world ranks reached through shared memory, this one
// included.
func (t *Transport) Local() []int { return slices.Clone(t.local) }

// Remote returns the world ranks reached through TCP.
func (t *Transport) Remote() []int { return slices.Clone(t.remote) }

// Hosts returns the host id of every world rank.
func (t *Transport) Hosts() []string { return slices.Clone(t.hosts) }

// EagerBytes is the longest payload to world rank to that Send delivers
// without waiting for its receive (algo.EagerSender): the shared-memory
// part's for the ranks of this host, 0 (none) over TCP.
func (t *Transport) EagerBytes(to int) int {
	if to >= 0 && to < len(t.onHost) && t.onHost[to] && t.shm != nil {
		return t.shm.EagerBytes(to)
	}
	return 0
}

var _ algo.EagerSender = (*Transport)(nil)

// Route names the part that reaches world rank peer, "shm" or "tcp"
// (algo.Router: the Comm's Moved counts per part).
func (t *Transport) Route(peer int) string {
	if peer >= 0 && peer < len(t.onHost) && t.onHost[peer] {
		return "shm"
	}
	return "tcp"
}

// Err returns the failure that ended the transport, or nil while it works
// (after Close, an error wrapping comm.ErrClosed).
func (t *Transport) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if t.shm != nil {
		if err := t.shm.Err(); err != nil {
			return err
		}
	}
	if t.tcp != nil {
		return t.tcp.Err()
	}
	return nil
}

// failed returns the failure that ended the transport, if any.
func (t *Transport) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// couple makes a transport-level failure of one part (a lost peer, a
// protocol error) the failure of the whole: the shared-memory part fails
// with it (and tells its peers why), and pending TCP ops are cancelled.
func (t *Transport) couple(err error) {
	if !errors.Is(err, comm.ErrPeerLost) && !errors.Is(err, comm.ErrProtocol) {
		return
	}
	t.mu.Lock()
	if t.err != nil || t.closed {
		t.mu.Unlock()
		return
	}
	t.err = err
	t.mu.Unlock()
	t.end()
	if t.shm != nil {
		t.shm.Fail(err)
	}
}

// watch couples the parts' failures while no op is running (the ops
// couple them as they see them).
func (t *Transport) watch(peerDL time.Duration) {
	defer close(t.watchDone)
	tk := time.NewTicker(min(max(peerDL/4, time.Millisecond), 100*time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-t.life.Done():
			return
		case <-tk.C:
		}
		if t.tcp != nil {
			t.couple(t.tcp.Err())
		}
		if t.shm != nil {
			t.couple(t.shm.Err())
		}
	}
}

func (t *Transport) checkPeer(what string, peer int) error {
	if peer < 0 || peer >= t.size {
		return comm.InvalidArgf("auto: %s rank %d out of range [0, %d)", what, peer, t.size)
	}
	return nil
}

// Send delivers payload to world rank to through the part that reaches it
// (see algo.Transport).
func (t *Transport) Send(ctx context.Context, to int, h wire.Header, payload []byte) error {
	if err := t.checkPeer("send to", to); err != nil {
		return err
	}
	if err := t.failed(); err != nil {
		return err
	}
	if t.onHost[to] {
		err := t.shm.Send(ctx, to, h, payload)
		t.couple(err)
		return err
	}
	raceReleaseIO()
	return t.viaTCP(ctx, h.Group, func(ctx context.Context) error { return t.tcp.Send(ctx, to, h, payload) })
}

// Recv receives the next message of stream (from, h.Group, h.Kind[,
// h.Seq]) into dst through the part that reaches from (see
// algo.Transport).
func (t *Transport) Recv(ctx context.Context, from int, h wire.Header, dst []byte) error {
	if err := t.checkPeer("recv from", from); err != nil {
		return err
	}
	if err := t.failed(); err != nil {
		return err
	}
	if t.onHost[from] {
		err := t.shm.Recv(ctx, from, h, dst)
		t.couple(err)
		return err
	}
	return t.viaTCP(ctx, h.Group, func(ctx context.Context) error { return t.tcp.Recv(ctx, from, h, dst) })
}

// RecvPayload receives like Recv but hands the payload to fn instead of
// copying it into a buffer (see algo.PayloadReceiver): in place, in the
// shared segment, from a rank on this host; from a rank elsewhere, as the
// TCP transport's RecvPayload hands it over (frame by frame, as it comes).
func (t *Transport) RecvPayload(ctx context.Context, from int, h wire.Header, n int, fn func(off int, payload []byte)) error {
	if err := t.checkPeer("recv from", from); err != nil {
		return err
	}
	if n < 0 || fn == nil {
		return comm.InvalidArgf("auto: RecvPayload of %d bytes with fn %p", n, fn)
	}
	if err := t.failed(); err != nil {
		return err
	}
	if t.onHost[from] {
		err := t.shm.RecvPayload(ctx, from, h, n, fn)
		t.couple(err)
		return err
	}
	return t.viaTCP(ctx, h.Group, func(ctx context.Context) error { return t.tcp.RecvPayload(ctx, from, h, n, fn) })
}

var _ algo.PayloadReceiver = (*Transport)(nil)

// viaTCP runs a TCP op of group that also ends when the transport fails.
// A peer's abort that the op reports is passed on to the shared-memory
// part, so that its ops of the group fail too.
func (t *Transport) viaTCP(ctx context.Context, group uint64, op func(ctx context.Context) error) error {
	octx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(t.life, cancel)
	err := op(octx)
	ended := !stop() && ctx.Err() == nil
	cancel()
	if err == nil {
		return nil
	}
	if ended {
		if ferr := t.failed(); ferr != nil {
			return ferr
		}
		return fmt.Errorf("auto: %w", comm.ErrClosed)
	}
	if errors.Is(err, comm.ErrAborted) && t.shm != nil {
		t.shm.Abort(group, nil, err)
	}
	t.couple(err)
	return err
}

// abortedViaSHM passes a peer's abort that arrived through shared memory
// on to the TCP part.
func (t *Transport) abortedViaSHM(group uint64, err error) {
	t.mu.Lock()
	tt := t.tcp
	t.mu.Unlock()
	if tt != nil {
		tt.Abort(group, nil, err)
	}
}

// Abort fails every pending and later op of group on this rank, in both
// parts, and tells the listed ranks through the part that reaches each.
func (t *Transport) Abort(group uint64, peers []int, cause error) {
	var local, remote []int
	for _, p := range peers {
		if p < 0 || p >= t.size {
			continue
		}
		if t.onHost[p] {
			local = append(local, p)
		} else {
			remote = append(remote, p)
		}
	}
	if t.shm != nil {
		t.shm.Abort(group, local, cause)
	}
	if t.tcp != nil {
		t.tcp.Abort(group, remote, cause)
	}
}

// Close closes both parts (each says goodbye to its peers) and fails the
// pending ops with comm.ErrClosed. It never hangs and may be called more
// than once.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.end()
		<-t.watchDone
		var wg sync.WaitGroup
		if t.shm != nil {
			wg.Go(func() { t.shm.Close() })
		}
		if t.tcp != nil {
			wg.Go(func() { t.tcp.Close() })
		}
		wg.Wait()
	})
	return nil
}
