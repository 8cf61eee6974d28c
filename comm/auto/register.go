package auto

import (
	"context"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// The "auto" backend: the world Comm is algo's collectives over a
// Transport that picks shared memory or TCP per peer; closing that Comm
// closes the Transport.
func init() {
	comm.Register("auto", func(ctx context.Context, cfg comm.Config) (comm.Comm, error) {
		t, err := New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return algo.NewComm(t, cfg.Options), nil
	})
}
