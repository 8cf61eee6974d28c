package devmodel_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// placeHalf places the mlp for Adam under ZeRO-3 (ShardParams, a unit
// per layer) as the rank owning the first s values of its flat buffers:
// the other rank's half, which here never changes, comes from a device
// copy of its initial values, copied on the model's stream by
// GatherParams and by fill (Unshard's all-gather). Closed when t ends.
func placeHalf(t *testing.T) (d *devmodel.Model, s int, fill func(full uintptr) error) {
	t.Helper()
	m, err := models.New("mlp", 1)
	if err != nil {
		t.Fatal(err)
	}
	n := len(m.Flat.Value)
	s = n / 2
	other := devtest.Upload(t, dev, m.Flat.Value[s:])
	d, err = devmodel.Place(m, devmodel.Config{Device: dev, Batch: 8, Optim: optim.Config{Name: "adam", LR: 1e-2},
		Shard: devmodel.Range{Lo: 0, Hi: s}, ShardGrads: true, ShardParams: true, UnitFloats: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	gather := func(lo, hi int, dst uintptr) error {
		if a, b := lo, min(hi, s); a < b {
			if err := d.Stream().CopyAsync(dst, d.ParamShard()+uintptr(4*a), 4*(b-a), cuda.DeviceToDevice); err != nil {
				return err
			}
		}
		if a, b := max(lo, s), hi; a < b {
			return d.Stream().CopyAsync(dst+uintptr(4*(a-lo)), other+uintptr(4*(a-s)), 4*(b-a), cuda.DeviceToDevice)
		}
		return nil
	}
	d.GatherParams = func(lo, hi int, dst uintptr, _ *cuda.Event) (func() error, error) {
		return nil, gather(lo, hi, dst) // on the model's stream: ordered with its work
	}
	return d, s, func(full uintptr) error { return gather(s, n, full+uintptr(4*s)) }
}

// deviceUsed is the device memory the fake has allocated on dev (all
// of this process's allocations there): the least MemLimit under which
// a 1-byte cudaMalloc succeeds, less 1.
func deviceUsed(t *testing.T) int64 {
	t.Helper()
	fits := func(limit int64) bool {
		cudafake.MemLimit(t, limit)
		defer cudafake.MemLimit(t, 0)
		p, err := cuda.Malloc(dev, 1)
		if err != nil {
			return false
		}
		cuda.Free(dev, p)
		return true
	}
	lo, hi := int64(1), int64(1)<<40 // !fits(lo-1) (0: no limit), fits(hi)
	if fits(lo) {
		return 0
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi - 1
}

// TestUnshardOutOfMemory: a ZeRO-3 rank (the mlp's first half, Adam, a
// unit per layer) whose Unshard cannot have the whole parameter buffer
// (cudafake.MemLimit set, from the device's use at that moment, so that
// exactly that allocation fails: the shard's buffer, once freed, fits
// again) returns an error naming the model, device, shard and bytes
// asked, and is left as before: it trains on, evaluates (Unshard, Eval,
// Reshard) and saves (CopyToHost) bit for bit as a model that never
// failed, with no use of freed device memory (cudafake.FreedUses).
// Where the shard's own buffer cannot be had back either ("unshard
// parked": the limit lower), or Reshard cannot have it ("reshard
// parked"), the shard's values are kept in host memory: the error says
// so, ForwardBackward, Eval, Update and Unshard refuse naming Reshard,
// CopyToHost gives the values, and Reshard, once memory is free, puts
// them back; training then goes on bit for bit too, as it does after a
// fill (the all-gather) that failed. Without the fix the
// shard's buffer was freed and left dangling: the steps after a failed
// Unshard used freed memory.
func TestUnshardOutOfMemory(t *testing.T) {
	cudafake.RequireFake(t)
	type result struct {
		losses []float32
		eval   [2]float64
		params []float32
	}
	run := func(t *testing.T, fail string) (r result) {
		d, s, fill := placeHalf(t)
		n := d.N
		where := fmt.Sprintf("mlp (device %d, shard [0, %d))", dev, s)
		step := func(i int) {
			x, y := devtest.Images(i%4, 8, 784)
			l, err := d.Step(x, y)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			r.losses = append(r.losses, l)
		}
		// refused checks that a parked model refuses to run, naming
		// Reshard, and that CopyToHost still gives its parameters.
		refused := func() {
			x, y := devtest.Images(0, 8, 784)
			if _, err := d.ForwardBackward(x, y); err == nil || !strings.Contains(err.Error(), "Reshard") {
				t.Fatalf("ForwardBackward with the shard parked: %v; want an error naming Reshard", err)
			}
			if _, _, err := d.Eval(x, y); err == nil || !strings.Contains(err.Error(), "Reshard") {
				t.Fatalf("Eval with the shard parked: %v; want an error naming Reshard", err)
			}
			if err := d.Update(); err == nil || !strings.Contains(err.Error(), "Reshard") {
				t.Fatalf("Update with the shard parked: %v; want an error naming Reshard", err)
			}
			if err := d.Unshard(fill); err == nil || !strings.Contains(err.Error(), "Reshard") {
				t.Fatalf("Unshard with the shard parked: %v; want an error naming Reshard", err)
			}
			if err := d.CopyToHost(); err != nil {
				t.Fatalf("CopyToHost with the shard parked: %v", err)
			}
		}
		freed := cudafake.FreedUses(t)
		step(0)
		step(1)
		if fail == "unshard" || fail == "unshard parked" {
			used, units := deviceUsed(t), d.Memory().Fixed["ZeRO units' blocks"]
			if units == 0 {
				t.Fatal("no units' blocks held after two steps")
			}
			// Unshard frees the units' blocks and the shard, then asks
			// 4n bytes: with this limit the shard's 4s fit again, 4n not
			limit := used - units
			if fail == "unshard parked" {
				limit-- // nor the shard's
			}
			cudafake.MemLimit(t, limit)
			err := d.Unshard(func(uintptr) error { t.Fatal("fill called after a failed allocation"); return nil })
			cudafake.MemLimit(t, 0)
			t.Logf("%s: %v", fail, err)
			want := fmt.Sprintf("%s: Unshard: %d bytes for the whole parameter buffer", where, 4*n)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Unshard over the memory limit: %v; want an error with %q", err, want)
			}
			if fail == "unshard parked" {
				if !strings.Contains(err.Error(), fmt.Sprintf("%d bytes for the parameters' shard", 4*s)) || !strings.Contains(err.Error(), "host memory") {
					t.Fatalf("Unshard with the shard's buffer not had back: %v; want the shard's bytes and where its values are", err)
				}
				refused()
				if err := d.Reshard(); err != nil {
					t.Fatalf("Reshard of the parked shard: %v", err)
				}
			} else if strings.Contains(err.Error(), "host memory") {
				t.Fatalf("the shard's buffer was not had back: %v", err)
			}
		}
		if fail == "fill" {
			err := d.Unshard(func(uintptr) error { return fmt.Errorf("the peer is gone") })
			t.Logf("%s: %v", fail, err)
			if want := where + ": gathering the parameters: the peer is gone"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Unshard with fill failing: %v; want an error with %q", err, want)
			}
		}
		step(2)
		step(3)
		if err := d.Unshard(fill); err != nil {
			t.Fatal(err)
		}
		ex, ey := devtest.Images(7, 8, 784)
		l, c, err := d.Eval(ex, ey)
		if err != nil {
			t.Fatal(err)
		}
		r.eval = [2]float64{float64(l), float64(c)}
		if fail == "reshard parked" {
			// Reshard frees the whole buffer, then asks the shard's 4s
			// bytes: with this limit neither they nor the whole 4n fit
			limit := deviceUsed(t) - int64(4*n) + int64(4*s) - 1
			cudafake.MemLimit(t, limit)
			err := d.Reshard()
			cudafake.MemLimit(t, 0)
			t.Logf("%s: %v", fail, err)
			want := fmt.Sprintf("%s: %d bytes for the parameters' shard", where, 4*s)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "host memory") {
				t.Fatalf("Reshard over the memory limit: %v; want an error with %q and where the values are", err, want)
			}
			refused()
		}
		if err := d.Reshard(); err != nil {
			t.Fatal(err)
		}
		step(4)
		if err := d.CopyToHost(); err != nil {
			t.Fatal(err)
		}
		r.params = append([]float32(nil), d.Host.Flat.Value[:s]...)
		if got := cudafake.FreedUses(t) - freed; got != 0 {
			t.Fatalf("%d uses of freed device memory", got)
		}
		return r
	}
	var ref result
	t.Run("never failed", func(t *testing.T) { ref = run(t, "") })
	if ref.params == nil {
		t.FailNow()
	}
	for _, fail := range []string{"unshard", "unshard parked", "reshard parked", "fill"} {
		t.Run(fail, func(t *testing.T) {
			r := run(t, fail)
			if i, ok := bitsEqual(r.losses, ref.losses); !ok {
				t.Errorf("step %d: loss %v, %v never failed", i, r.losses[i], ref.losses[i])
			}
			if r.eval != ref.eval {
				t.Errorf("evaluation (loss, correct) %v, %v never failed", r.eval, ref.eval)
			}
			if i, ok := bitsEqual(r.params, ref.params); !ok {
				t.Errorf("parameter %d: %v, %v never failed", i, r.params[i], ref.params[i])
			}
		})
	}
}
