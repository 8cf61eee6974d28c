package shm

import (
	"context"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// The "shm" backend: the world Comm is algo's collectives over a Transport
// spanning every rank (all on this host); closing that Comm closes the
// Transport.
func init() {
	comm.Register("shm", func(ctx context.Context, cfg comm.Config) (comm.Comm, error) {
		t, err := New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return algo.NewComm(t, cfg.Options), nil
	})
}
