package commtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// Config selects what Suite covers.
type Config struct {
	// Sizes are the world sizes to test (default 1, 2, 3, 4, 5, 8).
	Sizes []int
	// Large is the large, uneven element count (default 1<<20+3; tests in
	// -short mode use 1<<16+3).
	Large int
	// Timeout bounds each sub-test (default 60 s).
	Timeout time.Duration
	// NoStallReport: the backend cannot tell which rank a timed-out
	// collective waited for (NCCL), so Timeout checks only the error's type.
	NoStallReport bool
	// Avg is how the backend computes Avg on float types (default
	// AvgDivide; NCCL pre-multiplies).
	Avg AvgRule
}

func (c *Config) fill() {
	if len(c.Sizes) == 0 {
		c.Sizes = []int{1, 2, 3, 4, 5, 8}
	}
	if c.Large == 0 {
		c.Large = 1<<20 + 3
		if testing.Short() {
			c.Large = 1<<16 + 3
		}
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
}

// Counts are the element counts the suite uses besides the large one.
var Counts = []int{0, 1, 7, 1023}

// Suite runs the conformance suite against world.
func Suite(t *testing.T, world World, cfg Config) {
	cfg.fill()
	for _, n := range cfg.Sizes {
		n := n
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms := world(t, n)
			run := func(t *testing.T, fn func(ctx context.Context, c comm.Comm) error) {
				t.Helper()
				if err := RunRanks(context.Background(), comms, cfg.Timeout, fn); err != nil {
					t.Fatal(err)
				}
			}
			counts := append(append([]int(nil), Counts...), cfg.Large)
			t.Run("AllReduce", func(t *testing.T) { run(t, allReduceAll(counts, cfg.Avg)) })
			t.Run("Broadcast", func(t *testing.T) { run(t, broadcastAll(counts)) })
			t.Run("Reduce", func(t *testing.T) { run(t, reduceAll(counts, cfg.Avg)) })
			t.Run("AllGather", func(t *testing.T) { run(t, allGatherAll(counts)) })
			t.Run("Gather", func(t *testing.T) { run(t, gatherAll(counts)) })
			t.Run("Scatter", func(t *testing.T) { run(t, scatterAll(counts)) })
			t.Run("ReduceScatter", func(t *testing.T) { run(t, reduceScatterAll(counts, cfg.Avg)) })
			t.Run("AllToAll", func(t *testing.T) { run(t, allToAllAll(counts)) })
			t.Run("SendRecv", func(t *testing.T) { run(t, sendRecvAll(counts)) })
			t.Run("Barrier", func(t *testing.T) { run(t, barrierAll) })
			t.Run("AsyncOrder", func(t *testing.T) { run(t, asyncOrder) })
			t.Run("Split", func(t *testing.T) { run(t, splitAll) })
			t.Run("SubGroupIndependent", func(t *testing.T) { run(t, subGroupIndependent) })
			t.Run("Objects", func(t *testing.T) { run(t, objects) })
			t.Run("BadArguments", func(t *testing.T) { run(t, badArguments) })
		})
	}
	t.Run("Mismatch", func(t *testing.T) { mismatch(t, world, cfg) })
	t.Run("Mismatch/p2p", func(t *testing.T) { mismatchP2P(t, world) })
	t.Run("Timeout", func(t *testing.T) { timeout(t, world, cfg) })
	t.Run("CloseWhilePending", func(t *testing.T) { closePending(t, world) })
}

func wait(ctx context.Context) func(comm.Work, error) error { return comm.Run(ctx) }

// opsFor lists the reductions valid on dt.
func opsFor(dt comm.DType) []comm.ReduceOp {
	var out []comm.ReduceOp
	for _, op := range comm.ReduceOps() {
		if comm.CheckReduce(dt, op) == nil {
			out = append(out, op)
		}
	}
	return out
}

// cases yields (dtype, op, count) for a reduction test: every dtype and op
// at the small counts, and at the large count every dtype with sum plus
// every op on int32 and float32.
func reduceCases(counts []int) (out []struct {
	dt    comm.DType
	op    comm.ReduceOp
	count int
}) {
	large := counts[len(counts)-1]
	for _, dt := range comm.DTypes() {
		for _, op := range opsFor(dt) {
			for _, n := range counts {
				if n == large && op != comm.Sum && dt != comm.Int32 && dt != comm.Float32 {
					continue
				}
				out = append(out, struct {
					dt    comm.DType
					op    comm.ReduceOp
					count int
				}{dt, op, n})
			}
		}
	}
	return out
}

