package kernels

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/rtc"
)

// AdamConfig is torch.optim.Adam's settings (AdamW's with Decoupled), as
// optim.Config holds them (Beta1, Beta2 and Eps are not defaulted here:
// optim's defaults are 0.9, 0.999, 1e-8).
type AdamConfig struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Decoupled                          bool
}

// Adam is one step of torch.optim.Adam, or AdamW with c.Decoupled, over
// params [n] from grads [n], m and v [n] the first and second moments
// (zeroed before the first step, as PyTorch's start), step the step's
// number counting from 1 (optim's after its increment): bit for bit
// package optim's Adam (the constants computed on the host as optim
// computes them, every float32 operation on the device rounded on its
// own, as optim's loop and vecmath's AdamW kernel do).
func (k *Kernels) Adam(s *cuda.Stream, params, grads, m, v uintptr, n int, c AdamConfig, step int64) error {
	if err := sizeErr("Adam", "n", n); err != nil || n == 0 {
		return err
	}
	if step < 1 {
		return fmt.Errorf("kernels: Adam step %d: the first step is 1", step)
	}
	b1, b2 := float32(c.Beta1), float32(c.Beta2)
	bc1 := 1 - math.Pow(c.Beta1, float64(step))
	bc2 := 1 - math.Pow(c.Beta2, float64(step))
	stepSize := float32(c.LR / bc1)
	sqrtBC2 := float32(math.Sqrt(bc2))
	eps, wd, lr := float32(c.Eps), float32(c.WeightDecay), float32(c.LR)
	name, g := "gd_adam", grid(n)
	if aligned4([]uintptr{params, grads, m, v}) {
		name, g = "gd_adam4", grid((n+3)/4)
	}
	return k.launch(name, s, g, rw(4*int64(n), 3*int64(n)), params, grads, m, v, int64(n), wd, lr*wd, b1, 1-b1, b2, 1-b2, sqrtBC2, eps, stepSize, b32(c.Decoupled))
}

// clipParts is the blocks of the norm's first level (about 8 per SM of
// an H100's 132): a fixed number, so that the sum's order depends on n
// alone.
const clipParts = 1024

// ClipWorkspace is the bytes of device scratch ClipGradNorm needs: the
// norm (a float64, first), the factor applied (a float64, second), then
// the partial sums.
const ClipWorkspace = 8 * (2 + clipParts)

// ClipGradNorm clips grads [n] by their global norm as train's -clip-grad
// does (torch.nn.utils.clip_grad_norm_): norm = sqrt(sum g^2) in float64
// (clipParts equal stretches, each a tree, then a tree over them: the
// same result every run, within NormTol of train's ordered sum), and when
// max / (norm + 1e-6) is below 1 and the norm finite, every gradient
// times that factor as a float32 (train's); the norm (float64) is left
// at ws for the caller to read, the factor after it. No host round trip:
// all on s.
func (k *Kernels) ClipGradNorm(s *cuda.Stream, grads uintptr, n int, max float64, ws uintptr) error {
	if err := sizeErr("ClipGradNorm", "n", n); err != nil {
		return err
	}
	part := ws + 16
	if err := k.launch("gd_sumsq", s, rtc.Config{Grid: rtc.Dim(clipParts), Block: rtc.Dim(Block)}, rw(int64(n), 2*clipParts), part, grads, int64(n)); err != nil {
		return err
	}
	if err := k.launch("gd_clip_finish", s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(Block)}, rw(2*clipParts, 4), ws, part, int32(clipParts), max); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return k.launch("gd_scale_by", s, grid(n), rw(int64(n), int64(n)), grads, int64(n), ws)
}

// ClipSquare leaves at sq (a float64) the square of the norm that
// ClipGradNorm left at ws: a shard's part of the global norm's square,
// for the ranks to sum on the device (ZeRO's clipping: ClipGlobal
// follows).
func (k *Kernels) ClipSquare(s *cuda.Stream, sq, ws uintptr) error {
	return k.launch("gd_clip_square", s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(1)}, rw(2, 2), sq, ws)
}

// ClipGlobal clips grads [n], a shard whose norm ClipGradNorm left at ws,
// by the global norm sqrt(sq) (sq: the shards' squares, ClipSquare's,
// summed over the ranks): ws then holds that norm, and the factor
// applied after it, the one a ClipGradNorm of the shard with the bound
// max / (norm + 1e-6) * (its norm + 1e-6) applies (devmodel's
// ClipShard's, bit for bit), or 1 when max / (norm + 1e-6) is not below
// 1, the norm is not finite or the shard's is 0. No host round trip: all
// on s.
func (k *Kernels) ClipGlobal(s *cuda.Stream, grads uintptr, n int, max float64, ws, sq uintptr) error {
	return k.clipGlobal("ClipGlobal", s, grads, n, max, ws, sq, 0)
}

// ClipGlobalExact is ClipGlobal with the factor float32(max / (norm +
// 1e-6)) itself (train's -clip-grad factor on the CPU, and devmodel
// Stage's ClipGrads'), when that is below 1, the norm finite and the
// part's norm at ws not 0: a pipeline stage's clipping by the norm over
// the stages with no host read.
func (k *Kernels) ClipGlobalExact(s *cuda.Stream, grads uintptr, n int, max float64, ws, sq uintptr) error {
	return k.clipGlobal("ClipGlobalExact", s, grads, n, max, ws, sq, 1)
}

func (k *Kernels) clipGlobal(name string, s *cuda.Stream, grads uintptr, n int, max float64, ws, sq uintptr, exact int32) error {
	if err := sizeErr(name, "n", n); err != nil {
		return err
	}
	if err := k.launch("gd_clip_global", s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(1)}, rw(6, 4), ws, sq, max, exact); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return k.launch("gd_scale_by", s, grid(n), rw(int64(n), int64(n)), grads, int64(n), ws)
}

// Dropout is nn's Dropout in a training graph on n elements: y = x
// float32(1/(1-p)) where nn's mask keeps the element, else 0. The mask
// is nn's, a hash of (seed, run, the element's index in the global
// batch): run is the graph's run count for this step (1 at a graph's
// first step), first the index of x's first element in the global batch
// (nn's Graph.SampleOffset times the values per sample). Bit for bit
// nn's values; the backward is the same call on dy with the same
// arguments. y may be x.
func (k *Kernels) Dropout(s *cuda.Stream, y, x uintptr, n int, p float64, seed uint64, run, first int64) error {
	if err := sizeErr("Dropout", "n", n); err != nil || n == 0 {
		return err
	}
	if p < 0 || p >= 1 {
		return fmt.Errorf("kernels: dropout probability %v not in [0, 1)", p)
	}
	return k.launch("gd_dropout", s, grid(n), rw(int64(n), int64(n)), y, x, int64(n), p, seed, uint64(run), uint64(first), float32(1/(1-p)))
}
