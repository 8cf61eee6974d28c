package devmodel_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
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
// above 1). The same two ranks without SyncBN do not (their running
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
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprintf("syncbn=%v", synced), func(t *testing.T) {
			one, err := devmodel.Place(zoo(t, "cnn-bn"), cfg(3, 2*half))
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			cs, err := inproc.New(2, comm.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ranks := make([]*devmodel.Model, 2)
			for r := range ranks {
				c := cfg(1+r, half)
				if synced {
					c.SyncBN = devmodel.HostSyncBN(ctx, (&syncbn.Syncer{C: cs[r]}).Hook())
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
				for j := range g0 {
					g0[j] = (g0[j] + g1[j]) / 2
				}
				big := 0.0
				for _, v := range gw {
					big = math.Max(big, math.Abs(float64(v)))
				}
				gradW, _ := worst(g0, gw, big)
				lossD := math.Abs(float64(got)-float64(want)) / math.Max(1, math.Abs(float64(want)))
				t.Logf("step %d: loss one rank %.7f, two ranks %.7f (%.2g); gradients within %.2g of the largest", i, want, got, lossD, gradW)
				if synced && !(lossD <= 2e-5 && gradW <= 2e-5) {
					t.Errorf("step %d: two synced ranks differ from one rank at double batch", i)
				}
				for _, d := range ranks {
					if err := cuda.CopyHtoD(d.Device(), d.Grads, f32bytes(g0)); err != nil {
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