func fillInput(dt comm.DType, op comm.ReduceOp, r int, b comm.Buffer) {
	Fill(dt, b.Host(), func(i int) float64 { return Input(dt, op, r, i) })
}

func allReduceAll(counts []int, rule AvgRule) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for _, tc := range reduceCases(counts) {
			b := NewBuf(tc.dt, tc.count)
			fillInput(tc.dt, tc.op, r, b)
			if err := wait(ctx)(c.AllReduce(ctx, b, tc.op)); err != nil {
				return err
			}
			if err := CheckReduced(tc.dt, tc.op, n, rule, b.Host(), tc.count, ExpectedFuncRule(tc.dt, tc.op, n, rule)); err != nil {
				return fmt.Errorf("all_reduce %v %v count %d: %w", tc.dt, tc.op, tc.count, err)
			}
		}
		return nil
	}
}

func broadcastAll(counts []int) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for _, dt := range comm.DTypes() {
			for _, count := range counts {
				for root := 0; root < n; root++ {
					if count == counts[len(counts)-1] && root > 1 && dt != comm.Float32 {
						continue
					}
					b := NewBuf(dt, count)
					Fill(dt, b.Host(), func(i int) float64 { return Pattern(r, i) })
					if err := wait(ctx)(c.Broadcast(ctx, b, root)); err != nil {
						return err
					}
					if err := CheckElems(dt, b.Host(), count, func(i int) float64 { return Pattern(root, i) }); err != nil {
						return fmt.Errorf("broadcast %v count %d root %d: %w", dt, count, root, err)
					}
				}
			}
		}
		return nil
	}
}

func reduceAll(counts []int, rule AvgRule) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for k, tc := range reduceCases(counts) {
			root := k % n
			b := NewBuf(tc.dt, tc.count)
			fillInput(tc.dt, tc.op, r, b)
			if err := wait(ctx)(c.Reduce(ctx, b, tc.op, root)); err != nil {
				return err
			}
			want := ExpectedFuncRule(tc.dt, tc.op, n, rule)
			check := func(b []byte, count int, want func(int) float64) error {
				return CheckReduced(tc.dt, tc.op, n, rule, b, count, want)
			}
			if r != root {
				want = func(i int) float64 { return Input(tc.dt, tc.op, r, i) }
				check = func(b []byte, count int, want func(int) float64) error { return CheckElems(tc.dt, b, count, want) }
			}
			if err := check(b.Host(), tc.count, want); err != nil {
				return fmt.Errorf("reduce %v %v count %d root %d (this rank root: %v): %w", tc.dt, tc.op, tc.count, root, r == root, err)
			}
		}
		return nil
	}
}

// blockCases: every dtype at small counts, float32 and uint8 at the large
// count divided by the group size (per-rank blocks stay uneven).
func blockCases(counts []int, n int) (out []struct {
	dt    comm.DType
	count int
}) {
	large := counts[len(counts)-1]
	for _, dt := range comm.DTypes() {
		for _, k := range counts {
			if k == large {
				if dt != comm.Float32 && dt != comm.Uint8 {
					continue
				}
				k = large / n
			}
			out = append(out, struct {
				dt    comm.DType
				count int
			}{dt, k})
		}
	}
	return out
}

func allGatherAll(counts []int) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for _, tc := range blockCases(counts, n) {
			for _, inPlace := range []bool{false, true} {
				k := tc.count
				dst := NewBuf(tc.dt, n*k)
				src := NewBuf(tc.dt, k)
				if inPlace {
					src = dst.Slice(r*k, (r+1)*k)
				}
				Fill(tc.dt, src.Host(), func(i int) float64 { return Pattern(r, i) })
				if err := wait(ctx)(c.AllGather(ctx, dst, src)); err != nil {
					return err
				}
				if err := CheckElems(tc.dt, dst.Host(), n*k, func(i int) float64 { return Pattern(i/max(k, 1), i%max(k, 1)) }); err != nil {
					return fmt.Errorf("all_gather %v count %d in-place %v: %w", tc.dt, k, inPlace, err)
				}
			}
		}
		return nil
	}
}

