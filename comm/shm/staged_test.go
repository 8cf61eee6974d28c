//go:build linux

package shm

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// TestStagedAllReduce: the staged all-reduce of ordinary buffers (algo's
// allreduce_staged.go) equals the single-process reduction on every rank,
// for 2-4 ranks, sums, averages and maxima of float32, float64 and int32,
// and a run of ops of changing sizes (one element to several pieces, and
// back), in one piece of 1 MiB or many of 4 KiB. After the first op
// (whose one message each way sets the staging up) no rank sends anything,
// and each moves the all-reduce's 2n(p-1)/p bytes, read from its peers'
// staging (and counted as sent and received by Traffic).
func TestStagedAllReduce(t *testing.T) {
	sizes := []int{1, 1000, 1<<18 + 3, 5, 1 << 16, 7, 300_001}
	for _, p := range []int{2, 3, 4} {
		for _, piece := range []int{4 << 10, 1 << 20} {
			t.Run(fmt.Sprintf("p%d/piece=%d", p, piece), func(t *testing.T) {
				if testing.Short() && p == 4 {
					t.Skip("short")
				}
				w := mkWorld(t, p, comm.Options{}, Options{})
				ctx := ctxT(t, 120*time.Second)
				tun := algo.DefaultTuning()
				tun.ZeroCopyMin = 0
				tun.StagedMin = 1
				tun.StagedBytes = piece
				cs := make([]*algo.Comm, p)
				for r := range p {
					cs[r] = algo.NewTunedComm(w.ts[r], comm.Options{}, tun)
				}
				type cse struct {
					dt  comm.DType
					red comm.ReduceOp
				}
				cases := []cse{{comm.Float32, comm.Sum}, {comm.Float64, comm.Avg}, {comm.Int32, comm.Max}, {comm.Float32, comm.Sum}}
				errc := make(chan error, p)
				for r := range p {
					go func() {
						errc <- func() error {
							c := cs[r]
							var sent0 int64 // message bytes sent after the first op
							msgs := func() int64 {
								var n int64
								for _, m := range c.Moved() {
									n += m.Sent
								}
								return n
							}
							for i, n := range sizes {
								x := cases[i%len(cases)]
								in := func(r, j int) float64 { return float64((r+1)*(j%97) - 40*r) }
								var buf comm.Buffer
								f32, f64, i32 := []float32(nil), []float64(nil), []int32(nil)
								switch x.dt {
								case comm.Float32:
									f32 = make([]float32, n)
									for j := range f32 {
										f32[j] = float32(in(r, j))
									}
									buf = comm.FromSlice(f32)
								case comm.Float64:
									f64 = make([]float64, n)
									for j := range f64 {
										f64[j] = in(r, j)
									}
									buf = comm.FromSlice(f64)
								case comm.Int32:
									i32 = make([]int32, n)
									for j := range i32 {
										i32[j] = int32(in(r, j))
									}
									buf = comm.FromSlice(i32)
								}
								if err := comm.Run(ctx)(c.AllReduce(ctx, buf, x.red)); err != nil {
									return err
								}
								for j := range n {
									want := 0.0
									for q := range p {
										v := in(q, j)
										switch {
										case x.red == comm.Max && q == 0:
											want = v
										case x.red == comm.Max:
											want = math.Max(want, v)
										default:
											want += v
										}
									}
									if x.red == comm.Avg {
										want /= float64(p)
									}
									var got float64
									switch x.dt {
									case comm.Float32:
										got = float64(f32[j])
									case comm.Float64:
										got = f64[j]
									case comm.Int32:
										got = float64(i32[j])
									}
									if math.Abs(got-want) > 1e-9*math.Abs(want) {
										return fmt.Errorf("rank %d, op %d (%v %v x %d): element %d = %v, want %v", r, i, x.dt, x.red, n, j, got, want)
									}
								}
								if i == 0 {
									sent0 = msgs()
								}
							}
							if sent := msgs(); sent != sent0 {
								return fmt.Errorf("rank %d sent %d bytes after the first op, want none (staged)", r, sent-sent0)
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
				// Moved: one more float32 op of n elements.
				const n = 1 << 18
				errc2 := make(chan error, p)
				moved := make([][3]int64, p) // Moved, Traffic's sent and received
				for r := range p {
					go func() {
						m0 := comm.MovedBytes(cs[r].Moved())
						s0, r0 := cs[r].Traffic()
						err := comm.Run(ctx)(cs[r].AllReduce(ctx, comm.FromSlice(make([]float32, n)), comm.Sum))
						s1, r1 := cs[r].Traffic()
						moved[r] = [3]int64{comm.MovedBytes(cs[r].Moved()) - m0, s1 - s0, r1 - r0}
						errc2 <- err
					}()
				}
				for range p {
					if err := <-errc2; err != nil {
						t.Fatal(err)
					}
				}
				want := int64(2 * 4 * n * (p - 1) / p)
				for r, m := range moved {
					for i, what := range []string{"moved", "Traffic counted as sent", "Traffic counted as received"} {
						if m[i] < want*99/100 || m[i] > want*101/100 {
							t.Errorf("rank %d: %s %d bytes in a staged all-reduce of %d bytes, want about %d (2n(p-1)/p)", r, what, m[i], 4*n, want)
						}
					}
				}
				for _, c := range cs {
					if err := c.Close(); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
}

// TestStagedPeerLost: a peer that dies or closes between staged
// all-reduces (its staging set up, this rank waiting for it to be ready)
// fails this rank's op with an error naming it, within a few heartbeats
// (bounds generous for a busy machine), and Close then does not wait for it.
func TestStagedPeerLost(t *testing.T) {
	for _, how := range []string{"crash", "close"} {
		t.Run(how, func(t *testing.T) {
			opts := comm.Options{PeerTimeout: 300 * time.Millisecond}
			w := mkWorld(t, 2, opts, Options{})
			ctx := ctxT(t, 20*time.Second)
			tun := algo.DefaultTuning()
			tun.StagedMin = 1
			cs := []*algo.Comm{algo.NewTunedComm(w.ts[0], opts, tun), algo.NewTunedComm(w.ts[1], opts, tun)}
			const n = 1 << 18
			bufs := [][]float32{make([]float32, n), make([]float32, n)}
			errc := make(chan error, 1)
			go func() { errc <- comm.Run(ctx)(cs[1].AllReduce(ctx, comm.FromSlice(bufs[1]), comm.Sum)) }()
			if err := comm.Run(ctx)(cs[0].AllReduce(ctx, comm.FromSlice(bufs[0]), comm.Sum)); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
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
			err := comm.Run(ctx)(cs[0].AllReduce(ctx, comm.FromSlice(bufs[0]), comm.Sum))
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("took %v to fail (peer timeout 300ms)", d)
			}
			want := comm.ErrPeerLost
			if how == "close" {
				want = comm.ErrClosed
			}
			wantPeerErr(t, err, 1, want)
			if !strings.Contains(err.Error(), "all_reduce") {
				t.Errorf("error does not name the op: %v", err)
			}
			t.Logf("%s: %v", how, err)
			// Closing after the failure does not wait for the lost peer.
			start = time.Now()
			cs[0].Close()
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Close took %v after a failed staged op: it waited for the lost peer", d)
			}
		})
	}
}
