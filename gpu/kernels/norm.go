package kernels

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/rtc"
)

// BatchNormConfig is a batch-norm layer's settings (nn.BNLayer's): C
// channels, PyTorch's momentum (new = (1 - m) old + m batch) and eps.
type BatchNormConfig struct {
	C             int
	Momentum, Eps float64
}

// BatchNormWorkspace is the bytes of device scratch one batch-norm layer
// keeps from its forward pass to its backward pass.
func BatchNormWorkspace(c int) int { return 8 * (6*c + 1) }

func (c BatchNormConfig) check(op string, n, inner int) error {
	if err := sizeErr(op, "N", n, "C", c.C, "inner", inner); err != nil {
		return err
	}
	if n*inner == 0 || c.C == 0 {
		return fmt.Errorf("kernels: %s of %d channels over %d x %d values: empty", op, c.C, n, inner)
	}
	if int64(n)*int64(c.C)*int64(inner) > 1<<40 {
		return fmt.Errorf("kernels: %s: %d x %d x %d values is too many", op, n, c.C, inner)
	}
	return nil
}

// The workspace's float64 arrays: the batch statistics [sum (C), M2 (C),
// count], the mean and 1/std used [C, C], the backward sums [C, C].
func bnParts(ws uintptr, c int) (stats, mi, sums uintptr) {
	return ws, ws + uintptr(8*(2*c+1)), ws + uintptr(8*(4*c+1))
}

// BatchNormForward is nn's BatchNorm2d (x (N, C, inner), inner = H W) or
// BatchNorm1d (inner = 1) on the device, as nn.BNLayer.Forward computes
// it: in training (train), the per-channel sum and the sum of squared
// deviations from the mean (M2) in float64 (a block per channel, a tree
// in a fixed order), the biased variance for normalizing, runMean and
// runVar (float32 [C]) moved toward the batch's mean and unbiased
// variance with PyTorch's momentum; in evaluation, the running statistics.
// y = gamma xhat + beta in float64 rounded once; xhat (float32, for the
// backward pass; 0: not kept) the normalized input. ws
// (BatchNormWorkspace bytes) keeps the statistics for
// BatchNormBackward. The caller counts num_batches_tracked. Within
// BatchNormULP of nn's values.
func (k *Kernels) BatchNormForward(s *cuda.Stream, y, xhat, x, gamma, beta, runMean, runVar, ws uintptr, n, inner int, c BatchNormConfig, train bool) error {
	return k.BatchNormForwardSync(s, y, xhat, x, gamma, beta, runMean, runVar, ws, n, inner, c, train, nil)
}

// BNSync makes batch norm's statistics span ranks (SyncBatchNorm), as
// nn.BNLayer.Sync does on the host: called with stage "forward" and buf
// the device address of this rank's per-channel [sum x (C), M2 (C),
// count] (n = 2C+1 float64s), to be replaced with the union of every
// rank's batch (M2 combined with Chan's formula); with stage "backward"
// and [sum dy (C), sum dy xhat (C)] (n = 2C), to be replaced with their
// sums over the ranks. The values are queued on the stream s: the hook
// orders its work after them (on s, or after synchronizing s) and leaves
// the result ready for the work queued on s after it returns.
type BNSync func(s *cuda.Stream, stage string, buf uintptr, n int) error

// BatchNormForwardSync is BatchNormForward with, in training, the batch
// statistics made to span ranks by sync (nil: this rank's alone) before
// they are used: SyncBatchNorm's forward pass.
func (k *Kernels) BatchNormForwardSync(s *cuda.Stream, y, xhat, x, gamma, beta, runMean, runVar, ws uintptr, n, inner int, c BatchNormConfig, train bool, sync BNSync) error {
	if err := c.check("BatchNormForward", n, inner); err != nil {
		return err
	}
	stats, mi, _ := bnParts(ws, c.C)
	total := int64(n) * int64(c.C) * int64(inner)
	if train {
		// per channel: chunks a block each (count, sum, M2), then the
		// chunks combined in order
		parts, per := chanSplit(c.C, int64(n)*int64(inner))
		pc := int64(parts) * int64(c.C)
		if err := k.withScratch(s, int(24*pc), func(ws uintptr) error {
			cfg := rtc.Config{Grid: rtc.Dim3{X: parts, Y: min(c.C, 65535), Z: 1}, Block: rtc.Dim(Block)}
			if err := k.launch("gd_bn_partial", s, cfg, traffic{4 * total, 24 * pc}, ws, x, int32(n), int32(c.C), int64(inner), per); err != nil {
				return err
			}
			return k.launch("gd_bn_finish", s, grid(c.C), traffic{24 * pc, 16*int64(c.C) + 8}, stats, ws, int32(parts), int32(c.C))
		}); err != nil {
			return err
		}
		if sync != nil {
			if err := sync(s, "forward", stats, 2*c.C+1); err != nil {
				return err
			}
		}
	}
	if err := k.launch("gd_bn_finalize", s, grid(c.C), rw(6*int64(c.C), 6*int64(c.C)), mi, runMean, runVar, stats, int32(c.C), c.Momentum, c.Eps, b32(train)); err != nil {
		return err
	}
	return k.launch("gd_bn_norm"+idx32(total), s, grid64(total), rw(total, 2*total), y, xhat, x, mi, gamma, beta, int32(c.C), int64(inner), total)
}

