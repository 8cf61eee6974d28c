package train_test

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/train"
)

// logClipper is a GradNormLogger in miniature: its Update clips the
// gradient by its global norm and keeps the norm in a log of its own,
// as a GPU strategy keeps it in device memory (train/dp's device DDP:
// devmodel.Model.GradNorms), instead of handing it over after every
// Update; the log is read once, when the run is over.
type logClipper struct {
	w, g []float32
	max  float64
	log  []float64
}

var _ train.GradNormLogger = (*logClipper)(nil)

// Update clips g by max (train.ClipGradNorm: the whole gradient is this
// one rank's), steps w by SGD and zeroes g.
func (s *logClipper) Update(ctx context.Context) error {
	norm, err := train.ClipGradNorm(ctx, nil, s.g, s.max)
	if err != nil {
		return err
	}
	s.log = append(s.log, norm)
	for i := range s.w {
		s.w[i] -= 0.5 * s.g[i]
		s.g[i] = 0
	}
	return nil
}

func (s *logClipper) LastGradNorm() (float64, error) { return s.log[len(s.log)-1], nil }

func (s *logClipper) GradNorms() ([]float64, error) { return append([]float64(nil), s.log...), nil }

// A strategy that clips inside its Update and logs its norms where it
// computed them is a GradNormLogger: Run's steps then never wait for a
// norm (with a plain UpdateClipper they call LastGradNorm after every
// Update, a wait for the device each step), and the summary's
// grad_norm_p50 and clipped_steps come from one GradNorms at the end,
// the norms LastGradNorm would have returned, in order. Here the
// gradient of |w - (3, 4)|^2 / 2 from w = 0, clipped to norm 3 and
// stepped by half: the first two steps are clipped, the others not.
func ExampleGradNormLogger() {
	ctx := context.Background()
	s := &logClipper{w: make([]float32, 2), g: make([]float32, 2), max: 3}
	for step := 0; step < 5; step++ {
		s.g[0], s.g[1] = s.w[0]-3, s.w[1]-4 // Step: the gradient
		if err := s.Update(ctx); err != nil {
			panic(err)
		}
	}
	norms, err := s.GradNorms() // once, at the end
	if err != nil {
		panic(err)
	}
	clipped := 0
	for _, n := range norms {
		if n > s.max {
			clipped++
		}
	}
	last, _ := s.LastGradNorm()
	fmt.Printf("norms %.4g\n", norms)
	fmt.Printf("clipped steps %d of %d; the last norm is LastGradNorm's: %v\n", clipped, len(norms), last == norms[len(norms)-1])
	// Output:
	// norms [5 3.5 2 1 0.5]
	// clipped steps 2 of 5; the last norm is LastGradNorm's: true
}
