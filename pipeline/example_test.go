package pipeline_test

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/pipeline"
	"golang.org/x/sync/errgroup"
)

// An nn model split into two stages (ranks as goroutines), trained for a
// few steps with 1F1B over 2 micro-batches. Every stage builds the model
// from the same seed and keeps its own layers' parameters.
func Example() {
	cs, _ := inproc.New(2, comm.Options{})
	var g errgroup.Group
	out := make([]string, 2)
	for _, c := range cs {
		g.Go(func() error {
			defer c.Close()
			ctx := context.Background()
			m, err := nn.New("mlp", nn.Seq(&nn.Linear{In: 4, Out: 16}, nn.Tanh{}, &nn.Linear{In: 16, Out: 2}), []int{4}, 1)
			if err != nil {
				return err
			}
			p, err := pipeline.New(ctx, c, m, pipeline.Config{Boundaries: []int{0, 2, 3}, Micro: 2}, 8)
			if err != nil {
				return err
			}
			defer p.Close()
			_, n := p.Range()
			opt, _ := optim.New(optim.Config{Name: "sgd", LR: 0.5}, n)
			x := make([]float32, 8*4)
			y := make([]int32, 8)
			for i := range y {
				y[i] = int32(i % 2)
				x[i*4+i%2] = 1
			}
			var first, last float64
			for step := 0; step < 30; step++ {
				loss, err := p.Step(ctx, x, y)
				if err != nil {
					return err
				}
				p.Update(opt)
				if step == 0 {
					first = loss
				}
				last = loss
			}
			from, to := p.Layers()
			out[p.Stage()] = fmt.Sprintf("stage %d: layers [%d, %d), %d parameters", p.Stage(), from, to, n)
			if p.Stage() == 1 {
				out[1] += fmt.Sprint(", loss falls: ", last < first/2)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		panic(err)
	}
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// stage 0: layers [0, 2), 80 parameters
	// stage 1: layers [2, 3), 34 parameters, loss falls: true
}

// An nn model is a pipeline Model (and a Sampler) as it is.
var (
	_ pipeline.Model[*nn.StageGraph] = (*nn.Model)(nil)
	_ pipeline.Sampler               = (*nn.Model)(nil)
)
