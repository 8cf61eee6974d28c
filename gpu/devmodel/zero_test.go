package devmodel_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// shardAll is cfg with ZeRO's units on one rank: the whole model the
// rank's shard, gradients sharded (ZeRO-2; parameters too where params:
// ZeRO-3), units of 1 float (an op each).
func shardAll(cfg devmodel.Config, m *nn.Model, params bool) devmodel.Config {
	cfg.Shard = devmodel.Range{Lo: 0, Hi: len(m.Flat.Value)}
	cfg.ShardGrads, cfg.ShardParams, cfg.UnitFloats = true, params, 1
	return cfg
}

// placeUnits places c's model for Adam at c's batch size, closed when t
// ends: whole, or sharded (ShardGrads, and ShardParams with params) in
// units of an op each (UnitFloats 1) with one rank's shard, the whole
// buffer.
func placeUnits(t *testing.T, c zooCase, sharded, params bool) *devmodel.Model {
	t.Helper()
	_, y := c.batch(0)
	m, err := c.model()
	if err != nil {
		t.Fatal(err)
	}
	cfg := devmodel.Config{Device: dev, Batch: len(y) / m.LabelsPerSample(), Optim: optim.Config{Name: "adam", LR: 1e-2}}
	if sharded {
		cfg = shardAll(cfg, m, params)
	}
	d, err := devmodel.Place(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// sameLoss steps whole and sh on c's batch i and fails t unless their
// losses are equal; how says how sh differs from whole.
func sameLoss(t *testing.T, i int, c zooCase, whole, sh *devmodel.Model, how string) {
	t.Helper()
	x, y := c.batch(i)
	var loss [2]float32
	for k, d := range []*devmodel.Model{whole, sh} {
		l, err := d.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		loss[k] = l
	}
	if loss[0] != loss[1] {
		t.Fatalf("step %d: loss %v %s, %v whole", i, loss[1], how, loss[0])
	}
}

// TestShardedUnitsMatchWhole: a model placed with ShardGrads, or with
// ShardParams, a unit per op (UnitFloats 1: every layer's gradients in
// a cached block of their own, every layer's parameters gathered into
// one before its forward and its backward) and one rank's shard (the
// whole buffer, no hooks), trains and evaluates bit for bit as the model
// placed whole: mlp, cnn-bn and a gpt of 2 blocks (every layer of the
// zoo, the fused embeddings too), 3 steps of Adam. ReduceGrads sees the
// units in backward's order, covering [0, N) edge to edge.
func TestShardedUnitsMatchWhole(t *testing.T) {
	for _, c := range everyLayer() {
		for _, params := range []bool{false, true} {
			name := c.name + "/grads"
			if params {
				name = c.name + "/params"
			}
			t.Run(name, func(t *testing.T) {
				whole, sh := placeUnits(t, c, false, false), placeUnits(t, c, true, params)
				var units [][2]int
				sh.ReduceGrads = func(lo, hi int, g uintptr, _ *cuda.Event) (func() error, error) {
					units = append(units, [2]int{lo, hi})
					return nil, nil
				}
				for i := 0; i < 3; i++ {
					units = units[:0]
					sameLoss(t, i, c, whole, sh, "sharded")
					if len(units) < 2 || units[0][1] != sh.N || units[len(units)-1][0] != 0 {
						t.Fatalf("units %v: want several, from N=%d down to 0", units, sh.N)
					}
					for k := 1; k < len(units); k++ {
						if units[k][1] != units[k-1][0] {
							t.Fatalf("units %v: not edge to edge", units)
						}
					}
				}
				for _, d := range []*devmodel.Model{whole, sh} {
					if err := d.CopyToHost(); err != nil {
						t.Fatal(err)
					}
				}
				for i, v := range whole.Host.Flat.Value {
					if sh.Host.Flat.Value[i] != v {
						t.Fatalf("parameter %d: %v sharded, %v whole", i, sh.Host.Flat.Value[i], v)
					}
				}
				ex, ey := c.batch(7)
				wl, wc, err := whole.Eval(ex, ey)
				if err != nil {
					t.Fatal(err)
				}
				sl, sc, err := sh.Eval(ex, ey)
				if err != nil {
					t.Fatal(err)
				}
				if wl != sl || wc != sc {
					t.Fatalf("eval: %v, %d sharded; %v, %d whole", sl, sc, wl, wc)
				}
				t.Logf("%s: %d units; peak %d bytes sharded (one rank), %d whole", name, len(units), sh.PeakBytes(), whole.PeakBytes())
			})
		}
	}
}

// A model placed with ShardParams keeps only its shard of the
// parameters between steps; Unshard gathers them whole (here one rank:
// the shard is the whole model, fill has nothing to add) and Reshard
// frees the whole buffer again.
func ExampleModel_Unshard() {
	if cudafake.Mode() == "none" {
		fmt.Println("units: 3; whole during Unshard: true") // no CUDA here: what it prints with one
		return
	}
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	n := len(m.Flat.Value)
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 8, Optim: optim.Config{Name: "sgd", LR: 0.1},
		Shard: devmodel.Range{Lo: 0, Hi: n}, ShardGrads: true, ShardParams: true, UnitFloats: 1})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	x, y := devtest.Images(0, 8, 784)
	if _, err := d.Step(x, y); err != nil {
		panic(err)
	}
	var full uintptr
	if err := d.Unshard(func(p uintptr) error { full = p; return nil }); err != nil {
		panic(err)
	}
	whole := full != 0 && d.Params == full
	if err := d.Reshard(); err != nil {
		panic(err)
	}
	fmt.Printf("units: %d; whole during Unshard: %v\n", len(d.Units()), whole)
	// Output: units: 3; whole during Unshard: true
}