// BatchNormBackward is batch norm's backward after a training forward
// pass over the same ws, as nn.BNLayer.Backward computes it: the
// per-channel sums of dy and dy xhat in float64 (a block per channel),
// dgamma and dbeta those sums rounded (set, or with accumulate added to;
// 0 skips one), and dx (0: skipped) = gamma/std ((dy - mean dy) - xhat
// mean(dy xhat)) in float64 rounded once. Within BatchNormULP of nn's.
func (k *Kernels) BatchNormBackward(s *cuda.Stream, dx, dgamma, dbeta, dy, xhat, gamma, ws uintptr, n, inner int, c BatchNormConfig, accumulate bool) error {
	return k.BatchNormBackwardSync(s, dx, dgamma, dbeta, dy, xhat, gamma, ws, n, inner, c, accumulate, nil)
}

// BatchNormBackwardSync is BatchNormBackward after a forward pass with
// sync: dgamma and dbeta from this rank's sums (DDP averages them as any
// gradient, as nn's SyncBatchNorm leaves them), dx from the sums over the
// ranks (sync's "backward" stage; nil: this rank's).
func (k *Kernels) BatchNormBackwardSync(s *cuda.Stream, dx, dgamma, dbeta, dy, xhat, gamma, ws uintptr, n, inner int, c BatchNormConfig, accumulate bool, sync BNSync) error {
	if err := c.check("BatchNormBackward", n, inner); err != nil {
		return err
	}
	stats, mi, sums := bnParts(ws, c.C)
	total := int64(n) * int64(c.C) * int64(inner)
	parts, per := chanSplit(c.C, int64(n)*int64(inner))
	pc := int64(parts) * int64(c.C)
	if err := k.withScratch(s, int(16*pc), func(ws uintptr) error {
		cfg := rtc.Config{Grid: rtc.Dim3{X: parts, Y: min(c.C, 65535), Z: 1}, Block: rtc.Dim(Block)}
		if err := k.launch("gd_bn_grad_partial", s, cfg, traffic{8 * total, 16 * pc}, ws, dy, xhat, int32(n), int32(c.C), int64(inner), per); err != nil {
			return err
		}
		return k.launch("gd_bn_grad_finish", s, grid(c.C), traffic{16 * pc, 16 * int64(c.C)}, sums, ws, int32(parts), int32(c.C))
	}); err != nil {
		return err
	}
	if dgamma != 0 || dbeta != 0 {
		if err := k.launch("gd_bn_param_grads", s, grid(c.C), rw(4*int64(c.C), 2*int64(c.C)), dgamma, dbeta, sums, int32(c.C), b32(accumulate)); err != nil {
			return err
		}
	}
	if dx == 0 {
		return nil
	}
	if sync != nil {
		if err := sync(s, "backward", sums, 2*c.C); err != nil {
			return err
		}
	}
	return k.launch("gd_bn_dx"+idx32(total), s, grid64(total), rw(2*total, total), dx, dy, xhat, sums, mi, stats, gamma, int32(c.C), int64(inner), total)
}

// idx32 is "32" when an element-wise loop over n elements can index in
// 32 bits (unsigned: n plus a grid's stride below 2^32), else "".
func idx32(n int64) string {
	if n+maxGrid*256 < 1<<32 {
		return "32"
	}
	return ""
}

