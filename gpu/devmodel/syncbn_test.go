package devmodel_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	_ "github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/syncbn"
)

// SyncBatchNorm on the device (Config.SyncBN): cnn-bn on two ranks
// (goroutines, fake devices 1 and 2, HostSyncBN over package syncbn's
// hook on an inproc comm), each at batch 4 with its half of a batch of 8,
// the ranks' gradients averaged as DDP does, equals one rank at batch 8
// (device 3), 3 steps of SGD: the mean of the ranks' losses within 2e-5
// of the one rank's (relative to max(1, loss)), the averaged gradients
// within 2e-5 of the largest (the convolutions' biases before a batch
// norm have gradients of rounding noise), and after the last step every
// parameter and running statistic within 2e-5 (absolute, or relative
// above 1). The same two ranks with the statistics exchanged on the
// device instead (syncbn.Device over NCCL, issue 28; on the fake, NCCL's
// collectives started 5 ms late, so that the model's stream would read
// the statistics early if it did not wait for them) give the host hook's
// losses, gradients, parameters and running statistics bit for bit. The
// same two ranks without SyncBN do not match one rank (their running
// statistics are each half's).
func TestSyncBNMatchesDoubleBatch(t *testing.T) {
	cudafake.RequireCUDA(t)
	if testing.Short() && cudafake.Mode() != "real" {
		t.Skip("-short: three cnn-bn's emulated convolutions take a while")
	}
	if n := cuda.DeviceCount(); n < 4 {
		t.Skipf("needs 4 devices, has %d", n)
	}
	const half, steps, in = 4, 3, 784
	ctx := context.Background()
	cfg := func(dev, batch int) devmodel.Config {
		return devmodel.Config{Device: dev, Batch: batch, Optim: optim.Config{Name: "sgd", LR: 0.03, Momentum: 0.9}}
	}
	type result struct {
		losses   []float32
		grads    [][]float32
		params   []float32
		mean, vr [][]float32
	}
	var hostRes *result
	for _, variant := range []string{"host", "device", "none"} {
		synced := variant != "none"
		t.Run("syncbn="+variant, func(t *testing.T) {
			var res result
			one, err := devmodel.Place(zoo(t, "cnn-bn"), cfg(3, 2*half))
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			var cs []comm.Comm
			if variant == "device" {
				cs = cudafake.NCCLRanks(t, 2, 1) // GPUs 1 and 2
				if cudafake.Mode() == "fake" {
					cudafake.NCCLDelay(t, 5*time.Millisecond)
				}
			} else if cs, err = inproc.New(2, comm.Options{}); err != nil {
				t.Fatal(err)
			}
			ranks := make([]*devmodel.Model, 2)
			for r := range ranks {
				c := cfg(1+r, half)
				switch variant {
				case "host":
					c.SyncBN = devmodel.HostSyncBN(ctx, (&syncbn.Syncer{C: cs[r]}).Hook())
				case "device":
					sd, err := syncbn.NewDevice(cs[r], 1+r)
					if err != nil {
						t.Fatal(err)
					}
					defer sd.Close(ctx)
					c.SyncBN = sd.Hook(ctx)
				}
				if ranks[r], err = devmodel.Place(zoo(t, "cnn-bn"), c); err != nil {
					t.Fatal(err)
				}
				defer ranks[r].Close()
				defer cs[r].Close()
			}
			n := one.N
			for i := 0; i < steps; i++ {
				x, y := devtest.Images(i, 2*half, in)
				want, err := one.ForwardBackward(x, y)
				if err != nil {
					t.Fatal(err)
				}
				losses, errs := make([]float32, 2), make([]error, 2)
				var wg sync.WaitGroup
				for r := range ranks {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ranks[r].SampleOffset = r * half
						losses[r], errs[r] = ranks[r].ForwardBackward(x[r*half*in:(r+1)*half*in], y[r*half:(r+1)*half])
					}()
				}
				wg.Wait()
				for r, e := range errs {
					if e != nil {
						t.Fatalf("rank %d: %v", r, e)
					}
				}
				got := (losses[0] + losses[1]) / 2
				res.losses = append(res.losses, losses...)
				// DDP's average of the gradients, on every rank
				g0, g1, gw := make([]float32, n), make([]float32, n), make([]float32, n)
				if err := ranks[0].GradsToHost(g0); err != nil {
					t.Fatal(err)
				}
				if err := ranks[1].GradsToHost(g1); err != nil {
					t.Fatal(err)
				}
				if err := one.GradsToHost(gw); err != nil {
					t.Fatal(err)
				}
				res.grads = append(res.grads, append([]float32(nil), g0...), append([]float32(nil), g1...))
				for j := range g0 {
					g0[j] = (g0[j] + g1[j]) / 2
				}
				gradW, _ := worstOfLargest(g0, gw)
				lossD := math.Abs(float64(got)-float64(want)) / math.Max(1, math.Abs(float64(want)))
				t.Logf("step %d: loss one rank %.7f, two ranks %.7f (%.2g); gradients within %.2g of the largest", i, want, got, lossD, gradW)
				if synced && !(lossD <= 2e-5 && gradW <= 2e-5) {
					t.Errorf("step %d: two synced ranks differ from one rank at double batch", i)
				}
				for _, d := range ranks {
					if err := cuda.CopyHtoD(d.Device(), d.Grads, f32bytes(g0)); err != nil {
						t.Fatal(err)
					}
					// The model's stream is non-blocking: the copy (on
					// the legacy stream, done later from pageable
					// memory) lands before Update reads the gradients.
					if err := cuda.DeviceSynchronize(d.Device()); err != nil {
						t.Fatal(err)
					}
				}
				for _, d := range append([]*devmodel.Model{one}, ranks...) {
					if err := d.Update(); err != nil {
						t.Fatal(err)
					}
					if err := d.ZeroGrad(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, d := range append([]*devmodel.Model{one}, ranks...) {
				if err := d.CopyToHost(); err != nil {
					t.Fatal(err)
				}
			}
			res.params = append(append(res.params, ranks[0].Host.Flat.Value...), ranks[1].Host.Flat.Value...)
			for _, d := range ranks {
				for _, bn := range d.Host.BNs {
					res.mean = append(res.mean, bn.RunningMean)
					res.vr = append(res.vr, bn.RunningVar)
				}
			}
			switch variant {
			case "host":
				hostRes = &res
			case "device":
				if hostRes == nil {
					t.Fatal("the host hook's run failed: nothing to compare with")
				}
				if d := bitsDiffer(hostRes.losses, res.losses, hostRes.grads, res.grads, [][]float32{hostRes.params}, [][]float32{res.params},
					hostRes.mean, res.mean, hostRes.vr, res.vr); d != "" {
					t.Errorf("the device hook differs from the host hook: %s", d)
				}
			}
			w, at := worst(ranks[0].Host.Flat.Value, one.Host.Flat.Value, 1)
			statW := 0.0
			for j, bn := range one.Host.BNs {
				for r := range ranks {
					m, _ := worst(ranks[r].Host.BNs[j].RunningMean, bn.RunningMean, 1)
					v, _ := worst(ranks[r].Host.BNs[j].RunningVar, bn.RunningVar, 1)
					statW = math.Max(statW, math.Max(m, v))
				}
			}
			t.Logf("after %d steps: parameters within %.2g (element %d), running statistics within %.2g", steps, w, at, statW)
			if synced && !(w <= 2e-5 && statW <= 2e-5) {
				t.Errorf("synced ranks' parameters or running statistics differ from one rank's at double batch")
			}
			if !synced && !(statW > 1e-4) {
				t.Errorf("without SyncBN the running statistics equal the double batch's (%.2g): the test cannot tell", statW)
			}
		})
	}
}

// bitsDiffer compares pairs (want, got) of values or lists of them bit for
// bit: "" if equal, else where they first differ.
func bitsDiffer(pairs ...any) string {
	for i := 0; i < len(pairs); i += 2 {
		var a, b [][]float32
		switch w := pairs[i].(type) {
		case []float32:
			a, b = [][]float32{w}, [][]float32{pairs[i+1].([]float32)}
		case [][]float32:
			a, b = w, pairs[i+1].([][]float32)
		}
		if len(a) != len(b) {
			return fmt.Sprintf("item %d: %d lists, want %d", i/2, len(b), len(a))
		}
		for j := range a {
			if len(a[j]) != len(b[j]) {
				return fmt.Sprintf("item %d, list %d: %d values, want %d", i/2, j, len(b[j]), len(a[j]))
			}
			for k := range a[j] {
				if math.Float32bits(a[j][k]) != math.Float32bits(b[j][k]) {
					return fmt.Sprintf("item %d, list %d, value %d: %v, want %v", i/2, j, k, b[j][k], a[j][k])
				}
			}
		}
	}
	return ""
}

func f32bytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// A model whose host batch norms are SyncBatchNorms (a Sync hook, as
// syncbn.Convert sets) is refused at Place without Config.SyncBN, naming
// the layer and the fix; Check (no device, no Config) accepts it.
func TestSyncBNRefusedWithoutHook(t *testing.T) {
	m := zoo(t, "cnn-bn")
	m.SetBatchNormSync(func(context.Context, string, []float64) error { return nil })
	if err := devmodel.Check(m); err != nil {
		t.Errorf("Check: %v", err)
	}
	cudafake.RequireCUDA(t)
	_, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: 2, Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err == nil {
		t.Fatal("placed a SyncBatchNorm without Config.SyncBN")
	}
	for _, w := range []string{`layer "1"`, "SyncBatchNorm", "Config.SyncBN", "HostSyncBN"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%v: does not say %q", err, w)
		}
	}
}

// HostSyncBN's hook hands the host function the values queued on the
// stream and leaves its result for the stream's later work (the fake's
// legacy stream slowed, so that a missing wait reads the old values),
// and keeps no CUDA event alive after a call (cudafake.LiveEvents).
func TestHostSyncBNLeavesNoEvents(t *testing.T) {
	cudafake.RequireFake(t)
	const n = 5
	s, buf := cudafake.NewStream(t, dev, true), cudafake.Malloc(t, dev, 8*n)
	twice := func(ctx context.Context, stage string, v []float64) error {
		for i := range v {
			v[i] = 2*v[i] + 1
		}
		return nil
	}
	hook := devmodel.HostSyncBN(context.Background(), twice)
	host := make([]float64, n)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), 8*n)
	if err := s.MemsetAsync(buf, 0, 8*n); err != nil {
		t.Fatal(err)
	}
	live := cudafake.LiveEvents(t)
	for call := 0; call < 3; call++ {
		cudafake.CopyDelay(t, 20*time.Millisecond)
		if err := hook(s, "forward", buf, n); err != nil {
			t.Fatal(err)
		}
		cudafake.CopyDelay(t, 0)
		if got := cudafake.LiveEvents(t); got != live {
			t.Errorf("call %d: %d CUDA events alive, %d before: the hook leaks events", call, got, live)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyDtoH(dev, b, buf); err != nil {
		t.Fatal(err)
	}
	for i, v := range host {
		if v != 7 { // 0 -> 1 -> 3 -> 7
			t.Fatalf("value %d: %v after three calls, want 7", i, v)
		}
	}
}
