package optim_test

import (
	"fmt"

	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

// A gorgonia program keeps its solver under ZeRO: FromSolver gives the
// Config (zero.Options.Optim) that steps each rank's shard as the solver
// would step the whole model.
func ExampleFromSolver() {
	solver := G.NewRMSPropSolver(G.WithLearnRate(0.01), G.WithClip(5), G.WithL2Reg(1e-4))
	cfg, err := optim.FromSolver(solver)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s lr %v rho %v eps %v clip %v l2 %v\n", cfg.Name, cfg.LR, cfg.Rho, cfg.Eps, cfg.Clip, cfg.L2)

	// One step on a shard of two parameters.
	opt, _ := optim.New(cfg, 2)
	p := []float32{1, -1}
	opt.Step(p, []float32{0.5, 100}) // the step takes 100 clipped to 5, the mean of squares 100
	fmt.Printf("%.4f %.4f\n", p[0], p[1])
	// Output:
	// rmsprop lr 0.01 rho 0.999 eps 1e-08 clip 5 l2 0.0001
	// 0.6837 -1.0157
}