// rowsGrid launches a warp per row (8 rows a block), the warps taking
// rows in turn past the grid's size.
func rowsGrid(rows int) rtc.Config {
	return rtc.Config{Grid: rtc.Dim(min(max((rows+7)/8, 1), 8192)), Block: rtc.Dim(256)}
}

func lnCheck(op string, rows, c int) error {
	if err := sizeErr(op, "rows", rows, "C", c); err != nil {
		return err
	}
	if c == 0 || int64(rows)*int64(c) > 1<<40 {
		return fmt.Errorf("kernels: %s of %d rows of %d", op, rows, c)
	}
	return nil
}

// LayerNormForward is nn's LayerNorm over rows of c (x [rows, c]: (N, T,
// C) or (N, C)) on the device, bit for bit nn's: a warp per row, the
// mean and the mean squared deviation in float32 summed in vecmath.Sum32's
// order, 1/std = float32(1 / sqrt(float64(var) + eps)), y = xhat gamma +
// beta with every operation rounded on its own. xhat [rows, c] and invstd
// [rows] keep the normalized rows and 1/std for LayerNormBackward (0: not
// kept). y may be x.
func (k *Kernels) LayerNormForward(s *cuda.Stream, y, xhat, invstd, x, gamma, beta uintptr, rows, c int, eps float64) error {
	return k.LayerNormForwardBF16(s, y, 0, xhat, invstd, x, gamma, beta, rows, c, eps)
}

// LayerNormForwardBF16 is LayerNormForward that also writes y's bf16
// copy into y16 [rows, c] (2 bytes a value; 0: none) as it goes, the
// same bits gpu/gemm's cast gives: for gemm.Engine.Provide, so that the
// Linear reading y (forward, and its weight gradient in backward) casts
// nothing under bf16 autocast. The fp32 outputs are LayerNormForward's.
// y 0 writes the copy alone (and xhat, invstd): for a y that only bf16
// products read (gpu/devmodel keeps no fp32 value of it); y and y16 may
// not both be 0.
func (k *Kernels) LayerNormForwardBF16(s *cuda.Stream, y, y16, xhat, invstd, x, gamma, beta uintptr, rows, c int, eps float64) error {
	if err := lnCheck("LayerNormForward", rows, c); err != nil || rows == 0 {
		return err
	}
	if y == 0 && y16 == 0 {
		return fmt.Errorf("kernels: LayerNormForward with neither y nor its bf16 copy y16: give it one to write")
	}
	t := rw(int64(rows)*int64(c), int64(rows)*int64(c)+int64(rows)) // x; xhat, invstd
	if y != 0 {
		t.w += 4 * int64(rows) * int64(c)
	}
	if y16 != 0 {
		t.w += 2 * int64(rows) * int64(c)
	}
	return k.launch(rowsKernel("gd_layernorm", c), s, rowsGrid(rows), t, y, xhat, invstd, x, gamma, beta, int32(rows), int32(c), 1/float32(c), eps, y16)
}

// LayerNormBackward is LayerNorm's backward from dy [rows, c] and the
// forward pass's xhat and invstd: dx (0: skipped) = 1/std ((g - mean g)
// - xhat mean(g xhat)) with g = dy gamma (a warp per row, Sum32's order),
// bit for bit nn's; dgamma and dbeta (0 skips one) the sums over the rows
// of dy xhat and dy, set or with accumulate added to, within SumTol of
// nn's (which sums the rows in order): for rows of up to 1024 summed in
// dx's pass (layerNormBackwardCols: dy and xhat read once), for longer
// ones in two stages as BiasGrad's. dx may be dy.
func (k *Kernels) LayerNormBackward(s *cuda.Stream, dx, dgamma, dbeta, dy, xhat, invstd, gamma uintptr, rows, c int, accumulate bool) error {
	return k.LayerNormBackwardBF16(s, dx, 0, dgamma, dbeta, dy, xhat, invstd, gamma, rows, c, accumulate)
}

