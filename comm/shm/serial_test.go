//go:build linux

package shm

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/internal/wire"
)

// goid is the calling goroutine's id (from its stack's header line).
func goid() int64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := bytes.Fields(b[:n])
	if len(f) < 2 {
		return -1
	}
	id, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return id
}

// callers is a Transport that records the goroutines its Sends and
// receives run on (every other method is the shm Transport's).
type callers struct {
	*Transport
	mu  sync.Mutex
	ids map[int64]int
}

func (c *callers) note() {
	id := goid()
	c.mu.Lock()
	c.ids[id]++
	c.mu.Unlock()
}

func (c *callers) Send(ctx context.Context, to int, h wire.Header, payload []byte) error {
	c.note()
	return c.Transport.Send(ctx, to, h, payload)
}

func (c *callers) Recv(ctx context.Context, from int, h wire.Header, dst []byte) error {
	c.note()
	return c.Transport.Recv(ctx, from, h, dst)
}

func (c *callers) RecvPayload(ctx context.Context, from int, h wire.Header, n int, fn func(off int, payload []byte)) error {
	c.note()
	return c.Transport.RecvPayload(ctx, from, h, n, fn)
}

// TestAllReduceOneGoroutine: an all-reduce of ordinary buffers (1 MiB: the
// ring, many chunks each way; 4 and 256 KiB: recursive doubling, the
// latter chunked) sends and receives on one goroutine, the one that runs
// the op (algo's serial ring and exchanges), so a rank with one core (pinned, GOMAXPROCS 1)
// does not depend on a second thread taking turns with it. With
// Tuning.Serial off, a sender goroutine runs beside the receiver.
func TestAllReduceOneGoroutine(t *testing.T) {
	for _, serial := range []bool{true, false} {
		for _, n := range []int{1 << 10, 1 << 16, 1 << 18} {
			t.Run(fmt.Sprintf("serial=%v/floats=%d", serial, n), func(t *testing.T) {
				w := mkWorld(t, 2, comm.Options{}, Options{})
				ctx := ctxT(t, 60*time.Second)
				tun := algo.DefaultTuning()
				tun.Serial = serial
				tun.ZeroCopyMin = 0
				tun.StagedMin, tun.StagedMinPair = 0, 0 // the message path (staged sends nothing: TestStagedAllReduce)
				rec := &callers{Transport: w.ts[0], ids: map[int64]int{}}
				cs := []*algo.Comm{algo.NewTunedComm(rec, comm.Options{}, tun), algo.NewTunedComm(w.ts[1], comm.Options{}, tun)}
				bufs := [][]float32{make([]float32, n), make([]float32, n)}
				for r := range bufs {
					for i := range bufs[r] {
						bufs[r][i] = float32(r + 1)
					}
				}
				errc := make(chan error, 1)
				go func() { errc <- comm.Run(ctx)(cs[1].AllReduce(ctx, comm.FromSlice(bufs[1]), comm.Sum)) }()
				if err := comm.Run(ctx)(cs[0].AllReduce(ctx, comm.FromSlice(bufs[0]), comm.Sum)); err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				for r := range bufs {
					for i, v := range bufs[r] {
						if v != 3 {
							t.Fatalf("rank %d: element %d = %v, want 3", r, i, v)
						}
					}
				}
				calls := 0
				for _, k := range rec.ids {
					calls += k
				}
				t.Logf("rank 0: %d sends and receives on %d goroutine(s)", calls, len(rec.ids))
				if serial && len(rec.ids) != 1 {
					t.Errorf("rank 0's sends and receives ran on %d goroutines, want 1: %v", len(rec.ids), rec.ids)
				}
				if !serial && n >= 1<<16 && len(rec.ids) < 2 {
					t.Errorf("with Serial off, rank 0's sends and receives ran on %d goroutine, want a sender goroutine besides", len(rec.ids))
				}
			})
		}
	}
}
