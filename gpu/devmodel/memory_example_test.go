package devmodel_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// MemoryPlan says, without a device, where a model's device memory goes
// in training: the placement's buffers and the training plan's region,
// in which the buffers whose lives in a step do not meet share memory
// (gradients in the backward pass, values no backward reads in the
// forward pass). Here a gpt of 2 layers at batch 4: the region holds
// less than its buffers' sum, and the peak is the fixed buffers plus the
// region (Model.Memory is the same for a placed model, its Peak equal to
// PeakBytes after a step).
func ExampleMemoryPlan() {
	m, err := models.New("gpt-L2-D64-H4-T32", 1)
	if err != nil {
		panic(err)
	}
	b, err := devmodel.MemoryPlan(m, 4, devmodel.Config{Optim: optim.Config{Name: "adamw", LR: 1e-3}})
	if err != nil {
		panic(err)
	}
	var fixed, whole int64
	for _, v := range b.Fixed {
		fixed += v
	}
	for _, x := range b.Buffers {
		if x.Whole {
			whole += x.Bytes
		}
	}
	fmt.Printf("parameters %d bytes, gradients %d, AdamW's moments %d\n", b.Fixed["parameters"], b.Fixed["gradients"], b.Fixed["optimizer state"])
	fmt.Printf("plan: %d buffers of %d bytes in a region of %d (%d held the whole step)\n", len(b.Buffers), b.PlanUnshared, b.Plan, whole)
	fmt.Println("peak = fixed + region:", b.Peak == fixed+b.Plan)
	// Output:
	// parameters 540672 bytes, gradients 540672, AdamW's moments 1081344
	// plan: 63 buffers of 3117312 bytes in a region of 1970432 (1511680 held the whole step)
	// peak = fixed + region: true
}
