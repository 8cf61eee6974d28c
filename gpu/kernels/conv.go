package kernels

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/rtc"
)

// ConvGeom is one 2-d convolution's sizes, nn's Conv2d in NCHW: input x
// (N, C, H, W), filter w (Cout, C, K, K) (PyTorch's layout, as nn keeps
// it), bias (Cout), zero padding Pad on every side, stride Stride (0: 1;
// nn's Conv2d has stride 1), output y (N, Cout, Ho, Wo) with Ho =
// (H + 2 Pad - K) / Stride + 1 (likewise Wo).
type ConvGeom struct {
	N, C, H, W, Cout, K, Pad, Stride int
}

func (g ConvGeom) stride() int {
	if g.Stride == 0 {
		return 1
	}
	return g.Stride
}

// Out is the output's height and width.
func (g ConvGeom) Out() (ho, wo int) {
	s := g.stride()
	return (g.H+2*g.Pad-g.K)/s + 1, (g.W+2*g.Pad-g.K)/s + 1
}

// ckk is the rows of the unrolled input, C K K; cols its columns, N Ho Wo.
func (g ConvGeom) ckk() int { return g.C * g.K * g.K }
func (g ConvGeom) cols() int {
	ho, wo := g.Out()
	return g.N * ho * wo
}

// Workspace is the float32 elements of device scratch that
// Conv2dForward and Conv2dBackward need: the unrolled input (C K K rows
// of N Ho Wo) and the output gradient as (Cout, N, Ho Wo). Several
// convolutions may share one workspace (of the largest size) when they
// run on one stream.
func (g ConvGeom) Workspace() int { return (g.ckk() + g.Cout) * g.cols() }

func (g ConvGeom) check(op string) error {
	if err := sizeErr(op, "N", g.N, "C", g.C, "H", g.H, "W", g.W, "Cout", g.Cout, "K", g.K, "Pad", g.Pad, "Stride", g.Stride); err != nil {
		return err
	}
	ho, wo := g.Out()
	if g.K < 1 || g.C < 1 || g.Cout < 1 || g.stride() < 1 || g.H+2*g.Pad < g.K || g.W+2*g.Pad < g.K || ho < 1 || wo < 1 {
		return fmt.Errorf("kernels: %s: kernel %d, padding %d, stride %d, %d to %d channels: no output for a %dx%d input", op, g.K, g.Pad, g.stride(), g.C, g.Cout, g.H, g.W)
	}
	if g.Workspace() > 1<<31-1 || g.N*g.C*g.H*g.W > 1<<31-1 || g.N*g.Cout*ho*wo > 1<<31-1 {
		return fmt.Errorf("kernels: %s: %+v is too large (split the batch)", op, g)
	}
	return nil
}

// inSize is the input's float32s, N C H W.
func (g ConvGeom) inSize() int64 { return int64(g.N) * int64(g.C) * int64(g.H) * int64(g.W) }

func (g ConvGeom) args() []any {
	ho, wo := g.Out()
	return []any{int32(g.N), int32(g.C), int32(g.H), int32(g.W), int32(g.K), int32(g.Pad), int32(g.stride()), int32(ho), int32(wo)}
}

// im2col unrolls x into col ([C K K, N Ho Wo]) on s.
func (k *Kernels) im2col(s *cuda.Stream, col, x uintptr, g ConvGeom) error {
	n := int64(g.ckk()) * int64(g.cols())
	return k.launch("gd_im2col", s, grid64(n), rw(g.inSize(), n), append([]any{col, x}, g.args()...)...)
}

// betaOf is a product's beta: 1 adds to the output (accumulate), 0 sets it.
func betaOf(accumulate bool) float32 {
	if accumulate {
		return 1
	}
	return 0
}

// sameDevice refuses a cuBLAS handle and kernels of different devices.
func sameDevice(h Products, k *Kernels) error {
	if h.Device() != k.dev {
		return fmt.Errorf("kernels: a cuBLAS handle of cuda:%d with kernels of cuda:%d", h.Device(), k.dev)
	}
	return nil
}

