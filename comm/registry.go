package comm

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Store is the key-value store ranks use to find each other (package
// rendezvous provides a TCP one). Get and Wait block until the keys exist or
// ctx ends. Implementations are safe for concurrent use.
type Store interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	// Add adds delta to the integer stored at key (0 if absent) and
	// returns the new value.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// CompareAndSet sets key to value if its current value is old (an
	// absent key matches a nil or empty old) and returns the value now
	// stored.
	CompareAndSet(ctx context.Context, key string, old, value []byte) ([]byte, error)
	Wait(ctx context.Context, keys ...string) error
	Close() error
}

// Config is what a backend needs to build the world Comm of one rank.
type Config struct {
	Rank      int
	Size      int
	LocalRank int // rank among the processes on this host
	LocalSize int // number of processes on this host
	// Store connects the ranks of a process backend (unused by inproc).
	Store Store
	// Token is the job's secret; every connection must prove it.
	Token []byte
	// Job names the job; inproc ranks with the same Job meet each other.
	Job string
	// Host is the address other ranks use to reach this one ("" picks one).
	Host string
	Options
	// Logf receives diagnostics (refused connections, ...). nil logs to
	// the standard logger.
	Logf func(format string, args ...any)
}

// Validate checks the rank and size.
func (c Config) Validate() error {
	if c.Size < 1 {
		return InvalidArgf("world size %d < 1", c.Size)
	}
	if c.Rank < 0 || c.Rank >= c.Size {
		return InvalidArgf("rank %d out of range [0, %d)", c.Rank, c.Size)
	}
	return nil
}

// Factory builds the world Comm of one rank.
type Factory func(ctx context.Context, cfg Config) (Comm, error)

// The registry of backends. There is no hook that rewrites what New
// returns: a wrapper (device buffers on the host backends, say) is applied
// where it is used, visibly (comm/staging's New, Adapt or Wrap).
var (
	regMu    sync.Mutex
	registry = map[string]Factory{}
)

// Register makes a backend available by name. It panics if the name is taken.
func Register(name string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("comm: backend " + name + " registered twice")
	}
	registry[name] = f
}

// Backends lists the registered backend names.
func Backends() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New builds the world Comm of one rank with the named backend. The backend's
// package must be imported (for its registration), e.g.
// import _ "github.com/gdist/gdist/comm/tcp".
func New(ctx context.Context, backend string, cfg Config) (Comm, error) {
	regMu.Lock()
	f, ok := registry[backend]
	regMu.Unlock()
	if !ok {
		return nil, InvalidArgf("unknown backend %q (registered: %v)", backend, Backends())
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return f(ctx, cfg)
}

// Logger returns cfg.Logf or a standard-logger fallback.
func (c Config) Logger() func(format string, args ...any) {
	if c.Logf != nil {
		return c.Logf
	}
	return func(format string, args ...any) {
		fmt.Fprintf(logOut, "%s comm: "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
}
