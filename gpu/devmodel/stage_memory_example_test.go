package devmodel_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// StageMemoryPlan says, without a device, what a pipeline stage holds
// in training: its range of the parameters, gradients and optimizer
// state, and its plan's region for a micro-batch size (the stage's
// input, output and their gradients held the whole step, the rest
// shared by lives). Here a gpt of 2 layers split in two at micro-batch
// 4: each stage holds less than the whole model.
func ExampleStageMemoryPlan() {
	m, err := models.New("gpt-L2-D64-H4-T32", 1)
	if err != nil {
		panic(err)
	}
	cfg := devmodel.Config{Optim: optim.Config{Name: "adamw", LR: 1e-3}}
	whole, err := devmodel.MemoryPlan(m, 4, cfg)
	if err != nil {
		panic(err)
	}
	n := m.NumLayers()
	for _, r := range [][2]int{{0, n / 2}, {n / 2, n}} {
		b, err := devmodel.StageMemoryPlan(m, r[0], r[1], 4, cfg)
		if err != nil {
			panic(err)
		}
		fmt.Printf("layers [%d, %d): parameters %d bytes, plan region %d, peak %d, below the whole model's: %v\n",
			r[0], r[1], b.Fixed["parameters"], b.Plan, b.Peak, b.Peak < whole.Peak)
	}
	// Output:
	// layers [0, 4): parameters 273664 bytes, plan region 1082880, peak 2185744, below the whole model's: true
	// layers [4, 8): parameters 267008 bytes, plan region 1444608, peak 2520848, below the whole model's: true
}