// Conv2dForward is nn's Conv2d on the device: y = w * x + b (b 0: no
// bias), over ws (g.Workspace() float32s of scratch): the batch unrolled
// into ws by im2col ([C K K, N Ho Wo]), then one cuBLAS batched product
// per image (y[n] = W [Cout, C K K] times image n's columns), written in
// NCHW, and the bias added per channel. On h's stream.
func Conv2dForward(h Products, k *Kernels, y, x, w, b, ws uintptr, g ConvGeom) error {
	if err := sameDevice(h, k); err != nil {
		return err
	}
	if err := g.check("Conv2dForward"); err != nil {
		return err
	}
	s := h.Stream()
	ho, wo := g.Out()
	howo, ckk, cols := ho*wo, g.ckk(), g.cols()
	if err := k.im2col(s, ws, x, g); err != nil {
		return err
	}
	if err := h.MatMulBatched(false, false, g.Cout, howo, ckk, 1, w, ckk, 0, ws, cols, int64(howo), 0, y, howo, int64(g.Cout*howo), g.N); err != nil {
		return err
	}
	if b == 0 {
		return nil
	}
	n := int64(g.N) * int64(g.Cout) * int64(howo)
	return k.launch("gd_channel_bias", s, grid64(n), rw(n+int64(g.Cout), n), y, b, int32(n), int32(g.Cout), int32(howo))
}

// Conv2dBackward is Conv2d's backward from dy (N, Cout, Ho, Wo), over ws:
// dy as (Cout, N Ho Wo) (D) and the input unrolled again (X, [C K K,
// N Ho Wo]); dw = D X^T and db = the row sums of D (set, or with
// accumulate added to; db 0 skips it), and, unless dx is 0 (a network's
// input), dx = col2im(W^T D) (set). Each is one cuBLAS product over the
// whole batch or one deterministic kernel. On h's stream.
func Conv2dBackward(h Products, k *Kernels, dx, dw, db, x, w, dy, ws uintptr, g ConvGeom, accumulate bool) error {
	if err := sameDevice(h, k); err != nil {
		return err
	}
	if err := g.check("Conv2dBackward"); err != nil {
		return err
	}
	s := h.Stream()
	ho, wo := g.Out()
	howo, ckk, cols := ho*wo, g.ckk(), g.cols()
	col, d := ws, ws+uintptr(4*ckk*cols)
	if err := k.im2col(s, col, x, g); err != nil {
		return err
	}
	ny := int64(g.Cout) * int64(cols)
	if err := k.launch("gd_nchw_to_cnhw", s, grid64(ny), rw(ny, ny), d, dy, int32(g.N), int32(g.Cout), int32(howo)); err != nil {
		return err
	}
	beta := betaOf(accumulate)
	if dx != 0 {
		keepNext(h, d) // D is read by both products (rowSum only reads it)
	}
	if err := h.MatMul(false, true, g.Cout, ckk, cols, 1, d, col, beta, dw); err != nil {
		return err
	}
	if db != 0 {
		if err := k.rowSum(s, db, d, g.Cout, cols, accumulate); err != nil {
			return err
		}
	}
	if dx == 0 {
		return nil
	}
	if err := h.MatMul(true, false, ckk, cols, g.Cout, 1, w, d, 0, col); err != nil {
		return err
	}
	return k.launch("gd_col2im", s, grid64(g.inSize()), rw(int64(ckk)*int64(cols), g.inSize()), append([]any{dx, col}, g.args()...)...)
}

