package comm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

var adapterRuns atomic.Int32 // names stay unique under -count

type adaptedComm struct{ Comm }

func TestRegisterAdapter(t *testing.T) {
	name := fmt.Sprintf("adapter-test-backend-%d", adapterRuns.Add(1))
	Register(name, func(ctx context.Context, cfg Config) (Comm, error) { return nil, nil })
	var seen []string
	RegisterAdapter(func(backend string, c Comm) Comm {
		if backend != name {
			return c
		}
		seen = append(seen, backend)
		return adaptedComm{c}
	})
	// A factory that builds nothing is passed over.
	if c, err := New(context.Background(), name, Config{Rank: 0, Size: 1}); c != nil || err != nil || len(seen) != 0 {
		t.Fatalf("New = %v, %v; adapter saw %v", c, err, seen)
	}
	Register(name+"-2", func(ctx context.Context, cfg Config) (Comm, error) { return adaptedComm{}, nil })
	RegisterAdapter(func(backend string, c Comm) Comm {
		if backend != name+"-2" {
			return c
		}
		return adaptedComm{c}
	})
	c, err := New(context.Background(), name+"-2", Config{Rank: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := c.(adaptedComm); !ok || a.Comm == nil {
		t.Fatalf("New did not apply the adapter: %#v", c)
	}
}