func gatherAll(counts []int) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for j, tc := range blockCases(counts, n) {
			for _, inPlace := range []bool{false, true} {
				root := j % n
				k := tc.count
				var dst comm.Buffer
				src := NewBuf(tc.dt, k)
				if r == root {
					dst = NewBuf(tc.dt, n*k)
					if inPlace {
						src = dst.Slice(r*k, (r+1)*k)
					}
				}
				Fill(tc.dt, src.Host(), func(i int) float64 { return Pattern(r, i) })
				if err := wait(ctx)(c.Gather(ctx, dst, src, root)); err != nil {
					return err
				}
				if r == root {
					if err := CheckElems(tc.dt, dst.Host(), n*k, func(i int) float64 { return Pattern(i/max(k, 1), i%max(k, 1)) }); err != nil {
						return fmt.Errorf("gather %v count %d root %d in-place %v: %w", tc.dt, k, root, inPlace, err)
					}
				}
			}
		}
		return nil
	}
}

func scatterAll(counts []int) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for j, tc := range blockCases(counts, n) {
			for _, inPlace := range []bool{false, true} {
				root := (j + 1) % n
				k := tc.count
				var src comm.Buffer
				dst := NewBuf(tc.dt, k)
				if r == root {
					src = NewBuf(tc.dt, n*k)
					Fill(tc.dt, src.Host(), func(i int) float64 { return Pattern(100+i/k, i%k) })
					if inPlace {
						dst = src.Slice(r*k, (r+1)*k)
					}
				}
				if err := wait(ctx)(c.Scatter(ctx, dst, src, root)); err != nil {
					return err
				}
				if err := CheckElems(tc.dt, dst.Host(), k, func(i int) float64 { return Pattern(100+r, i) }); err != nil {
					return fmt.Errorf("scatter %v count %d root %d in-place %v: %w", tc.dt, k, root, inPlace, err)
				}
			}
		}
		return nil
	}
}

func reduceScatterAll(counts []int, rule AvgRule) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for _, tc := range reduceCases(counts) {
			k := tc.count
			if k == counts[len(counts)-1] {
				k /= n
			}
			for _, inPlace := range []bool{false, true} {
				src := NewBuf(tc.dt, n*k)
				fillInput(tc.dt, tc.op, r, src)
				dst := NewBuf(tc.dt, k)
				if inPlace {
					dst = src.Slice(r*k, (r+1)*k)
				}
				if err := wait(ctx)(c.ReduceScatter(ctx, dst, src, tc.op)); err != nil {
					return err
				}
				exp := ExpectedFuncRule(tc.dt, tc.op, n, rule)
				if err := CheckReduced(tc.dt, tc.op, n, rule, dst.Host(), k, func(i int) float64 { return exp(r*k + i) }); err != nil {
					return fmt.Errorf("reduce_scatter %v %v count %d in-place %v: %w", tc.dt, tc.op, k, inPlace, err)
				}
				if !inPlace { // src must be untouched
					if err := CheckElems(tc.dt, src.Host(), n*k, func(i int) float64 { return Input(tc.dt, tc.op, r, i) }); err != nil {
						return fmt.Errorf("reduce_scatter modified src: %w", err)
					}
				}
			}
		}
		return nil
	}
}

func allToAllAll(counts []int) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		for _, tc := range blockCases(counts, n) {
			k := tc.count
			src, dst := NewBuf(tc.dt, n*k), NewBuf(tc.dt, n*k)
			// block j of rank r's src: Pattern(r*n+j, i)
			Fill(tc.dt, src.Host(), func(i int) float64 { return Pattern(r*n+i/k, i%k) })
			if err := wait(ctx)(c.AllToAll(ctx, dst, src)); err != nil {
				return err
			}
			// block q of dst comes from rank q's block r
			if err := CheckElems(tc.dt, dst.Host(), n*k, func(i int) float64 { return Pattern((i/k)*n+r, i%k) }); err != nil {
				return fmt.Errorf("all_to_all %v count %d: %w", tc.dt, k, err)
			}
		}
		return nil
	}
}

