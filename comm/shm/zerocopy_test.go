//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/internal/wire"
)

// TestAllocConformance: all-reduce of every dtype, op and count with
// buffers from comm.Alloc on every rank (zero-copy: the traffic shows
// only the exchange) and mixed with ordinary buffers (the ordinary path),
// bit for bit equal to the all-reduce of ordinary memory.
func TestAllocConformance(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	t.Setenv("GDIST_ZEROCOPY_MIN", "1")
	cfg := commtest.AllocConfig{Config: commtest.Config{Sizes: []int{2, 3, 4}}, ZeroCopy: true}
	if testing.Short() {
		cfg.Sizes = []int{2, 3}
	}
	commtest.AllocSuite(t, shmWorld, cfg)
}

// zcJoin makes rank 1 (a bare transport) join all_reduce #1 of float32 x
// n as the zero-copy path would: it allocates its buffer and a flag block
// and sends rank 0 their handles, but then never reduces anything.
func zcJoin(t *testing.T, ctx context.Context, tr *Transport, n int) {
	t.Helper()
	mem, free, err := tr.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(free)
	fh, ready, fin, release := tr.Flags()
	if fh == 0 {
		t.Fatal("no flag block")
	}
	t.Cleanup(release)
	var msg [32]byte
	le := binary.LittleEndian
	le.PutUint64(msg[0:], tr.Locate(mem))
	le.PutUint64(msg[8:], fh)
	le.PutUint64(msg[16:], atomic.LoadUint64(ready))
	le.PutUint64(msg[24:], atomic.LoadUint64(fin))
	h := wire.Header{Kind: wire.KindColl, Op: wire.OpAllReduce, DType: uint8(comm.Float32), Red: uint8(comm.Sum),
		Algo: algo.AlgoZeroCopy, Group: algo.WorldGroup, Seq: 1, Count: uint64(n), Step: 1 << 30}
	if err := tr.Send(ctx, 0, h, msg[:]); err != nil {
		t.Fatal(err)
	}
}

// TestZeroCopyPeerLost: a peer that dies in the middle of a zero-copy
// all-reduce (after the exchange, while this rank waits for its chunks)
// fails the op with an error naming it, within a few heartbeats.
func TestZeroCopyPeerLost(t *testing.T) {
	t.Setenv("GDIST_ZEROCOPY_MIN", "1")
	for _, how := range []string{"crash", "close"} {
		t.Run(how, func(t *testing.T) {
			opts := comm.Options{PeerTimeout: 300 * time.Millisecond}
			w := mkWorld(t, 2, opts, Options{})
			ctx := ctxT(t, 20*time.Second)
			c0 := algo.NewComm(w.ts[0], opts)
			const n = 1 << 20
			b, free, err := comm.Alloc(c0, comm.Float32, n)
			if err != nil {
				t.Fatal(err)
			}
			defer free()
			zcJoin(t, ctx, w.ts[1], n)
			work, err := c0.AllReduce(ctx, b, comm.Sum)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(100 * time.Millisecond)
				if how == "crash" {
					crash(w.ts[1])
				} else {
					w.ts[1].Close()
				}
			}()
			start := time.Now()
			err = work.Wait(ctx)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v to fail", d)
			}
			want := comm.ErrPeerLost
			if how == "close" {
				want = comm.ErrClosed
			}
			wantPeerErr(t, err, 1, want)
			t.Logf("%s: %v", how, err)
			if !strings.Contains(err.Error(), "all_reduce") {
				t.Errorf("error does not name the op: %v", err)
			}
			// The buffer is still valid memory after the failure and after
			// Close.
			c0.Close()
			s, _ := comm.AsSlice[float32](b)
			s[0], s[n-1] = 1, 2
		})
	}
}