// With Config.ShardGrads backward hands each unit's gradients to
// ReduceGrads (a data-parallel strategy starts reducing them to their
// owners there, and returns how to wait for it), last layer first; here
// a unit per layer of the mlp, one rank (nothing to reduce).
func ExampleModel_ReduceGrads() {
	if cudafake.Mode() == "none" {
		fmt.Println("units: [235146 233856 233856 200960 200960 0]") // no CUDA here: what it prints with one
		return
	}
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 8, Optim: optim.Config{Name: "sgd", LR: 0.1},
		Shard: devmodel.Range{Lo: 0, Hi: len(m.Flat.Value)}, ShardGrads: true, UnitFloats: 1})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	var edges []int
	d.ReduceGrads = func(lo, hi int, g uintptr, _ *cuda.Event) (func() error, error) {
		edges = append(edges, hi, lo)
		return nil, nil
	}
	x, y := devtest.Images(0, 8, 784)
	if _, err := d.ForwardBackward(x, y); err != nil {
		panic(err)
	}
	fmt.Println("units:", edges)
	// Output: units: [235146 233856 233856 200960 200960 0]
}

// TestGatherWaitsForReaders: ZeRO-3's unit blocks are reused (a unit's
// parameter block goes back to the spares once its ops are queued) and
// filled by gathers on another stream, ordered by events alone: the
// gather waits for the event GatherParams gets (after), recorded on the
// model's stream once the block's last readers were queued, and the
// model's stream waits for an event recorded after the gather. Here
// GatherParams copies each unit's parameters from the shard (one rank:
// the whole model) on a stream of the test's, waiting for after and
// recording its own event; with the model's kernels slowed
// (cudafake.KernelDelay: a gather that did not wait for after would
// overwrite a block its last unit still reads) or the gathers' stream
// slowed (cudafake.StreamDelay: a unit that did not wait for its gather
// would read a block not yet filled), mlp and a 2-block gpt train 3
// steps of Adam bit for bit as the model placed whole.
func TestGatherWaitsForReaders(t *testing.T) {
	cudafake.RequireFake(t)
	for _, c := range everyLayer() {
		if c.name == "cnn-bn" {
			continue // the slowest: mlp and gpt have every kind of unit
		}
		for _, slow := range []string{"kernels", "gathers"} {
			t.Run(c.name+"/"+slow, func(t *testing.T) {
				whole, sh := placeUnits(t, c, false, false), placeUnits(t, c, true, true)
				gs, err := cuda.NewStream(dev, true)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { gs.Synchronize(); gs.Destroy() })
				var evs []*cuda.Event
				t.Cleanup(func() {
					for _, e := range evs {
						e.Destroy()
					}
				})
				gathers := 0
				sh.GatherParams = func(lo, hi int, dst uintptr, after *cuda.Event) (func() error, error) {
					gathers++
					if err := gs.WaitEvent(after); err != nil {
						return nil, err
					}
					if err := gs.CopyAsync(dst, sh.ParamShard()+uintptr(4*lo), 4*(hi-lo), cuda.DeviceToDevice); err != nil {
						return nil, err
					}
					done, err := cuda.NewEvent(dev)
					if err != nil {
						return nil, err
					}
					evs = append(evs, done)
					if err := done.Record(gs); err != nil {
						return nil, err
					}
					return func() error { return sh.Stream().WaitEvent(done) }, nil
				}
				if slow == "kernels" {
					cudafake.KernelDelay(t, time.Millisecond)
				} else {
					cudafake.StreamDelay(t, gs, 3*time.Millisecond)
				}
				for i := 0; i < 3; i++ {
					sameLoss(t, i, c, whole, sh, "with the gathers on another stream")
				}
				for _, d := range []*devmodel.Model{whole, sh} {
					if err := d.CopyToHost(); err != nil {
						t.Fatal(err)
					}
				}
				for i, v := range whole.Host.Flat.Value {
					if sh.Host.Flat.Value[i] != v {
						t.Fatalf("parameter %d: %v with the gathers on another stream, %v whole", i, sh.Host.Flat.Value[i], v)
					}
				}
				if gathers < 2*len(sh.Units()) {
					t.Fatalf("%d gathers for %d units", gathers, len(sh.Units()))
				}
				t.Logf("%s slowed: %d gathers in 3 steps, bit for bit", slow, gathers)
			})
		}
	}
}

