package train

// Gradient clipping by global norm (Config.ClipGrad, -clip-grad).

import (
	"context"
	"fmt"
	"math"

	"github.com/gdist/gdist/comm"
)

// GradClipper is a Strategy that clips its gradients by their global
// norm (Config.ClipGrad). The built-in strategies are GradClippers; Run
// refuses -clip-grad for a strategy that is not one.
type GradClipper interface {
	// ClipGrads runs between Step and Update, on the synchronised
	// gradients: it computes norm, the L2 norm of the whole model's
	// averaged gradient (wherever the strategy keeps its parts), and, if
	// norm > max, scales the gradients by max/(norm+1e-6), as
	// torch.nn.utils.clip_grad_norm_ does. It returns norm (before
	// clipping), the same on every rank. Collective.
	ClipGrads(ctx context.Context, max float64) (norm float64, err error)
}

// UpdateClipper is a Strategy that clips inside its Update (a GPU's
// clip and update, fused: Config.ClipGrad is its setting), instead of
// being a GradClipper. After each Update the stepper asks it for the
// norm the gradient had before that clipping.
type UpdateClipper interface {
	// LastGradNorm is the global L2 norm of the averaged gradient that
	// the last Update clipped, before clipping; the same on every rank.
	LastGradNorm() (float64, error)
}

// GradNormLogger is an UpdateClipper that keeps each Update's norm where
// it computed it (a GPU's memory) rather than hand it over after each
// Update (a wait for the device every step): the stepper then does not
// call LastGradNorm, and takes the run's norms from GradNorms once, for
// the summary (grad_norm_p50, clipped_steps).
type GradNormLogger interface {
	UpdateClipper
	// GradNorms are the norms of every Update so far, in order: those
	// LastGradNorm would have returned after each.
	GradNorms() ([]float64, error)
}

// ClipGradNorm, for a strategy's ClipGrads, clips by global norm the
// gradient of which g is this rank's part: norm^2 is the sum over the
// ranks of over of their parts' sums of squares (each element of the gradient must be in exactly one rank's
// part: a ZeRO shard, a pipeline stage's range), or g's own when over is
// nil (g is the whole gradient, as every DDP rank holds it after the
// all-reduce). Every rank scales its part by the same factor. A norm that
// is not finite clips nothing: the loss check stops the run instead.
// Collective over over.
func ClipGradNorm(ctx context.Context, over comm.Comm, g []float32, max float64) (float64, error) {
	var ss float64
	for _, v := range g {
		ss += float64(v) * float64(v)
	}
	if over != nil && over.Size() > 1 {
		v := []float64{ss}
		if err := comm.Run(ctx)(over.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
			return 0, fmt.Errorf("train: summing the gradient norm over the ranks: %w", err)
		}
		ss = v[0]
	}
	norm := math.Sqrt(ss)
	if coef := max / (norm + 1e-6); coef < 1 && !math.IsInf(norm, 0) && !math.IsNaN(norm) {
		f := float32(coef)
		for i := range g {
			g[i] *= f
		}
	}
	return norm, nil
}
