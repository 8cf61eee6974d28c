package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/rendezvous"
)

// addrStore is a store whose connection has a given local address, like
// rendezvous.Client.
type addrStore struct {
	*rendezvous.MemStore
	local net.Addr
}

func (s addrStore) LocalAddr() net.Addr { return s.local }

// buildOpts builds the transports of ranks 0..size-1 with per-rank
// configs and options, and returns their errors and how long each took.
func buildOpts(ctx context.Context, w *world, size int, cfg func(r int, c *comm.Config, o *Options)) ([]error, []time.Duration) {
	errs := make([]error, size)
	took := make([]time.Duration, size)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range size {
		wg.Go(func() {
			c := config(w, r, size, comm.Options{})
			var o Options
			cfg(r, &c, &o)
			w.ts[r], errs[r] = NewWithOptions(ctx, c, o)
			took[r] = time.Since(start)
		})
	}
	wg.Wait()
	return errs, took
}

// By default a rank advertises the local address of its connection to the
// store (here 127.0.0.2 and ::1), not 127.0.0.1.
func TestAdvertiseStoreAddress(t *testing.T) {
	for _, ip := range []string{"127.0.0.2", "::1"} {
		t.Run(ip, func(t *testing.T) {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
			if err != nil {
				t.Skipf("no %s here: %v", ip, err)
			}
			ln.Close()
			w := newWorld(t, 2)
			st := addrStore{w.store, &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}}
			errs, _ := buildOpts(ctxT(t, 10*time.Second), w, 2, func(r int, c *comm.Config, o *Options) { c.Store = st })
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			addr, err := w.store.Get(t.Context(), newMesh("tcp", w.job, 1).addrKey(0))
			if err != nil {
				t.Fatal(err)
			}
			if h, _, _ := net.SplitHostPort(string(addr)); h != ip {
				t.Fatalf("rank 0 advertised %s, want host %s", addr, ip)
			}
		})
	}
}

func TestAdvertiseSources(t *testing.T) {
	st := addrStore{rendezvous.NewMemStore(), &net.TCPAddr{IP: net.ParseIP("10.1.2.3")}}
	t.Setenv(EnvHost, "")
	t.Setenv(EnvSocketIfname, "")
	// advertise reads the environment through Options (withEnv).
	advertise := func(cfg comm.Config) (advert, error) {
		o, err := Options{}.withEnv()
		if err != nil {
			return advert{}, err
		}
		return advertise(cfg, o)
	}
	a, err := advertise(comm.Config{Store: st})
	if err != nil || a.host != "10.1.2.3" || a.listen != "10.1.2.3:0" || a.src != srcStore {
		t.Errorf("store: %+v %v", a, err)
	}
	if a, _ := advertise(comm.Config{Store: rendezvous.NewMemStore()}); a.host != "127.0.0.1" {
		t.Errorf("no local address: %+v", a)
	}
	t.Setenv(EnvSocketIfname, "nosuch0,lo")
	if a, err := advertise(comm.Config{Store: st}); err != nil || a.host != "127.0.0.1" || !strings.Contains(a.src, "=lo") {
		t.Errorf("%s=nosuch0,lo: %+v %v", EnvSocketIfname, a, err)
	}
	t.Setenv(EnvSocketIfname, "nosuch0")
	if _, err := advertise(comm.Config{Store: st}); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("%s=nosuch0: %v", EnvSocketIfname, err)
	}
	t.Setenv(EnvHost, "node7")
	if a, _ := advertise(comm.Config{Store: st}); a.host != "node7" || a.listen != ":0" || a.src != EnvHost {
		t.Errorf("%s: %+v", EnvHost, a)
	}
	if a, _ := advertise(comm.Config{Store: st, Host: "localhost"}); a.host != "127.0.0.1" || a.listen != "127.0.0.1:0" {
		t.Errorf("Config.Host: %+v", a)
	}
}

// Issue 14: a rank advertising a loopback address to a rank on another
// host fails at once on both, naming the rank, the address and the fix,
// instead of retrying until the op timeout.
func TestLoopbackAcrossHosts(t *testing.T) {
	w := newWorld(t, 3)
	errs, took := buildOpts(ctxT(t, 20*time.Second), w, 3, func(r int, c *comm.Config, o *Options) {
		o.netID = []string{"A", "A", "B"}[r]
		o.HostID = []string{"hostA/1", "hostA/1", "hostB/1"}[r]
	})
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: no error", r)
		}
		for _, want := range []string{"advertised 127.0.0.1:", "a loopback address", "rank 2 runs on another host (hostB", EnvHost, EnvSocketIfname} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: %v\nwant it to mention %q", r, err, want)
			}
		}
		if took[r] > 5*time.Second {
			t.Errorf("rank %d failed after %v", r, took[r])
		}
	}
}

// Issue 14: an address no one can reach fails every rank within the
// connect timeout, naming the rank, the address, the cause and the
// variable to set.
func TestUnreachableAddress(t *testing.T) {
	w := newWorld(t, 3)
	const ct = time.Second
	errs, took := buildOpts(ctxT(t, 30*time.Second), w, 3, func(r int, c *comm.Config, o *Options) {
		o.ConnectTimeout = ct
		if r == 0 {
			c.Host = "192.0.2.1" // TEST-NET-1: routed nowhere
		}
	})
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: no error", r)
		}
		for _, want := range []string{"cannot connect to rank 0 at 192.0.2.1:", "Config.Host", EnvHost, EnvConnectTimeout} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: %v\nwant it to mention %q", r, err, want)
			}
		}
		if took[r] > ct+3*time.Second {
			t.Errorf("rank %d failed after %v", r, took[r])
		}
	}
}

func TestConnectTimeoutEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": DefaultConnectTimeout, "3": 3 * time.Second, "1.5": 1500 * time.Millisecond, "2m": 2 * time.Minute} {
		t.Setenv(EnvConnectTimeout, v)
		if o, err := (Options{}).withDefaults(); err != nil || o.ConnectTimeout != want {
			t.Errorf("%s=%q: %v %v, want %v", EnvConnectTimeout, v, o.ConnectTimeout, err, want)
		}
	}
	t.Setenv(EnvConnectTimeout, "soon")
	if _, err := (Options{}).withDefaults(); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("bad value: %v", err)
	}
	if o, _ := (Options{ConnectTimeout: time.Second}).withDefaults(); o.ConnectTimeout != time.Second {
		t.Errorf("option: %v", o.ConnectTimeout)
	}
}
