package algo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
)

// TestEveryForcedAlgorithm runs every algorithm of every collective (each
// row of algo.Algorithms, forced by GDIST_ALGO's syntax) at group sizes with
// and without a power of two, every root, uneven counts, and a small chunk
// so that the pipelines have many stages; in-place forms included.
func TestEveryForcedAlgorithm(t *testing.T) {
	forces := append(tableForces(), "") // "": the cost model's choice
	sizes := []int{1, 2, 3, 4, 5, 6, 7, 8}
	counts := []int{0, 1, 7, 64, 1023, 20011}
	if testing.Short() {
		sizes = []int{1, 2, 3, 4, 5, 8}
		counts = []int{0, 1, 7, 1023}
	}
	for _, force := range forces {
		for _, n := range sizes {
			for _, tr := range []string{"inproc", "payload", "eager"} {
				if tr == "payload" && (force == "" || testing.Short() && n != 3 && n != 4) {
					continue
				}
				if tr == "eager" && testing.Short() && n != 2 && n != 3 {
					continue
				}
				testForced(t, force, tr, n, counts)
			}
		}
	}
}

// tableForces returns GDIST_ALGO values that together force every row of
// the algorithm table: the k-th forces each collective's k-th algorithm
// (its first once it has no more).
func tableForces() []string {
	rows := map[string][]string{}
	var ops []string
	most := 0
	for _, a := range algo.Algorithms() {
		if rows[a.Op] == nil {
			ops = append(ops, a.Op)
		}
		rows[a.Op] = append(rows[a.Op], a.Name)
		most = max(most, len(rows[a.Op]))
	}
	var forces []string
	for k := 0; k < most; k++ {
		var parts []string
		for _, op := range ops {
			names := rows[op]
			parts = append(parts, op+"="+names[min(k, len(names)-1)])
		}
		forces = append(forces, strings.Join(parts, ","))
	}
	return forces
}

