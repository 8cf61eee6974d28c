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

// steppedMLP places the zoo's mlp on device 0 for batches of 16 (SGD)
// and runs one training step on it: the examples' model after a step.
func steppedMLP() *devmodel.Model {
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 16, Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err != nil {
		panic(err)
	}
	x, y := devtest.Images(0, 16, 784)
	if _, err := d.Step(x, y); err != nil {
		d.Close()
		panic(err)
	}
	return d
}

// Evaluation on a forward-only plan: the zoo's mlp placed for batches of
// 16 evaluates 512 samples at once. Its forward-only plan borrows the
// training plan's memory and runs the 512 samples in passes that fit
// there, so the evaluation holds no more than the batch's input, labels
// and logits (EvalBytes) beyond what training holds, and allocates
// nothing the second time.
func ExampleModel_EvalBytes() {
	if cudafake.Mode() == "none" {
		fmt.Println("evaluation holds at most the batch's buffers: true") // no CUDA here: what it prints with one
		fmt.Println("the second evaluation allocates nothing: true")
		return
	}
	d := steppedMLP()
	defer d.Close()
	ex, ey := devtest.Images(1, 512, 784)
	if _, _, err := d.Eval(ex, ey); err != nil {
		panic(err)
	}
	held, peak := d.EvalBytes(), d.PeakBytes()
	fmt.Println("evaluation holds at most the batch's buffers:", held <= int64(4*512*(784+2+10)+8+4*256))
	if _, _, err := d.Eval(ex, ey); err != nil {
		panic(err)
	}
	fmt.Println("the second evaluation allocates nothing:", d.EvalBytes() == held && d.PeakBytes() == peak)
	// Output:
	// evaluation holds at most the batch's buffers: true
	// the second evaluation allocates nothing: true
}

// A pipeline stage evaluates on its forward-only plan: EvalForward gives
// Forward's output without touching the activations Forward keeps for
// Backward (here the mlp's first two layers, a batch of 64 in device
// memory).
func ExampleStage_EvalForward() {
	if cudafake.Mode() == "none" {
		fmt.Println("the same output: true") // no CUDA here: what it prints with one
		return
	}
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	st, err := devmodel.PlaceStage(m, 0, 2, devmodel.Config{Device: 0, Batch: 16, Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	x, _ := devtest.Images(0, 64, 784)
	in, err := cuda.Malloc(0, 4*len(x))
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, in)
	if err := cuda.CopyHtoD(0, in, devtest.Bytes(x)); err != nil {
		panic(err)
	}
	if err := cuda.DeviceSynchronize(0); err != nil { // the upload, before the stage's stream reads it
		panic(err)
	}
	read := func(p uintptr) []float32 {
		if err := st.Stream().Synchronize(); err != nil {
			panic(err)
		}
		v := make([]float32, st.OutSize(64))
		if err := cuda.CopyDtoH(0, devtest.Bytes(v), p); err != nil {
			panic(err)
		}
		return v
	}
	out, err := st.EvalForward(in, 64)
	if err != nil {
		panic(err)
	}
	a := read(out)
	if out, err = st.Forward(in, 64); err != nil {
		panic(err)
	}
	b := read(out)
	same := len(a) == len(b)
	for i := range a {
		same = same && a[i] == b[i]
	}
	fmt.Println("the same output:", same)
	// Output:
	// the same output: true
}
