package devmodel_test

import (
	"fmt"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

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
				_, y := c.batch(0)
				place := func(sharded bool) *devmodel.Model {
					m, err := c.model()
					if err != nil {
						t.Fatal(err)
					}
					cfg := devmodel.Config{Device: dev, Batch: len(y) / m.LabelsPerSample(), Optim: optim.Config{Name: "adam", LR: 1e-2}}
					if sharded {
						cfg.Shard = devmodel.Range{Lo: 0, Hi: len(m.Flat.Value)}
						cfg.ShardGrads, cfg.ShardParams, cfg.UnitFloats = true, params, 1
					}
					d, err := devmodel.Place(m, cfg)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { d.Close() })
					return d
				}
				whole, sh := place(false), place(true)
				var units [][2]int
				sh.ReduceGrads = func(lo, hi int, g uintptr, _ *cuda.Event) (func() error, error) {
					units = append(units, [2]int{lo, hi})
					return nil, nil
				}
				for i := 0; i < 3; i++ {
					x, y := c.batch(i)
					units = units[:0]
					var loss [2]float32
					for k, d := range []*devmodel.Model{whole, sh} {
						l, err := d.Step(x, y)
						if err != nil {
							t.Fatal(err)
						}
						loss[k] = l
					}
					if loss[0] != loss[1] {
						t.Fatalf("step %d: loss %v sharded, %v whole", i, loss[1], loss[0])
					}
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
