package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
)

// DoneTimeout bounds how long the close function returned by Connect waits,
// on rank 0, for every rank to report that it is done with the store.
const DoneTimeout = 10 * time.Second

// doneKey counts the ranks done with the store.
const doneKey = "rdzv/done"

// Connect gives this rank a store client for env. If env.StoreAddr is set,
// it only dials that store. Otherwise rank 0 serves the store on
// MasterAddr:StorePort if MasterAddr is an IP address of this host
// (127.0.0.1 keeps it off the network), else on all interfaces, and dials
// it there; every other rank dials MasterAddr:StorePort. Dialing retries,
// so ranks may start in any order.
//
// Then every rank joins (unless env.StoreAddr is set): it claims its rank
// in the store and waits, at most env.JoinTimeout (GDIST_JOIN_TIMEOUT, 10
// minutes by default), until every rank has. A second process claiming a
// taken rank, or a rank with another world size or job id (env.JobID),
// is refused naming both processes: that is another job on the same port.
// If the store refuses a connection for a wrong token and no rank joins
// for a few seconds after, every waiting rank fails saying so; a rank
// whose token the store refuses fails at once. Either way the error names
// GDIST_TOKEN.
//
// closeFn closes the client and, on rank 0, the server. So that rank 0's
// server outlives the other ranks' use of it, each rank's closeFn adds 1 to
// "rdzv/done" and closes its client; rank 0 then waits (at most
// DoneTimeout) until the count reaches Size and no other client is still
// connected, so that the last replies reach their ranks, before shutting
// the server down; when the count is short and no rank has been connected
// for a second, the missing ranks are gone (killed) and it stops waiting,
// returning an error that wraps comm.ErrPeerLost. Every rank should therefore call closeFn once. logf receives
// diagnostics (nil: the standard logger).
func Connect(ctx context.Context, env Env, logf func(string, ...any)) (store comm.Store, closeFn func() error, err error) {
	if logf == nil {
		logf = comm.Config{}.Logger()
	}
	if env.StoreAddr != "" {
		st, err := Dial(ctx, env.StoreAddr, env.Token)
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
	if env.Size < 1 || env.Rank < 0 || env.Rank >= env.Size {
		return nil, nil, comm.InvalidArgf("rendezvous: rank %d of %d", env.Rank, env.Size)
	}
	if env.StorePort < 1 || env.StorePort > 65535 {
		return nil, nil, comm.InvalidArgf("rendezvous: store port %d", env.StorePort)
	}
	joinTO := env.JoinTimeout
	if joinTO <= 0 {
		joinTO = DefaultJoinTimeout
	}
	jctx, jcancel := context.WithTimeout(ctx, joinTO)
	defer jcancel()
	addr := net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.StorePort))
	var srv *Server
	var st *Client
	if env.Rank == 0 {
		var dial string
		srv, dial, err = serveStore(env, logf)
		if err != nil {
			return nil, nil, err
		}
		addr = srv.Addr()
		// Dial the address others use, so that this connection's local
		// address is one they reach; fall back to loopback.
		dctx, cancel := context.WithTimeout(jctx, 5*time.Second)
		st, err = dialClient(dctx, dial, env.Token)
		cancel()
		if err != nil && !errors.Is(err, comm.ErrAuth) && jctx.Err() == nil {
			_, port, _ := net.SplitHostPort(addr)
			loop := net.JoinHostPort("127.0.0.1", port)
			logf("rendezvous: rank 0: cannot reach the store at %s (%v); using %s", dial, err, loop)
			st, err = dialClient(jctx, loop, env.Token)
		}
	} else {
		st, err = dialClient(jctx, addr, env.Token)
	}
	if err == nil {
		err = join(jctx, st, env, addr)
		if err != nil {
			st.Close()
		} else if srv != nil {
			// Rank 0 reached its own store over loopback (MASTER_ADDR is
			// a name that resolves to loopback here, say): what it
			// advertises by default is the address others reached it at.
			if la, ok := st.LocalAddr().(*net.TCPAddr); ok && la.IP.IsLoopback() {
				st.reachedAt = srv.reachedAt()
			}
		}
	} else if errors.Is(err, comm.ErrAuth) {
		err = fmt.Errorf("rendezvous: rank %d: %w: every rank of a job needs the same GDIST_TOKEN (set it to one value on every rank, or on none); if this is another job's store, %s", env.Rank, err, anotherJob)
	}
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, nil, err
	}
	var once sync.Once
	var closeErr error
	closeFn = func() error {
		once.Do(func() {
			dctx, cancel := context.WithTimeout(context.Background(), DoneTimeout)
			defer cancel()
			_, err := st.Add(dctx, doneKey, 1)
			st.Close()
			if err == nil && srv != nil {
				err = srv.waitDone(dctx, doneKey, int64(env.Size))
			}
			if srv != nil {
				srv.Close()
			}
			if err != nil {
				what := "reporting done to the store"
				if srv != nil {
					what = "shutting the store down before every rank was done with it"
				}
				logf("rendezvous: rank %d: %s: %v", env.Rank, what, err)
				if errors.Is(err, context.DeadlineExceeded) {
					err = fmt.Errorf("%w: rank %d: %w", comm.ErrTimeout, env.Rank, err)
				}
				closeErr = err
			}
		})
		return closeErr
	}
	return st, closeFn, nil
}

// InitComm builds this rank's world Comm from the environment: FromEnv, then
// Connect, then comm.New with the named backend (whose package must be
// imported for its registration). closeFn closes the Comm, then the store.
// A token derived from the job id (not secret) is reported through the
// standard comm logger when Size > 1.
func InitComm(ctx context.Context, backend string, opts comm.Options) (c comm.Comm, closeFn func() error, err error) {
	env, err := FromEnv()
	if err != nil {
		return nil, nil, err
	}
	return initComm(ctx, env, backend, opts, nil)
}

func initComm(ctx context.Context, env Env, backend string, opts comm.Options, logf func(string, ...any)) (comm.Comm, func() error, error) {
	cfg := comm.Config{
		Rank:      env.Rank,
		Size:      env.Size,
		LocalRank: env.LocalRank,
		LocalSize: env.LocalSize,
		Token:     env.Token,
		Options:   opts,
		Logf:      logf,
	}
	logf = cfg.Logger()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if env.TokenDerived && env.Size > 1 && env.Rank == 0 {
		logf("rendezvous: GDIST_TOKEN is not set; using a token derived from the job id, which is not secret")
	}
	st, closeStore, err := Connect(ctx, env, logf)
	if err != nil {
		return nil, nil, err
	}
	cfg.Store = st
	c, err := comm.New(ctx, backend, cfg)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return c, func() error {
		return errors.Join(c.Close(), closeStore())
	}, nil
}
