package reduce

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gdist/gdist/comm"
)

// Kernel benchmarks: GB/s are bytes of dst per second (one input buffer's
// worth; the kernel reads two and writes one). "ref" is the plain-Go
// reference, the others the kernel sets this machine has.
//
//	go test -run '^$' -bench 'Reduce|Copy' ./internal/reduce

var benchSizes = []int{4 << 10, 256 << 10, 4 << 20, 64 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return fmt.Sprintf("%dKiB", n>>10)
	}
}

func benchInputs(dt comm.DType, n int) (a, b []byte) {
	rng := rand.New(rand.NewPCG(7, 8))
	a, b = make([]byte, n), make([]byte, n)
	for i := 0; i+dt.Size() <= n; i += dt.Size() {
		putFloat(dt, a[i:], rng.Float64()*100)
		putFloat(dt, b[i:], rng.Float64()*100)
	}
	return a, b
}

func BenchmarkReduce(b *testing.B) {
	cases := []struct {
		dt comm.DType
		op comm.ReduceOp
	}{
		{comm.Float32, comm.Sum}, {comm.Float32, comm.Max}, {comm.Float64, comm.Sum},
		{comm.BFloat16, comm.Sum}, {comm.Float16, comm.Sum},
	}
	for _, c := range cases {
		for _, n := range benchSizes {
			x, y := benchInputs(c.dt, n)
			b.Run(fmt.Sprintf("%v-%v/%s/ref", c.dt, c.op, sizeName(n)), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					reduceRef(c.dt, c.op, x, y)
				}
			})
			for _, s := range kernelSets() {
				b.Run(fmt.Sprintf("%v-%v/%s/%s", c.dt, c.op, sizeName(n), s.name), func(b *testing.B) {
					b.SetBytes(int64(n))
					k := s.bin[c.dt][c.op]
					for b.Loop() {
						k(x, x, y)
					}
				})
			}
		}
	}
}

func BenchmarkDivide(b *testing.B) {
	for _, dt := range []comm.DType{comm.Float32, comm.BFloat16, comm.Float16} {
		n := 4 << 20
		x, _ := benchInputs(dt, n)
		b.Run(fmt.Sprintf("%v/%s/ref", dt, sizeName(n)), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				divideRef(dt, x, 3)
			}
		})
		for _, s := range kernelSets() {
			b.Run(fmt.Sprintf("%v/%s/%s", dt, sizeName(n), s.name), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					s.div[dt](x, 3)
				}
			})
		}
	}
}

// BenchmarkCopy is the yardstick: copy moves one buffer, a reduce reads two
// and writes one.
func BenchmarkCopy(b *testing.B) {
	for _, n := range benchSizes {
		x, y := make([]byte, n), make([]byte, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(x, y)
			}
		})
	}
}

// BenchmarkReduceSplit asks whether splitting one large float32 sum over
// two goroutines pays on this machine, alone and while another goroutine
// (the other rank of a 2-rank job) runs the same kernel on its own buffers.
func BenchmarkReduceSplit(b *testing.B) {
	const n = 16 << 20
	k := active.bin[comm.Float32][comm.Sum]
	x, y := benchInputs(comm.Float32, n)
	for _, other := range []bool{false, true} {
		for _, parts := range []int{1, 2} {
			name := fmt.Sprintf("parts=%d/alone", parts)
			if other {
				name = fmt.Sprintf("parts=%d/beside-another-rank", parts)
			}
			b.Run(name, func(b *testing.B) {
				var stop atomic.Bool
				var bg sync.WaitGroup
				if other {
					ox, oy := benchInputs(comm.Float32, n)
					bg.Add(1)
					go func() {
						defer bg.Done()
						for !stop.Load() {
							k(ox, ox, oy)
						}
					}()
				}
				b.SetBytes(n)
				for b.Loop() {
					if parts == 1 {
						k(x, x, y)
						continue
					}
					var wg sync.WaitGroup
					for p := 0; p < parts; p++ {
						lo, hi := p*n/parts, (p+1)*n/parts
						wg.Add(1)
						go func() { defer wg.Done(); k(x[lo:hi], x[lo:hi], y[lo:hi]) }()
					}
					wg.Wait()
				}
				b.StopTimer()
				stop.Store(true)
				bg.Wait()
			})
		}
	}
}

