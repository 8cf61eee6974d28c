//go:build !linux

package shm

import (
	"context"
	"fmt"
	"runtime"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/wire"
)

// Supported reports whether this platform has the shared-memory transport
// (Linux only: it needs futexes and pidfds).
const Supported = false

var errUnsupported = fmt.Errorf("shm: %w on %s", comm.ErrUnsupported, runtime.GOOS)

// Transport is not available on this platform.
type Transport struct{}

// New fails: the shared-memory transport needs Linux.
func New(ctx context.Context, cfg comm.Config) (*Transport, error) { return nil, errUnsupported }

// NewWithOptions fails: the shared-memory transport needs Linux.
func NewWithOptions(ctx context.Context, cfg comm.Config, o Options) (*Transport, error) {
	return nil, errUnsupported
}

func (t *Transport) Rank() int                                            { return 0 }
func (t *Transport) Size() int                                            { return 1 }
func (t *Transport) Ranks() []int                                         { return nil }
func (t *Transport) Err() error                                           { return errUnsupported }
func (t *Transport) Fail(err error)                                       {}
func (t *Transport) Close() error                                         { return nil }
func (t *Transport) Abort(uint64, []int, error)                           {}
func (t *Transport) Send(context.Context, int, wire.Header, []byte) error { return errUnsupported }
func (t *Transport) Recv(context.Context, int, wire.Header, []byte) error { return errUnsupported }
func (t *Transport) RecvPayload(context.Context, int, wire.Header, int, func(int, []byte)) error {
	return errUnsupported
}

func (t *Transport) Alloc(int) ([]byte, func(), error)         { return nil, nil, errUnsupported }
func (t *Transport) Shares(int) bool                           { return false }
func (t *Transport) Locate([]byte) uint64                      { return 0 }
func (t *Transport) Map(uint64, int) []byte                    { return nil }
func (t *Transport) Flags() (uint64, *uint64, *uint64, func()) { return 0, nil, nil, nil }
func (t *Transport) Counter(uint64, int) *uint64               { return nil }
func (t *Transport) Publish(*uint64, uint64)                   {}
func (t *Transport) Pulse()                                    {}
func (t *Transport) Quiesce(int, *uint64, uint64) bool         { return false }
func (t *Transport) Await(context.Context, uint64, int, *uint64, uint64) error {
	return errUnsupported
}
