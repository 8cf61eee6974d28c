package optim_test

import (
	"fmt"

	"github.com/gdist/gdist/optim"
)

// New64 makes the float64 twin of any optimizer Config describes (what
// ZeRO runs on its shard of float64 learnables).
func ExampleNew64() {
	o, err := optim.New64(optim.Config{Name: "sgd", LR: 0.5, Momentum: 0.9}, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	p := []float64{1, 1}
	for range 2 {
		o.Step64(p, []float64{1, -1}) // buf = 0.9 buf + g; p -= 0.5 buf
	}
	st, step := o.State64()
	fmt.Printf("%.2f %.2f %d\n", p, st["momentum_buffer"], step)
	// Output: [-0.45 2.45] [1.90 -1.90] 2
}