// TestZeroCopyCtxEnds: a zero-copy all-reduce whose peer stalls ends with
// the caller's ctx, saying which rank it waited for. The stalled peer
// (alive, in the op, never done with this rank's buffer) holds the buffer
// for at most the peer deadline after that: no peer writes into a buffer
// whose op returned.
func TestZeroCopyCtxEnds(t *testing.T) {
	t.Setenv("GDIST_ZEROCOPY_MIN", "1")
	opts := comm.Options{PeerTimeout: 500 * time.Millisecond}
	w := mkWorld(t, 2, opts, Options{})
	ctx := ctxT(t, 20*time.Second)
	c0 := algo.NewComm(w.ts[0], opts)
	const n = 1 << 16
	b, free, err := comm.Alloc(c0, comm.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	zcJoin(t, ctx, w.ts[1], n)
	octx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = comm.Run(octx)(c0.AllReduce(octx, b, comm.Sum))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("got %v, want a deadline error naming rank 1", err)
	}
	if d := time.Since(start); d < 600*time.Millisecond || d > 5*time.Second {
		t.Errorf("returned after %v, want the ctx's 200ms plus the peer deadline's 500ms", d)
	}
}

// TestArena: Alloc's contract on the transport: zeroed, aligned memory in
// this rank's area that the peer maps at the same handle; pages committed
// on allocation and given back on free; a clear error naming the option
// when the area is full; free twice harmless; memory valid after Close
// until freed; Alloc after Close fails.
func TestArena(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{AreaBytes: 16 << 20})
	a := w.ts[0].arena
	blocks := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(a.f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	before := blocks()
	if before > 1<<20 {
		t.Errorf("%d bytes of the file committed before any allocation", before)
	}
	m, free, err := w.ts[0].Alloc(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if got := blocks() - before; got < 8<<20 {
		t.Errorf("allocating 8 MiB committed %d bytes", got)
	}
	if uintptr(unsafe.Pointer(&m[0]))%64 != 0 {
		t.Error("not 64-byte aligned")
	}
	for i := range m {
		if m[i] != 0 {
			t.Fatalf("byte %d not zero", i)
		}
	}
	m[0], m[len(m)-1] = 7, 9
	h := w.ts[0].Locate(m)
	if h == 0 || w.ts[0].Locate(make([]byte, 8)) != 0 {
		t.Fatal("Locate")
	}
	if pm := w.ts[1].Map(h, len(m)); pm == nil || pm[0] != 7 || pm[len(m)-1] != 9 {
		t.Fatal("the peer does not see the buffer at its handle")
	}
	if w.ts[1].Map(h, 1<<40) != nil || w.ts[1].Map(0, 1) != nil {
		t.Error("Map accepts a range outside the areas")
	}
	_, _, err = w.ts[0].Alloc(8 << 20)
	if err == nil || !strings.Contains(err.Error(), "GDIST_SHM_AREA_BYTES") {
		t.Errorf("alloc past the area: %v", err)
	}
	free()
	free()
	if got := blocks() - before; got > 1<<20 {
		t.Errorf("%d bytes still committed after free", got)
	}
	m2, free2, err := w.ts[0].Alloc(12 << 20)
	if err != nil {
		t.Fatalf("freed space is not reused: %v", err)
	}
	if m2[0] != 0 {
		t.Error("reused memory not zeroed")
	}
	w.ts[0].Close()
	m2[0] = 1 // still mapped
	if _, _, err := w.ts[0].Alloc(64); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("alloc after close: %v", err)
	}
	free2()
	free2()
	if a.mem != nil {
		t.Error("areas still mapped after Close and the last free")
	}
}