// LayerNormBackwardBF16 is LayerNormBackward that also writes dx's bf16
// copy into dx16 [rows, c] (2 bytes a value; 0: none) as it goes, the
// same bits gpu/gemm's cast gives: for gemm.Engine.Provide (the output
// gradient of the Linear before, through a Residual).
func (k *Kernels) LayerNormBackwardBF16(s *cuda.Stream, dx, dx16, dgamma, dbeta, dy, xhat, invstd, gamma uintptr, rows, c int, accumulate bool) error {
	if err := lnCheck("LayerNormBackward", rows, c); err != nil {
		return err
	}
	if name := lnColsKernel(c); name != "" && rows > 0 && (dgamma != 0 || dbeta != 0) {
		return k.layerNormBackwardCols(s, name, dx, dx16, dgamma, dbeta, dy, xhat, invstd, gamma, rows, c, accumulate)
	}
	if (dgamma != 0 || dbeta != 0) && c > 0 {
		if err := k.colSums(s, dgamma, dbeta, dy, xhat, rows, c, accumulate); err != nil {
			return err
		}
	}
	if dx == 0 || rows == 0 {
		return nil
	}
	t := rw(2*int64(rows)*int64(c)+int64(rows), int64(rows)*int64(c))
	if dx16 != 0 {
		t.w += 2 * int64(rows) * int64(c)
	}
	return k.launch(rowsKernel("gd_layernorm_backward", c), s, rowsGrid(rows), t, dx, dy, xhat, invstd, gamma, int32(rows), int32(c), 1/float32(c), dx16)
}

// lnColsWidths are gd_layernorm_backward_cols' register widths: K
// values a lane, rows of up to 32 K.
var lnColsWidths = []int{2, 4, 8, 16, 24, 32}

// lnColsKernel is the fused LayerNorm backward for rows of c (its
// parameters' gradients summed in the row pass), "" where there is none
// (rows over 1024, or the row kernels told to keep rows in memory).
func lnColsKernel(c int) string {
	if !rowsInRegisters {
		return ""
	}
	for _, k := range lnColsWidths {
		if c <= 32*k {
			return fmt.Sprintf("gd_layernorm_backward_cols_r%d", k)
		}
	}
	return ""
}

// lnColsTarget is the chunks (blocks of 8 warps) the fused LayerNorm
// backward aims at: about 3 a SM of an H100 (132), where the rows allow.
const lnColsTarget = 384

// lnColsSplit is how the fused LayerNorm backward splits rows: parts
// chunks of per rows (a multiple of 8: each of a block's 8 warps takes
// every 8th row of its chunk).
func lnColsSplit(rows int) (parts, per int) {
	per = ((rows+lnColsTarget-1)/lnColsTarget + 7) &^ 7
	return (rows + per - 1) / per, per
}

// layerNormBackwardCols is LayerNormBackwardBF16 with dgamma and dbeta
// summed in the row pass (name: gd_layernorm_backward_cols_rK): each
// block a chunk of rows (lnColsSplit), its 8 warps every 8th row, each
// lane summing dy xhat and dy over its warp's rows in order, the warps'
// sums added in order into the chunk's partial sums (scratch: 2 C a
// chunk), then each column's chunks in a fixed order (gd_col_finish_w:
// a warp a column). dx (0: skipped, the sums in the same order) bit for
// bit the row kernel's; dgamma and dbeta within SumTol (another order
// than BiasGrad's chunks, no longer its bits). dy and xhat are read once,
// not twice.
func (k *Kernels) layerNormBackwardCols(s *cuda.Stream, name string, dx, dx16, dgamma, dbeta, dy, xhat, invstd, gamma uintptr, rows, c int, accumulate bool) error {
	parts, per := lnColsSplit(rows)
	n, pc := int64(rows)*int64(c), 2*int64(parts)*int64(c)
	t := rw(2*n+int64(rows)+int64(c), n+pc)
	if dx == 0 {
		t = rw(2*n, pc)
	}
	if dx16 != 0 {
		t.w += 2 * n
	}
	return k.withScratch(s, int(4*pc), func(ws uintptr) error {
		cfg := rtc.Config{Grid: rtc.Dim(parts), Block: rtc.Dim(256)}
		if err := k.launch(name, s, cfg, t, dx, dy, xhat, invstd, gamma, int32(rows), int32(c), 1/float32(c), dx16, ws, int32(per)); err != nil {
			return err
		}
		// a warp a column of the 2 c, two warps a block
		fin := rtc.Config{Grid: rtc.Dim(c), Block: rtc.Dim(64)}
		return k.launch("gd_col_finish_w", s, fin, rw(pc, 2*int64(c)), dgamma, dbeta, ws, int32(parts), int32(c), b32(accumulate))
	})
}