func sendRecvAll(counts []int) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		next, prev := (r+1)%n, (r-1+n)%n
		for _, dt := range []comm.DType{comm.Float32, comm.Int64, comm.BFloat16} {
			for _, k := range counts {
				// Two tags, received in the opposite order they were sent:
				// streams with different tags are independent.
				s1, s2 := NewBuf(dt, k), NewBuf(dt, k)
				d1, d2 := NewBuf(dt, k), NewBuf(dt, k)
				Fill(dt, s1.Host(), func(i int) float64 { return Pattern(r, i) })
				Fill(dt, s2.Host(), func(i int) float64 { return Pattern(r+50, i) })
				w1, err := c.Send(ctx, s1, next, 1)
				if err != nil {
					return err
				}
				w2, err := c.Send(ctx, s2, next, 2)
				if err != nil {
					return err
				}
				if err := wait(ctx)(c.Recv(ctx, d2, prev, 2)); err != nil {
					return err
				}
				if err := wait(ctx)(c.Recv(ctx, d1, prev, 1)); err != nil {
					return err
				}
				if err := comm.WaitAll(ctx, w1, w2); err != nil {
					return err
				}
				if err := CheckElems(dt, d1.Host(), k, func(i int) float64 { return Pattern(prev, i) }); err != nil {
					return fmt.Errorf("recv tag 1 %v count %d: %w", dt, k, err)
				}
				if err := CheckElems(dt, d2.Host(), k, func(i int) float64 { return Pattern(prev+50, i) }); err != nil {
					return fmt.Errorf("recv tag 2 %v count %d: %w", dt, k, err)
				}
			}
		}
		// Several messages on one tag arrive in order.
		const m = 5
		var ws []comm.Work
		for j := 0; j < m; j++ {
			w, err := c.Send(ctx, comm.FromSlice([]int32{int32(r*100 + j)}), next, 7)
			if err != nil {
				return err
			}
			ws = append(ws, w)
		}
		for j := 0; j < m; j++ {
			got := []int32{-1}
			if err := wait(ctx)(c.Recv(ctx, comm.FromSlice(got), prev, 7)); err != nil {
				return err
			}
			if got[0] != int32(prev*100+j) {
				return fmt.Errorf("message %d on one tag: got %d, want %d", j, got[0], prev*100+j)
			}
		}
		return comm.WaitAll(ctx, ws...)
	}
}