// TestShardedSharedPlanSameBits: with ZeRO-2 and ZeRO-3 on the device
// (ShardGrads, ShardParams; a unit per layer, UnitFloats 1; one rank's
// shard, the whole buffer), the training plan in its region (memory.go)
// trains and evaluates bit for bit as with a pool block a buffer held
// the whole step (the fake checking each buffer's bounds) while the
// units' blocks come and go: mlp, cnn-bn and a gpt of 2 blocks, 3 steps
// of Adam, an evaluation: every loss, parameter and the evaluation. The
// peak is lower by exactly the rounding and sharing formula: the pool's
// blocks of the plan's buffers (each a power of two: BlockBytes) less
// the region.
func TestShardedSharedPlanSameBits(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, c := range everyLayer() {
		for _, params := range []bool{false, true} {
			name := c.name + "/zero2"
			if params {
				name = c.name + "/zero3"
			}
			t.Run(name, func(t *testing.T) {
				type result struct {
					losses, params []float32
					eval           float32
					peak, plan     int64
					blocks         int64 // the region's buffers' pool blocks
				}
				run := func(share bool) (r result) {
					defer devmodel.SetPlanRegion(share)()
					d := placeUnits(t, c, true, params)
					for i := 0; i < 3; i++ {
						x, y := c.batch(i)
						l, err := d.Step(x, y)
						if err != nil {
							t.Fatal(err)
						}
						r.losses = append(r.losses, l)
					}
					r.peak, r.plan = d.PeakBytes(), devmodel.TrainPlanBytes(d)
					for _, b := range d.Memory().Buffers {
						r.blocks += devmodel.BlockBytes(b.Bytes)
					}
					ex, ey := c.batch(7)
					var err error
					if r.eval, _, err = d.Eval(ex, ey); err != nil {
						t.Fatal(err)
					}
					if err := d.CopyToHost(); err != nil {
						t.Fatal(err)
					}
					r.params = d.Host.Flat.Value
					return r
				}
				pool, region := run(false), run(true)
				if i, ok := bitsEqual(region.losses, pool.losses); !ok {
					t.Errorf("step %d: loss %v in the region, %v in pool blocks", i, region.losses[i], pool.losses[i])
				}
				if i, ok := bitsEqual(region.params, pool.params); !ok {
					t.Errorf("parameter %d: %v in the region, %v in pool blocks", i, region.params[i], pool.params[i])
				}
				if region.eval != pool.eval {
					t.Errorf("evaluation loss %v in the region, %v in pool blocks", region.eval, pool.eval)
				}
				t.Logf("peak %d bytes, %d with pool blocks: the plan's region %d, its buffers' blocks %d", region.peak, pool.peak, region.plan, pool.plan)
				if region.blocks != pool.plan {
					t.Errorf("the region's buffers in pool blocks: %d bytes; the pool path held %d", region.blocks, pool.plan)
				}
				if got, want := pool.peak-region.peak, pool.plan-region.plan; got != want || want <= 0 {
					t.Errorf("peak %d bytes in the region, %d in pool blocks: %d lower; want %d (blocks %d - region %d), above 0", region.peak, pool.peak, got, want, pool.plan, region.plan)
				}
			})
		}
	}
}

