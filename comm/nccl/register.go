package nccl

import (
	"context"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/staging"
)

// The "nccl" backend: New, wrapped so that host buffers work too (they are
// staged through memory on the rank's GPU). Without CUDA or NCCL,
// comm.New(ctx, "nccl", cfg) fails with an error wrapping ErrUnavailable
// that says what is missing.
func init() {
	comm.Register("nccl", func(ctx context.Context, cfg comm.Config) (comm.Comm, error) {
		c, err := New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return staging.WrapDevice(c, c.Device()), nil
	})
}