// BenchmarkAllReduceBound is the physical bound of a 2-rank all-reduce of
// S bytes on this machine's cores: what a zero-copy all-reduce must move,
// with no protocol at all. Two goroutines (the two ranks; GOMAXPROCS >= 2
// puts them on two cores) each own a buffer of S bytes. MB/s is S per op:
// the 2-rank bus bandwidth (algbw x 2(n-1)/n = algbw).
//
//   - 2-rank-push (what comm/algo's allreduce_zerocopy.go does): each reduces its half
//     from both buffers into its own and copies the result into the
//     other's, 64 KiB at a time (a float32 sum-kernel pass and a copy
//     from cache), then both meet at a barrier.
//
//   - 2-rank (the pull variant it replaced): each reduces its half into
//     its own buffer, barrier, copies the other half from the other's
//     buffer, barrier. Every op then moves each line between the cores
//     twice, where push, in a loop that rewrites nothing, moves none.
//
//   - copy, reduce: one core's memcpy and a += b on S/2 bytes, the other
//     core idle (MB/s: bytes of dst).
//
// Run it with
//
//	go test -run '^$' -bench AllReduceBound -count 3 ./internal/reduce
func BenchmarkAllReduceBound(b *testing.B) {
	k := active.bin[comm.Float32][comm.Sum]
	for _, s := range []int{1 << 20, 4 << 20, 16 << 20, 64 << 20} {
		h := s / 2
		x, y := benchInputs(comm.Float32, s)
		b.Run(fmt.Sprintf("%s/copy", sizeName(s)), func(b *testing.B) {
			b.SetBytes(int64(h))
			for b.Loop() {
				copy(x[:h], y[:h])
			}
		})
		b.Run(fmt.Sprintf("%s/reduce", sizeName(s)), func(b *testing.B) {
			b.SetBytes(int64(h))
			for b.Loop() {
				k(x[:h], x[:h], y[:h])
			}
		})
		b.Run(fmt.Sprintf("%s/2-rank", sizeName(s)), func(b *testing.B) {
			// Pull: reduce my half, then copy the peer's reduced half.
			twoRanks(b, s, func(r int, barrier func()) {
				lo, hi := r*h, (r+1)*h
				mine, peer := bufs(x, y, r)
				k(mine[lo:hi], mine[lo:hi], peer[lo:hi])
				barrier()
				copy(mine[s-hi:s-lo], peer[s-hi:s-lo])
				barrier()
			})
		})
		b.Run(fmt.Sprintf("%s/2-rank-push", sizeName(s)), func(b *testing.B) {
			// Push: reduce my half chunk by chunk and write each chunk
			// into the peer's buffer too.
			twoRanks(b, s, func(r int, barrier func()) {
				lo, hi := r*h, (r+1)*h
				mine, peer := bufs(x, y, r)
				for c := lo; c < hi; c += 64 << 10 {
					e := min(c+64<<10, hi)
					k(mine[c:e], mine[c:e], peer[c:e])
					copy(peer[c:e], mine[c:e])
				}
				barrier()
			})
		})
	}
}

// bufs is rank r's buffer and its peer's, of the two ranks' x and y.
func bufs(x, y []byte, r int) (mine, peer []byte) {
	if r == 0 {
		return x, y
	}
	return y, x
}

// twoRanks times b.N rounds of step run by two goroutines at once (rank 0
// on the benchmark's goroutine, rank 1 on a locked thread), each round
// one op of s bytes; barrier is a spinning barrier between the phases of
// a round, as the ranks' ready counters are.
func twoRanks(b *testing.B, s int, step func(r int, barrier func())) {
	var arrived atomic.Int64
	barrier := func(gen *int64) func() {
		return func() {
			*gen += 2
			arrived.Add(1)
			for i := 1; arrived.Load() < *gen; i++ {
				if i%256 == 0 {
					runtime.Gosched()
				}
			}
		}
	}
	iters := make(chan int)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		gen := int64(0)
		bar := barrier(&gen)
		for n := range iters {
			for range n {
				step(1, bar)
			}
			done <- struct{}{}
		}
	}()
	b.SetBytes(int64(s))
	gen := int64(0)
	bar := barrier(&gen)
	b.ResetTimer()
	iters <- b.N
	for range b.N {
		step(0, bar)
	}
	<-done
	b.StopTimer()
	close(iters)
}