func barrierAll(ctx context.Context, c comm.Comm) error {
	for i := 0; i < 3; i++ {
		if err := wait(ctx)(c.Barrier(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// asyncOrder issues many collectives before waiting for any; they must all
// complete with the right results, in order.
func asyncOrder(ctx context.Context, c comm.Comm) error {
	n, r := c.Size(), c.Rank()
	const k = 16
	bufs := make([][]float32, k)
	works := make([]comm.Work, k)
	for j := range bufs {
		bufs[j] = make([]float32, 100+j*5000)
		for i := range bufs[j] {
			bufs[j][i] = float32(r + j)
		}
		w, err := c.AllReduce(ctx, comm.FromSlice(bufs[j]), comm.Sum)
		if err != nil {
			return err
		}
		works[j] = w
	}
	for j := k - 1; j >= 0; j-- { // wait in reverse: completion order is still issue order
		if err := works[j].Wait(ctx); err != nil {
			return err
		}
		for q := 0; q < j; q++ {
			select {
			case <-works[q].Done():
			default:
				return fmt.Errorf("collective %d is done but earlier collective %d is not", j, q)
			}
		}
	}
	for j := range bufs {
		want := float32(n*(n-1)/2 + n*j)
		for i, v := range bufs[j] {
			if v != want {
				return fmt.Errorf("async all_reduce %d element %d: got %v, want %v", j, i, v, want)
			}
		}
	}
	return nil
}

func splitAll(ctx context.Context, c comm.Comm) error {
	n, r := c.Size(), c.Rank()
	// Even and odd ranks, ranked in reverse order of world rank.
	sub, err := c.Split(ctx, r%2, -r)
	if err != nil {
		return err
	}
	defer sub.Close()
	var members []int
	for q := n - 1; q >= 0; q-- {
		if q%2 == r%2 {
			members = append(members, q)
		}
	}
	if sub.Size() != len(members) || members[sub.Rank()] != r {
		return fmt.Errorf("split: got rank %d of %d, want rank %d of %v", sub.Rank(), sub.Size(), indexOf(members, r), members)
	}
	x := []int64{int64(r)}
	if err := wait(ctx)(sub.AllReduce(ctx, comm.FromSlice(x), comm.Sum)); err != nil {
		return err
	}
	var want int64
	for _, q := range members {
		want += int64(q)
	}
	if x[0] != want {
		return fmt.Errorf("all_reduce in split group: got %d, want %d", x[0], want)
	}
	// Broadcast from the sub-group's rank 0 and a p2p exchange inside it.
	y := []int64{int64(r)}
	if err := wait(ctx)(sub.Broadcast(ctx, comm.FromSlice(y), 0)); err != nil {
		return err
	}
	if y[0] != int64(members[0]) {
		return fmt.Errorf("broadcast in split group: got %d, want %d", y[0], members[0])
	}
	// NewGroup of the first half; others get nil.
	half := make([]int, 0, (n+1)/2)
	for q := 0; q < (n+1)/2; q++ {
		half = append(half, q)
	}
	g, err := comm.NewGroup(ctx, c, half)
	if err != nil {
		return err
	}
	if (r < (n+1)/2) != (g != nil) {
		return fmt.Errorf("NewGroup(%v): rank %d got group %v", half, r, g != nil)
	}
	if g != nil {
		defer g.Close()
		if g.Rank() != r || g.Size() != len(half) {
			return fmt.Errorf("NewGroup: rank %d of %d", g.Rank(), g.Size())
		}
		if err := wait(ctx)(g.Barrier(ctx)); err != nil {
			return err
		}
	}
	// ColorNone opts out.
	none, err := c.Split(ctx, map[bool]int{true: comm.ColorNone, false: 3}[r == 0], 0)
	if err != nil {
		return err
	}
	if (r == 0) != (none == nil) {
		return fmt.Errorf("split with ColorNone: rank %d got %v", r, none)
	}
	if none != nil {
		defer none.Close()
		if none.Size() != n-1 {
			return fmt.Errorf("split without rank 0: size %d, want %d", none.Size(), n-1)
		}
	}
	// The parent still works.
	return wait(ctx)(c.Barrier(ctx))
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// subGroupIndependent: rank 0 of each pair issues the pair's collective
// before a world barrier, rank 1 after it. If the sub-group were ordered
// with its parent this would deadlock.
func subGroupIndependent(ctx context.Context, c comm.Comm) error {
	n, r := c.Size(), c.Rank()
	if n < 2 {
		return nil
	}
	color := r / 2
	if n%2 == 1 && r == n-1 {
		color = comm.ColorNone
	}
	sub, err := c.Split(ctx, color, r)
	if err != nil {
		return err
	}
	if sub == nil {
		return wait(ctx)(c.Barrier(ctx))
	}
	defer sub.Close()
	x := []float32{float32(r)}
	if sub.Rank() == 0 {
		w, err := sub.AllReduce(ctx, comm.FromSlice(x), comm.Sum)
		if err != nil {
			return err
		}
		if err := wait(ctx)(c.Barrier(ctx)); err != nil {
			return err
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
	} else {
		if err := wait(ctx)(c.Barrier(ctx)); err != nil {
			return err
		}
		if err := wait(ctx)(sub.AllReduce(ctx, comm.FromSlice(x), comm.Sum)); err != nil {
			return err
		}
	}
	if want := float32(4*color + 1); x[0] != want {
		return fmt.Errorf("pair all_reduce: got %v, want %v", x[0], want)
	}
	return nil
}

type meta struct {
	Name   string
	Shapes [][]int
	Rank   int
}

func objects(ctx context.Context, c comm.Comm) error {
	n, r := c.Size(), c.Rank()
	v := meta{}
	if r == n-1 {
		v = meta{Name: "model", Shapes: [][]int{{784, 256}, {256}}, Rank: r}
	}
	if err := comm.BroadcastObject(ctx, c, &v, n-1); err != nil {
		return err
	}
	if v.Name != "model" || len(v.Shapes) != 2 || v.Shapes[0][1] != 256 || v.Rank != n-1 {
		return fmt.Errorf("BroadcastObject: got %+v", v)
	}
	all, err := comm.AllGatherObject(ctx, c, meta{Name: strings.Repeat("x", r*100), Rank: r})
	if err != nil {
		return err
	}
	for q, m := range all {
		if m.Rank != q || len(m.Name) != q*100 {
			return fmt.Errorf("AllGatherObject[%d] = %+v", q, m)
		}
	}
	return nil
}

func badArguments(ctx context.Context, c comm.Comm) error {
	n := c.Size()
	f := comm.FromSlice(make([]float32, 4))
	expectInvalid := func(what string, w comm.Work, err error) error {
		if !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("%s: got (%v, %v), want ErrInvalidArgument at once", what, w, err)
		}
		return nil
	}
	for _, chk := range []func() error{
		func() error {
			w, err := c.AllReduce(ctx, f, comm.BXor)
			return expectInvalid("bxor on float32", w, err)
		},
		func() error {
			w, err := c.AllReduce(ctx, f, comm.ReduceOp(99))
			return expectInvalid("unknown op", w, err)
		},
		func() error { w, err := c.Broadcast(ctx, f, n); return expectInvalid("root out of range", w, err) },
		func() error { w, err := c.Reduce(ctx, f, comm.Sum, -1); return expectInvalid("negative root", w, err) },
		func() error {
			w, err := c.AllGather(ctx, comm.FromSlice(make([]float32, 4*n+1)), f)
			return expectInvalid("all_gather wrong dst size", w, err)
		},
		func() error {
			w, err := c.AllGather(ctx, comm.FromSlice(make([]int32, 4*n)), f)
			return expectInvalid("all_gather dtype mismatch", w, err)
		},
		func() error {
			d := comm.FromSlice(make([]float32, 4*n))
			w, err := c.ReduceScatter(ctx, d.Slice(0, 4), d.Slice(0, 4*n), comm.BAnd)
			return expectInvalid("reduce_scatter band on float", w, err)
		},
		func() error {
			w, err := c.Send(ctx, f, n, 0)
			return expectInvalid("send to rank out of range", w, err)
		},
		func() error { w, err := c.AllToAll(ctx, f, f); return expectInvalid("all_to_all overlapping", w, err) },
		func() error {
			w, err := c.AllReduce(ctx, comm.DeviceBuffer(0x1000, 0, comm.Float32, 4), comm.Sum)
			return expectInvalid("device buffer", w, err)
		},
		func() error {
			//lint:ignore SA1012 the nil context is the bad argument under test
			w, err := c.Barrier(nil) //nolint:staticcheck
			return expectInvalid("nil context", w, err)
		},
		func() error {
			_, err := c.Split(ctx, -5, 0)
			return expectInvalid("negative color", nil, err)
		},
	} {
		if err := chk(); err != nil {
			return err
		}
	}
	// The Comm is still usable after rejected calls.
	return wait(ctx)(c.Barrier(ctx))
}

// mismatch: rank 0 all-reduces while the others broadcast; every rank gets
// an error that wraps ErrMismatch or ErrAborted and names both operations.
func mismatch(t *testing.T, world World, cfg Config) {
	for _, n := range []int{2, 3} {
		for _, variant := range []string{"op", "count", "dtype"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, variant), func(t *testing.T) {
				comms := world(t, n)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				errs := make([]error, n)
				done := make(chan int, n)
				for _, c := range comms {
					go func(c comm.Comm) {
						defer func() { done <- c.Rank() }()
						b := comm.FromSlice(make([]float32, 64))
						switch {
						case c.Rank() != 0:
							errs[c.Rank()] = wait(ctx)(c.AllReduce(ctx, b, comm.Sum))
						case variant == "op":
							errs[0] = wait(ctx)(c.Broadcast(ctx, b, 0))
						case variant == "count":
							errs[0] = wait(ctx)(c.AllReduce(ctx, comm.FromSlice(make([]float32, 65)), comm.Sum))
						case variant == "dtype":
							errs[0] = wait(ctx)(c.AllReduce(ctx, comm.FromSlice(make([]int32, 64)), comm.Sum))
						}
					}(c)
				}
				for range comms {
					select {
					case <-done:
					case <-ctx.Done():
						t.Fatal("mismatched collective hung")
					}
				}
				named := false
				for r, err := range errs {
					if err == nil {
						// a rank that only sent (broadcast root) may finish
						continue
					}
					if !errors.Is(err, comm.ErrMismatch) && !errors.Is(err, comm.ErrAborted) {
						t.Errorf("rank %d: %v, want a mismatch", r, err)
					}
					if errors.Is(err, comm.ErrMismatch) {
						msg := err.Error()
						ok := strings.Contains(msg, "all_reduce")
						switch variant {
						case "op":
							ok = ok && strings.Contains(msg, "broadcast")
						case "count":
							ok = ok && strings.Contains(msg, "x 64") && strings.Contains(msg, "x 65")
						case "dtype":
							ok = ok && strings.Contains(msg, "float32") && strings.Contains(msg, "int32")
						}
						if !ok {
							t.Errorf("rank %d: mismatch error does not name both sides: %v", r, err)
						}
						named = true
					}
				}
				if !named {
					t.Errorf("no rank reported the mismatch: %v", errs)
				}
				// The Comm stays failed: a later op fails (at issue, or, on a
				// rank that learns of the failure from a peer's abort, at
				// Wait) instead of hanging or succeeding.
				for _, c := range comms {
					if err := wait(ctx)(c.Barrier(ctx)); err == nil {
						t.Errorf("rank %d: a failed Comm ran a new op", c.Rank())
					} else if ctx.Err() != nil {
						t.Errorf("rank %d: op on a failed Comm hung until the test deadline", c.Rank())
					}
				}
			})
		}
	}
}

// mismatchP2P: rank 0 sends float32 x 10 with tag 3 while rank 1 receives
// int32 x 10 (or float32 x 11) with that tag. The receiver's error wraps
// ErrMismatch and names the sender's send and its own recv, with dtype
// names.
func mismatchP2P(t *testing.T, world World) {
	for _, variant := range []string{"dtype", "count"} {
		t.Run(variant, func(t *testing.T) {
			comms := world(t, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sent := make(chan error, 1)
			go func() { sent <- wait(ctx)(comms[0].Send(ctx, comm.FromSlice(make([]float32, 10)), 1, 3)) }()
			var dst comm.Buffer
			want := "recv(tag 3, int32 x 10)"
			if variant == "dtype" {
				dst = comm.FromSlice(make([]int32, 10))
			} else {
				dst = comm.FromSlice(make([]float32, 11))
				want = "recv(tag 3, float32 x 11)"
			}
			err := wait(ctx)(comms[1].Recv(ctx, dst, 0, 3))
			if !errors.Is(err, comm.ErrMismatch) {
				t.Fatalf("rank 1: %v, want a mismatch", err)
			}
			msg := err.Error()
			for _, s := range []string{"rank 0 called send(tag 3, float32 x 10)", "rank 1 (this rank) called " + want} {
				if !strings.Contains(msg, s) {
					t.Errorf("rank 1: mismatch error %q does not say %q", msg, s)
				}
			}
			if strings.Contains(msg, "#3") {
				t.Errorf("rank 1: mismatch error %q shows the tag as a sequence number", msg)
			}
			select {
			case err := <-sent:
				// The send may complete (its bytes were taken) or fail with
				// the receiver's abort; if it names the mismatch, it too
				// names the sides the right way round.
				if errors.Is(err, comm.ErrMismatch) && !strings.Contains(err.Error(), "rank 0 (this rank) called send(") {
					t.Errorf("rank 0: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("mismatched send hung")
			}
		})
	}
}

// timeout: rank 1 never joins; rank 0's op fails when its ctx ends, and
// the error says which rank never arrived at which collective (what a
// stall inspector would report).
func timeout(t *testing.T, world World, cfg Config) {
	comms := world(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := wait(context.Background())(comms[0].AllReduce(ctx, comm.FromSlice(make([]float32, 8)), comm.Sum))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
	if !cfg.NoStallReport {
		if msg := err.Error(); !strings.Contains(msg, "rank 1, which never arrived at all_reduce #1") {
			t.Errorf("timeout error %q does not say that rank 1 never arrived at all_reduce #1", msg)
		}
	}
	if _, err := comms[0].Barrier(context.Background()); err == nil {
		t.Fatal("Comm not poisoned after a timeout")
	}
}

// closePending: Close fails a pending op promptly.
func closePending(t *testing.T, world World) {
	comms := world(t, 2)
	w, err := comms[0].AllReduce(context.Background(), comm.FromSlice(make([]float32, 8)), comm.Sum)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- comms[0].Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Wait(ctx); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("pending op after Close: %v, want ErrClosed", err)
	}
	if _, err := comms[0].Barrier(ctx); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("op after Close: %v, want ErrClosed", err)
	}
}

// RootedAndReduceChecks returns a rank function that runs and checks
// all-reduce, broadcast and reduce at the given counts (every dtype and op),
// for tests that force each algorithm in turn.
func RootedAndReduceChecks(counts []int) func(ctx context.Context, c comm.Comm) error {
	ar, bc, rd := allReduceAll(counts, AvgDivide), broadcastAll(counts), reduceAll(counts, AvgDivide)
	return func(ctx context.Context, c comm.Comm) error {
		for _, f := range []func(context.Context, comm.Comm) error{ar, bc, rd} {
			if err := f(ctx, c); err != nil {
				return err
			}
		}
		return nil
	}
}