// TestUnitBlocksLaidOut: ZeRO-2's and ZeRO-3's unit blocks (a unit per
// layer, one rank's shard) are laid out in one region of their exact
// sizes by their lives (zero.go's unitMem), held from the first step and
// counted in PeakBytes (Memory names them; its Peak is PeakBytes): the
// region is at least the blocks in use at once at the busiest turn (a
// gradient block and the next unit's, and under ZeRO-3 that unit's
// parameter block and the prefetched one: each size 256-byte aligned)
// and less than all of a step's blocks (ZeRO-3: two parameter blocks
// and a gradient block a unit); an evaluation and a shorter batch (other
// plans, laid out again in the region) hold no more.
func TestUnitBlocksLaidOut(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, c := range everyLayer() {
		if c.name == "cnn-bn" {
			continue
		}
		for _, params := range []bool{false, true} {
			name := c.name + "/zero2"
			if params {
				name = c.name + "/zero3"
			}
			t.Run(name, func(t *testing.T) {
				d := placeUnits(t, c, true, params)
				step := func(i, n int) {
					x, y := c.batch(i)
					per := len(x) / len(y) * d.Host.LabelsPerSample()
					if _, err := d.Step(x[:n*per], y[:n*d.Host.LabelsPerSample()]); err != nil {
						t.Fatal(err)
					}
				}
				_, y := c.batch(0)
				full := len(y) / d.Host.LabelsPerSample()
				step(0, full)
				mem := d.Memory()
				held := mem.Fixed["ZeRO units' blocks"]
				if mem.Peak != d.PeakBytes() {
					t.Errorf("Memory's peak %d, PeakBytes %d:\n%s", mem.Peak, d.PeakBytes(), mem)
				}
				a := func(floats int) int64 { return int64((4*floats + 255) / 256 * 256) }
				us := d.Units()
				var busiest, all int64
				for k, u := range us {
					if u.Hi <= u.Lo {
						continue
					}
					per := int64(1)
					if params {
						per = 3
					}
					all += per * a(u.Hi-u.Lo)
					// this unit's gradient block, the next's (with its
					// parameters and the prefetched unit's, ZeRO-3)
					for k2 := k + 1; k2 < len(us); k2++ {
						if v := us[k2]; v.Hi > v.Lo {
							in := a(u.Hi-u.Lo) + a(v.Hi-v.Lo)
							if params {
								in += a(v.Hi - v.Lo)
								for k3 := k2 + 1; k3 < len(us); k3++ {
									if w := us[k3]; w.Hi > w.Lo {
										in += a(w.Hi - w.Lo)
										break
									}
								}
							}
							busiest = max(busiest, in)
							break
						}
					}
				}
				t.Logf("%d units: blocks' region %d bytes; in use at once at most %d, all of a step's %d", len(us), held, busiest, all)
				if held < busiest || held >= all {
					t.Errorf("the units' blocks hold %d bytes; want at least %d (in use at once) and below %d (every block of a step)", held, busiest, all)
				}
				peak := d.PeakBytes()
				x, y := c.batch(7)
				if _, _, err := d.Eval(x, y); err != nil {
					t.Fatal(err)
				}
				step(1, full-1)
				step(2, full)
				if got := d.Memory().Fixed["ZeRO units' blocks"]; got != held {
					t.Errorf("after an evaluation and a shorter batch the units' blocks hold %d bytes, %d before", got, held)
				}
				if after := d.PeakBytes(); after > peak+d.EvalBytes() {
					t.Errorf("peak %d after an evaluation and a shorter batch; %d before (evaluation arena %d)", after, peak, d.EvalBytes())
				}
			})
		}
	}
}
