package devmodel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/syncbn"
)

// The mlp placed with bf16 autocast for its matrix products (PyTorch's
// torch.autocast(dtype=torch.bfloat16); "tf32" is allow_tf32): the
// parameters stay fp32, Products says what computes the products.
func ExampleConfig_precision() {
	if cudafake.Mode() == "none" {
		fmt.Println("bf16: true") // no CUDA here: what it prints with one
		return
	}
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 8, Precision: gemm.BF16,
		Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	x, y := devtest.Images(0, 8, 784)
	if _, err := d.Step(x, y); err != nil {
		panic(err)
	}
	fmt.Println("bf16:", strings.HasSuffix(d.Products(), "bf16"))
	// Output: bf16: true
}

// SyncBatchNorm on the device: two ranks (goroutines, devices 0 and 1;
// both on device 0 where there is one)
// whose batch norms' statistics span both ranks' batches through
// package syncbn's hook on a comm, adapted by HostSyncBN; their running
// statistics are then the same.
func ExampleHostSyncBN() {
	if cudafake.Mode() == "none" {
		fmt.Println("same running mean: true") // no CUDA here: what it prints with one
		return
	}
	ctx := context.Background()
	cs, err := inproc.New(2, comm.Options{})
	if err != nil {
		panic(err)
	}
	ds := make([]*devmodel.Model, 2)
	for r := range ds {
		m, err := nn.New("bn", nn.Seq(&nn.Linear{In: 8, Out: 6}, nn.BatchNorm1d(6), nn.ReLU{}, &nn.Linear{In: 6, Out: 3}), []int{8}, 1)
		if err != nil {
			panic(err)
		}
		hook := (&syncbn.Syncer{C: cs[r]}).Hook()
		dev := r % max(1, cuda.DeviceCount()) // one GPU: both ranks on it
		if ds[r], err = devmodel.Place(m, devmodel.Config{Device: dev, Batch: 4, SyncBN: devmodel.HostSyncBN(ctx, hook),
			Optim: optim.Config{Name: "sgd", LR: 0.1}}); err != nil {
			panic(err)
		}
		defer ds[r].Close()
	}
	var wg sync.WaitGroup
	for r, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, y := devtest.Vals(r, 4*8, 1), []int32{0, 1, 2, 0}
			if _, err := d.ForwardBackward(x, y); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	for _, d := range ds {
		if err := d.CopyToHost(); err != nil {
			panic(err)
		}
	}
	a, b := ds[0].Host.BNs[0].RunningMean, ds[1].Host.BNs[0].RunningMean
	fmt.Println("same running mean:", fmt.Sprint(a) == fmt.Sprint(b))
	// Output: same running mean: true
}