func testForced(t *testing.T, force, tr string, n int, counts []int) {
	name := force
	if name == "" {
		name = "model"
	}
	name = strings.NewReplacer("all_reduce=", "ar=", "reduce_scatter=", "rs=", "all_gather=", "ag=", "all_to_all=", "a2a=").Replace(name)
	t.Run(fmt.Sprintf("%s/%s/n=%d", tr, name, n), func(t *testing.T) {
		var cs []comm.Comm
		switch tr {
		case "payload":
			cs = algo.NewMemWorld(n, true)
		case "eager":
			cs = algo.NewMemEagerWorld(n, comm.Options{})
		default:
			var err error
			cs, err = inproc.New(n, comm.Options{})
			if err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			for _, c := range cs {
				c.Close()
			}
		}()
		for _, c := range cs {
			tu := algo.DefaultTuning()
			tu.ChunkBytes = 1024
			if force != "" {
				f, err := algo.ParseAlgo(force)
				if err != nil {
					t.Fatal(err)
				}
				tu.Force = f
			}
			c.(*algo.Comm).SetTuning(tu)
		}
		err := commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
			if err := commtest.RootedAndReduceChecks(counts)(ctx, c); err != nil {
				return err
			}
			return blockOps(ctx, c, counts)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func reduceOps(dt comm.DType) []comm.ReduceOp {
	var out []comm.ReduceOp
	for _, op := range comm.ReduceOps() {
		if comm.CheckReduce(dt, op) == nil {
			out = append(out, op)
		}
	}
	return out
}

// blockOps checks reduce-scatter, all-gather, gather, scatter and
// all-to-all (each rank holds blocks of k elements).
func blockOps(ctx context.Context, c comm.Comm, counts []int) error {
	n, r := c.Size(), c.Rank()
	run := commtest.RunRanks
	_ = run
	do := comm.Run(ctx)
	for _, dt := range comm.DTypes() {
		for _, k := range counts {
			// reduce-scatter, out of place and in place
			for _, op := range reduceOps(dt) {
				if k > 1023 && op != comm.Sum && op != comm.Avg && dt != comm.Float32 {
					continue
				}
				exp := commtest.ExpectedFunc(dt, op, n)
				for _, inPlace := range []bool{false, true} {
					src := commtest.NewBuf(dt, n*k)
					commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Input(dt, op, r, i) })
					dst := commtest.NewBuf(dt, k)
					if inPlace {
						dst = src.Slice(r*k, (r+1)*k)
					}
					if err := do(c.ReduceScatter(ctx, dst, src, op)); err != nil {
						return err
					}
					if err := commtest.CheckElems(dt, dst.Host(), k, func(i int) float64 { return exp(r*k + i) }); err != nil {
						return fmt.Errorf("reduce_scatter %v %v k=%d in-place=%v: %w", dt, op, k, inPlace, err)
					}
					if !inPlace {
						if err := commtest.CheckElems(dt, src.Host(), n*k, func(i int) float64 { return commtest.Input(dt, op, r, i) }); err != nil {
							return fmt.Errorf("reduce_scatter %v %v k=%d changed src: %w", dt, op, k, err)
						}
					}
				}
			}
			// all-gather, out of place and in place
			for _, inPlace := range []bool{false, true} {
				dst := commtest.NewBuf(dt, n*k)
				src := commtest.NewBuf(dt, k)
				if inPlace {
					src = dst.Slice(r*k, (r+1)*k)
				}
				commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Pattern(r, i) })
				if err := do(c.AllGather(ctx, dst, src)); err != nil {
					return err
				}
				if err := commtest.CheckElems(dt, dst.Host(), n*k, func(i int) float64 { return commtest.Pattern(i/max(k, 1), i%max(k, 1)) }); err != nil {
					return fmt.Errorf("all_gather %v k=%d in-place=%v: %w", dt, k, inPlace, err)
				}
			}
			for root := 0; root < n; root++ {
				// gather
				src := commtest.NewBuf(dt, k)
				commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Pattern(r, i) })
				var dst comm.Buffer
				if r == root {
					dst = commtest.NewBuf(dt, n*k)
				}
				if err := do(c.Gather(ctx, dst, src, root)); err != nil {
					return err
				}
				if r == root {
					if err := commtest.CheckElems(dt, dst.Host(), n*k, func(i int) float64 { return commtest.Pattern(i/max(k, 1), i%max(k, 1)) }); err != nil {
						return fmt.Errorf("gather %v k=%d root %d: %w", dt, k, root, err)
					}
				}
				// scatter
				var ssrc comm.Buffer
				if r == root {
					ssrc = commtest.NewBuf(dt, n*k)
					commtest.Fill(dt, ssrc.Host(), func(i int) float64 { return commtest.Pattern(100+i/max(k, 1), i%max(k, 1)) })
				}
				sdst := commtest.NewBuf(dt, k)
				if err := do(c.Scatter(ctx, sdst, ssrc, root)); err != nil {
					return err
				}
				if err := commtest.CheckElems(dt, sdst.Host(), k, func(i int) float64 { return commtest.Pattern(100+r, i) }); err != nil {
					return fmt.Errorf("scatter %v k=%d root %d: %w", dt, k, root, err)
				}
			}
			// all-to-all
			src := commtest.NewBuf(dt, n*k)
			dst := commtest.NewBuf(dt, n*k)
			commtest.Fill(dt, src.Host(), func(i int) float64 { return commtest.Pattern(r*n+i/max(k, 1), i%max(k, 1)) })
			if err := do(c.AllToAll(ctx, dst, src)); err != nil {
				return err
			}
			if err := commtest.CheckElems(dt, dst.Host(), n*k, func(i int) float64 { return commtest.Pattern((i/max(k, 1))*n+r, i%max(k, 1)) }); err != nil {
				return fmt.Errorf("all_to_all %v k=%d: %w", dt, k, err)
			}
		}
	}
	return nil
}