// rowSum sets (or adds to) out [rows] the sums of the rows of x [rows,
// cols] in two stages, in a fixed order: chunks of each row (chanSplit's)
// a block each, a tree in a fixed order (gd_row_partial), then each
// row's chunks in order (gd_col_finish).
func (k *Kernels) rowSum(s *cuda.Stream, out, x uintptr, rows, cols int, accumulate bool) error {
	if rows == 0 {
		return nil
	}
	parts, per := chanSplit(rows, int64(cols))
	pr := int64(parts) * int64(rows)
	return k.withScratch(s, int(4*pr), func(ws uintptr) error {
		cfg := rtc.Config{Grid: rtc.Dim3{X: parts, Y: min(rows, 65535), Z: 1}, Block: rtc.Dim(Block)}
		if err := k.launch("gd_row_partial", s, cfg, rw(int64(rows)*int64(cols), pr), ws, x, int32(rows), int64(cols), per); err != nil {
			return err
		}
		return k.launch("gd_col_finish", s, grid(rows), rw(pr, int64(rows)), out, uintptr(0), ws, uintptr(0), int32(parts), int32(rows), b32(accumulate))
	})
}

// chanSplit is how the per-row and per-channel sums split each row's m
// values: parts chunks of per (at least 1024 values a chunk of a block of
// 256 threads), so that rows x parts blocks reach colTarget where m
// allows. rows x parts <= colTarget + rows.
func chanSplit(rows int, m int64) (parts int, per int64) {
	parts = int(max(1, min(int64((colTarget+rows-1)/rows), (m+1023)/1024)))
	per = max((m+int64(parts)-1)/int64(parts), 1)
	return int(max((m+per-1)/per, 1)), per
}

func b32(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// MaxPool2d is nn's MaxPool2d (2x2, stride 2): y (planes, H/2, W/2) the
// maxima of the windows of x (planes, H, W) (planes = N C; an odd last
// row or column dropped, as PyTorch's floor mode), compared as nn does
// (the first maximum in row-major order among equals, -0 below +0, NaNs
// by their sign), and arg (one byte per output) which of its window's
// inputs each is, for MaxPool2dBackward. Bit for bit nn's.
func (k *Kernels) MaxPool2d(s *cuda.Stream, y, arg, x uintptr, planes, h, w int) error {
	if err := sizeErr("MaxPool2d", "planes", planes, "H", h, "W", w); err != nil {
		return err
	}
	if h < 2 || w < 2 {
		return fmt.Errorf("kernels: MaxPool2d of %dx%d planes: want 2x2 or more", h, w)
	}
	if err := poolSize("MaxPool2d", planes, h, w); err != nil {
		return err
	}
	n := int64(planes) * int64(h/2) * int64(w/2)
	if n == 0 {
		return nil
	}
	return k.launch("gd_maxpool2x2", s, grid64(n), traffic{16 * n, 5 * n}, y, arg, x, int32(planes), int32(h), int32(w))
}

// poolSize refuses an input of 2^31 elements or more (the kernels index
// in 32 bits).
func poolSize(op string, planes, h, w int) error {
	if int64(planes)*int64(h)*int64(w) > 1<<31-1 {
		return fmt.Errorf("kernels: %s of %d planes of %dx%d: 2^31 elements or more (split the batch)", op, planes, h, w)
	}
	return nil
}

// MaxPool2dBackward sets every element of dx (planes, H, W): dy at the
// input each output came from (arg, from MaxPool2d), 0 elsewhere (the
// dropped row and column included). Bit for bit nn's.
func (k *Kernels) MaxPool2dBackward(s *cuda.Stream, dx, dy, arg uintptr, planes, h, w int) error {
	if err := sizeErr("MaxPool2dBackward", "planes", planes, "H", h, "W", w); err != nil {
		return err
	}
	if h < 2 || w < 2 {
		return fmt.Errorf("kernels: MaxPool2dBackward of %dx%d planes: want 2x2 or more", h, w)
	}
	if err := poolSize("MaxPool2dBackward", planes, h, w); err != nil {
		return err
	}
	n := int64(planes) * int64(h) * int64(w)
	if n == 0 {
		return nil
	}
	return k.launch("gd_maxpool2x2_backward", s, grid64(n), traffic{5 * n / 4, 4 * n}, dx, dy, arg, int32(planes), int32(h), int32(w))
}
