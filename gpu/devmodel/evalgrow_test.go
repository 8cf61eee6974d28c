package devmodel_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// TestEvalAfterFailedArenaGrowth: an evaluation at a batch whose
// evaluation arena must grow (the old one is freed first) and cannot
// (cudafake.MemLimit at the device's use: the old arena's bytes fit
// again, the larger ones not) fails naming the bytes and keeps its
// arena; under the same limit, whatever memory is free taken by another
// user of the device, the model then evaluates at the smaller batch (64 samples, batch 8's training plan: an arena of its own) and trains as one
// that never tried (the same bits), and, the limit lifted, evaluates
// the larger batch too, with no use of freed device memory
// (cudafake.FreedUses). The mlp placed whole and under ZeRO-3 (one
// rank's shard, a unit per layer: a batch in one pass). Before the fix
// the old arena was gone: the evaluation that backed off to the
// smaller batch needed it again and failed out of memory.
func TestEvalAfterFailedArenaGrowth(t *testing.T) {
	cudafake.RequireFake(t)
	for _, zero3 := range []bool{false, true} {
		t.Run(fmt.Sprintf("zero3=%v", zero3), func(t *testing.T) {
			place := func() *devmodel.Model {
				m, err := models.New("mlp", 1)
				if err != nil {
					t.Fatal(err)
				}
				cfg := devmodel.Config{Device: dev, Batch: 8, Optim: optim.Config{Name: "adam", LR: 1e-2}}
				if zero3 {
					cfg = shardAll(cfg, m, true)
				}
				d, err := devmodel.Place(m, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				return d
			}
			type result struct {
				evals  []float64 // loss bits, correct: small, small after a step, large
				losses []float32
			}
			x, y := devtest.Images(0, 8, 784)
			sx, sy := devtest.Images(1, 64, 784)
			lx, ly := devtest.Images(2, 512, 784)
			eval := func(d *devmodel.Model, r *result, x []float32, y []int32) error {
				l, c, err := d.Eval(x, y)
				if err == nil {
					r.evals = append(r.evals, float64(math.Float32bits(l)), float64(c))
				}
				return err
			}
			step := func(d *devmodel.Model, r *result) {
				l, err := d.Step(x, y)
				if err != nil {
					t.Fatal(err)
				}
				r.losses = append(r.losses, l)
			}
			run := func(fail bool) (r result) {
				d := place()
				freed := cudafake.FreedUses(t)
				step(d, &r)
				if err := eval(d, &r, sx, sy); err != nil {
					t.Fatal(err)
				}
				arena := d.EvalBytes()
				if arena == 0 {
					t.Fatal("no evaluation arena after evaluating 64 samples: nothing to lose")
				}
				var hog uintptr
				if fail {
					limit := deviceUsed(t)
					cudafake.MemLimit(t, limit)
					_, _, err := d.Eval(lx, ly)
					t.Logf("arena %d bytes; evaluating 512 samples under the limit: %v", arena, err)
					if err == nil || !strings.Contains(err.Error(), "bytes for evaluation batches of 512") {
						t.Fatalf("Eval of 512 samples over the memory limit: %v; want an error naming the bytes asked", err)
					}
					if got := d.EvalBytes(); got != arena {
						t.Fatalf("EvalBytes %d after the failed growth; %d before", got, arena)
					}
					// another user of the device takes what is free
					if free := limit - deviceUsed(t); free > 0 {
						var err error
						if hog, err = cuda.Malloc(dev, int(free)); err != nil {
							t.Fatal(err)
						}
						t.Logf("%d bytes free after the failed growth, taken", free)
					}
					cudafake.MemLimit(t, limit)
				}
				// under the limit still: the smaller batch evaluates, the model trains
				if err := eval(d, &r, sx, sy); err != nil {
					t.Fatalf("Eval of the smaller batch after a failed growth: %v", err)
				}
				step(d, &r)
				if err := eval(d, &r, sx, sy); err != nil {
					t.Fatal(err)
				}
				cudafake.MemLimit(t, 0)
				if hog != 0 {
					cuda.Free(dev, hog)
				}
				if err := eval(d, &r, lx, ly); err != nil {
					t.Fatal(err)
				}
				if got := cudafake.FreedUses(t) - freed; got != 0 {
					t.Fatalf("%d uses of freed device memory", got)
				}
				return r
			}
			ref, got := run(false), run(true)
			if i, ok := bitsEqual(got.losses, ref.losses); !ok {
				t.Errorf("step %d: loss %v, %v never failed", i, got.losses[i], ref.losses[i])
			}
			if fmt.Sprint(got.evals) != fmt.Sprint(ref.evals) {
				t.Errorf("evaluations (loss bits, correct) %v; %v never failed", got.evals, ref.evals)
			}
		})
	}
}

// TestStageEvalAfterFailedArenaGrowth: as TestEvalAfterFailedArenaGrowth
// for a Stage (the mlp's layers [0, 2)): an EvalForward of 512 samples
// whose arena cannot grow fails naming the bytes and keeps the arena
// (EvalBytes); whatever memory is free then taken, EvalForward of the
// 64 samples that fitted gives the same bits as before, and, the limit
// lifted, the 512 samples evaluate, with no use of freed memory.
func TestStageEvalAfterFailedArenaGrowth(t *testing.T) {
	cudafake.RequireFake(t)
	m, err := models.New("mlp", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := devmodel.PlaceStage(m, 0, 2, devmodel.Config{Device: dev, Batch: 8, Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	xs, _ := devtest.Images(2, 512, 784)
	x := devtest.Upload(t, dev, xs)
	freed := cudafake.FreedUses(t)
	evalOut := func(batch int) ([]float32, error) {
		out, err := s.EvalForward(x, batch)
		if err != nil {
			return nil, err
		}
		return devtest.Floats(t, dev, out, s.OutSize(batch)), nil
	}
	before, err := evalOut(64)
	if err != nil {
		t.Fatal(err)
	}
	arena := s.EvalBytes()
	limit := deviceUsed(t)
	cudafake.MemLimit(t, limit)
	_, err = evalOut(512)
	t.Logf("arena %d bytes; 512 samples under the limit: %v", arena, err)
	if err == nil || !strings.Contains(err.Error(), "bytes for evaluation batches of 512") {
		t.Fatalf("EvalForward of 512 samples over the memory limit: %v; want an error naming the bytes asked", err)
	}
	if got := s.EvalBytes(); got != arena {
		t.Fatalf("EvalBytes %d after the failed growth; %d before", got, arena)
	}
	var hog uintptr
	if free := limit - deviceUsed(t); free > 0 { // another user of the device takes it
		if hog, err = cuda.Malloc(dev, int(free)); err != nil {
			t.Fatal(err)
		}
	}
	cudafake.MemLimit(t, limit)
	again, err := evalOut(64)
	if err != nil {
		t.Fatalf("EvalForward of 64 samples after a failed growth: %v", err)
	}
	if i, ok := bitsEqual(again, before); !ok {
		t.Errorf("output %d: %v after the failed growth, %v before", i, again[i], before[i])
	}
	cudafake.MemLimit(t, 0)
	if hog != 0 {
		cuda.Free(dev, hog)
	}
	if _, err := evalOut(512); err != nil {
		t.Fatal(err)
	}
	if got := cudafake.FreedUses(t) - freed; got != 0 {
		t.Fatalf("%d uses of freed device memory", got)
	}
}