// TestAllocFallback: without areas (AreaBytes < 0), or on a Comm of one
// rank, comm.Alloc gives ordinary memory and all-reduce still works.
func TestAllocFallback(t *testing.T) {
	w := mkWorld(t, 2, comm.Options{}, Options{AreaBytes: -1})
	ctx := ctxT(t, 20*time.Second)
	comms := []comm.Comm{algo.NewComm(w.ts[0], comm.Options{}), algo.NewComm(w.ts[1], comm.Options{})}
	err := commtest.RunRanks(ctx, comms, 10*time.Second, func(ctx context.Context, c comm.Comm) error {
		b, free, err := comm.Alloc(c, comm.Float64, 1000)
		if err != nil {
			return err
		}
		defer free()
		if w.ts[c.Rank()].Locate(b.Host()) != 0 {
			return errors.New("buffer in shared memory without areas")
		}
		s, _ := comm.AsSlice[float64](b)
		for i := range s {
			s[i] = float64(i + c.Rank())
		}
		if err := comm.Run(ctx)(c.AllReduce(ctx, b, comm.Sum)); err != nil {
			return err
		}
		for i := range s {
			if s[i] != float64(2*i+1) {
				return fmt.Errorf("element %d: %v", i, s[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOnTmpfs(t *testing.T) {
	if !onTmpfs("/dev/shm") {
		t.Skip("/dev/shm is not a tmpfs here")
	}
	if onTmpfs("/proc") {
		t.Error("/proc reported as a tmpfs")
	}
}

// TestMoved: what each rank moved (comm.MovedCounter) is the algorithm's
// textbook volume whichever path ran: an all-reduce of n bytes over p
// ranks moves 2n(p-1)/p per rank, as messages on ordinary buffers and as
// reads and writes of the peers' shared buffers on comm.Alloc's (where
// Traffic's sent shows only the exchange); reduce-scatter and all-gather
// n(p-1)/p each. Only the small messages of the zero-copy exchange (32
// bytes to each peer) and of the algorithms' handshakes are on top.
func TestMoved(t *testing.T) {
	t.Setenv("GDIST_ZEROCOPY_MIN", "1")
	const n = 1 << 18 // floats
	for _, p := range []int{2, 3, 4} {
		for _, shared := range []bool{true, false} {
			t.Run(fmt.Sprintf("p%d/shared=%v", p, shared), func(t *testing.T) {
				w := mkWorld(t, p, comm.Options{}, Options{})
				ctx := ctxT(t, 60*time.Second)
				cs := make([]*algo.Comm, p)
				for r := range p {
					cs[r] = algo.NewComm(w.ts[r], comm.Options{})
				}
				type vol struct{ ar, rs, ag int64 }
				got := make([]vol, p)
				errc := make(chan error, p)
				for r := range p {
					go func() {
						errc <- func() error {
							c := cs[r]
							buf := func(k int) (comm.Buffer, error) {
								if !shared {
									return comm.FromSlice(make([]float32, k)), nil
								}
								b, free, err := comm.Alloc(c, comm.Float32, k)
								t.Cleanup(free)
								return b, err
							}
							a, err := buf(n)
							if err != nil {
								return err
							}
							part, err := buf(n / p)
							if err != nil {
								return err
							}
							moved := func() int64 { return comm.MovedBytes(c.Moved()) }
							m0 := moved()
							if err := comm.Run(ctx)(c.AllReduce(ctx, a, comm.Sum)); err != nil {
								return err
							}
							m1 := moved()
							whole := a.Slice(0, p*(n/p))
							if err := comm.Run(ctx)(c.ReduceScatter(ctx, part, whole, comm.Sum)); err != nil {
								return err
							}
							m2 := moved()
							if err := comm.Run(ctx)(c.AllGather(ctx, whole, part)); err != nil {
								return err
							}
							got[r] = vol{m1 - m0, m2 - m1, moved() - m2}
							for _, m := range c.Moved() {
								if m.Transport != "shm" {
									return fmt.Errorf("rank %d: moved over %q, want shm only: %+v", r, m.Transport, c.Moved())
								}
							}
							if sent, _ := c.Traffic(); shared && sent > 1024 {
								return fmt.Errorf("rank %d: sent %d bytes in zero-copy collectives, want only the exchanges", r, sent)
							}
							return nil
						}()
					}()
				}
				for range p {
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
				}
				full := float64(4 * n)
				want := vol{int64(2 * full * float64(p-1) / float64(p)), int64(full * float64(p-1) / float64(p)), int64(full * float64(p-1) / float64(p))}
				near := func(got, want int64) bool {
					return float64(got) >= 0.99*float64(want) && float64(got) <= 1.01*float64(want)+1024
				}
				for r, g := range got {
					if !near(g.ar, want.ar) || !near(g.rs, want.rs) || !near(g.ag, want.ag) {
						t.Errorf("rank %d moved %d / %d / %d bytes in all-reduce / reduce-scatter / all-gather, want %d / %d / %d (n(p-1)/p x 2, 1, 1)",
							r, g.ar, g.rs, g.ag, want.ar, want.rs, want.ag)
					}
				}
			})
		}
	}
}
