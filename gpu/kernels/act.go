package kernels

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/rtc"
)

// GELU sets y = x Phi(x) (nn's GELU: the exact form, Phi the standard
// normal CDF) over n elements, bit for bit what nn computes with
// vecmath's kernel (its float32 Mills-ratio formula, nn's constants,
// fused multiply-adds where it fuses): nn's output wherever nn uses the
// kernel (all but the last len%8 of an op's input, where nn's float64
// table is within GELUTailTol). y may be x.
func (k *Kernels) GELU(s *cuda.Stream, y, x uintptr, n int) error {
	return k.GELUBF16(s, y, 0, x, n)
}

// GELUBF16 is GELU that also writes y's bf16 copy into y16 (n values of
// 2 bytes; 0: none) as it goes, the same bits gpu/gemm's cast gives: for
// gemm.Engine.Provide, so that the Linear reading y casts nothing of it
// under bf16 autocast. y is GELU's; y 0 writes the copy alone (a y that
// only bf16 products read: gpu/devmodel keeps no fp32 value of it); y
// and y16 may not both be 0.
func (k *Kernels) GELUBF16(s *cuda.Stream, y, y16, x uintptr, n int) error {
	if err := sizeErr("GELU", "n", n); err != nil || n == 0 {
		return err
	}
	if y == 0 && y16 == 0 {
		return fmt.Errorf("kernels: GELU with neither y nor its bf16 copy y16: give it one to write")
	}
	t := rw(int64(n), 0)
	if y != 0 {
		t.w += 4 * int64(n)
	}
	if y16 != 0 {
		t.w += 2 * int64(n)
	}
	return k.launch("gd_gelu", s, grid(n), t, y, x, int64(n), y16)
}

// GELUBackward sets dx = dy gelu'(x), the derivative Phi(x) + x phi(x)
// computed again from GELU's input x as GELU computes it (nn keeps it
// from the forward pass: the same bits). dx may be dy.
func (k *Kernels) GELUBackward(s *cuda.Stream, dx, dy, x uintptr, n int) error {
	return k.GELUBackwardBF16(s, dx, 0, dy, x, n)
}

// GELUBackwardBF16 is GELUBackward that also writes dx's bf16 copy into
// dx16 (n values of 2 bytes; 0: none) as it goes, as ReLUBackwardBF16.
func (k *Kernels) GELUBackwardBF16(s *cuda.Stream, dx, dx16, dy, x uintptr, n int) error {
	if err := sizeErr("GELUBackward", "n", n); err != nil || n == 0 {
		return err
	}
	t := rw(2*int64(n), int64(n))
	if dx16 != 0 {
		t.w += 2 * int64(n)
	}
	return k.launch("gd_gelu_backward", s, grid(n), t, dx, dy, x, int64(n), dx16)
}

func embedCheck(op string, rows, num, dim, t int) error {
	if err := sizeErr(op, "rows", rows, "num", num, "dim", dim, "T", t); err != nil {
		return err
	}
	if num == 0 || dim == 0 || t == 0 || rows%t != 0 || int64(rows)*int64(dim) > 1<<40 || int64(num)*int64(dim) > 1<<40 {
		return fmt.Errorf("kernels: %s of %d rows (%d positions) from a table of %d x %d", op, rows, t, num, dim)
	}
	return nil
}

// embedIO is what Embedding moves: the ids, the table's rows (at most
// the table), the positions, the output.
func embedIO(rows, num, dim, t int, pos bool) traffic {
	r := int64(rows) + int64(min(rows, num))*int64(dim)
	if pos {
		r += int64(t) * int64(dim)
	}
	return rw(r, int64(rows)*int64(dim))
}

// Embedding is nn's Embedding, with nn's PositionEmbedding when pos is
// not 0: y [rows, dim] = w[ids[r]] (+ pos[r % t]), ids [rows] the token
// ids as float32 (nn's input: (N, T) samples, rows = N T), w [num, dim],
// pos [t, dim]; bit for bit nn's (one float32 add). An id that is not an
// integer in [0, num) gives a row of NaNs (nn refuses it), so that the
// loss shows it.
func (k *Kernels) Embedding(s *cuda.Stream, y, ids, w, pos uintptr, rows, num, dim, t int) error {
	if err := embedCheck("Embedding", rows, num, dim, t); err != nil || rows == 0 {
		return err
	}
	name, v := "gd_embed", 1
	if aligned4([]uintptr{y, w, pos}, dim) {
		name, v = "gd_embed4", 4
	}
	return k.launch(name, s, rowGrid(rows, dim, v), embedIO(rows, num, dim, t, pos != 0), y, ids, w, pos, int32(rows), int32(num), int32(dim), int32(t))
}

// EmbeddingBackward is their backward from dy [rows, dim]: dw [num, dim]
// (0: skipped) each row the sum of dy over the rows whose id names it, in
// order, and dpos [t, dim] (0: skipped) the sum of dy over the batch, in
// order, set or with accumulate added to; bit for bit nn's. No atomics,
// and work in rows dim + num dim (not rows num): the rows are sorted by
// id first (a stable radix sort on the device, embedSortPasses passes of
// embedRadixBits bits, in the stream's scratch: embedScratch bytes), then
// a warp per table row and 32 of its values adds that row's dy rows in
// increasing order (rows.cu). A row whose id names no table row adds to
// none (Embedding gives it NaNs). The rows of the most frequent id are
// one thread's serial sum (nn's order), so a skewed batch waits for it.
func (k *Kernels) EmbeddingBackward(s *cuda.Stream, dw, dpos, dy, ids uintptr, rows, num, dim, t int, accumulate bool) error {
	if err := embedCheck("EmbeddingBackward", rows, num, dim, t); err != nil {
		return err
	}
	if dw != 0 {
		if err := k.embedWeightGrad(s, dw, dy, ids, rows, num, dim, accumulate); err != nil {
			return err
		}
	}
	if dpos == 0 {
		return nil
	}
	return k.launch("gd_pos_backward", s, grid64(int64(t)*int64(dim)), rw(int64(rows)*int64(dim), int64(t)*int64(dim)), dpos, dy, int32(rows/t), int32(t), int32(dim), b32(accumulate))
}

// embedRadixBits is the digit of the embedding gradient's sort
// (EMBED_RADIX_BITS in rows.cu, which Programs defines from it): a
// block's counts of each digit for each of its warps are in shared
// memory (Block / 32 x 2^embedRadixBits ints).
const embedRadixBits = 8

// embedSortPasses is the sort's passes for a table of num rows: one a
// digit of num - 1 (at least one).
func embedSortPasses(num int) int {
	p := 0
	for v := num - 1; v > 0; v >>= embedRadixBits {
		p++
	}
	return max(p, 1)
}

// embedSortBlocks caps the sort's blocks: past it a block takes several
// rounds of Block rows, so that the blocks' digit counts, which one block
// scans, stay at most embedSortBlocks x 2^embedRadixBits ints (512 KiB,
// read and written: the audit's 1 MiB) however many the rows, while a
// sort of that many rows still has about 4 blocks an SM of an H100.
const embedSortBlocks = 512

// embedSortGrid is the sort's blocks for rows rows and its rounds of
// Block rows (rows.cu's embed_rounds shares them out).
func embedSortGrid(rows int) (blocks, rounds int) {
	rounds = max(1, (rows+Block-1)/Block)
	return min(rounds, embedSortBlocks), rounds
}

// embedScratch is the bytes of the sort's scratch for rows rows: two
// key and position arrays (each pass reads one pair, writes the other)
// and the blocks' digit counts.
func embedScratch(rows int) int64 {
	return 4 * (4*int64(rows) + embedHist(rows))
}

// embedHist is the blocks' digit counts (ints).
func embedHist(rows int) int64 {
	blocks, _ := embedSortGrid(rows)
	return int64(blocks) << embedRadixBits
}

// embedWeightGrad is EmbeddingBackward's dw: the sort, then the sums.
func (k *Kernels) embedWeightGrad(s *cuda.Stream, dw, dy, ids uintptr, rows, num, dim int, accumulate bool) error {
	r, n := int64(rows), int64(num)*int64(dim)
	// the sums: dy once, the sorted positions and keys (each table row's
	// bounds searched in the keys: cached, counted once), dw (read too
	// when accumulating)
	sums := rw(r*int64(dim)+2*r, n)
	if accumulate {
		sums.r += 4 * n
	}
	rowsCfg := rtc.Config{Grid: rtc.Dim3{X: (dim + 31) / 32, Y: min((num+Block/32-1)/(Block/32), 65535), Z: 1}, Block: rtc.Dim3{X: 32, Y: Block / 32, Z: 1}}
	if rows == 0 {
		return k.launch("gd_embed_rows", s, rowsCfg, sums, dw, dy, ids, uintptr(0), uintptr(0), int32(0), int32(num), int32(dim), b32(accumulate))
	}
	blocks, rounds := embedSortGrid(rows)
	hist := embedHist(rows)
	cfg := rtc.Config{Grid: rtc.Dim(blocks), Block: rtc.Dim(Block)}
	return k.withScratch(s, int(embedScratch(rows)), func(ws uintptr) error {
		a, b := [2]uintptr{ws, ws + uintptr(4*r)}, [2]uintptr{ws + uintptr(8*r), ws + uintptr(12*r)} // keys, positions
		h := ws + uintptr(16*r)
		in := [2]uintptr{} // pass 0 reads the ids
		out := a
		for p := range embedSortPasses(num) {
			shift := int32(p * embedRadixBits)
			inR := r // the ids, or the keys and positions
			if p > 0 {
				inR = 2 * r
			}
			if err := k.launch("gd_embed_hist", s, cfg, rw(r, hist), h, ids, in[0], int32(rows), int32(num), shift, int32(rounds)); err != nil {
				return err
			}
			if err := k.launch("gd_embed_scan", s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(Block)}, rw(hist, hist), h, int32(hist)); err != nil {
				return err
			}
			if err := k.launch("gd_embed_scatter", s, cfg, rw(inR+hist, 2*r), out[0], out[1], h, ids, in[0], in[1], int32(rows), int32(num), shift, int32(rounds)); err != nil {
				return err
			}
			in = out
			if out == a {
				out = b
			} else {
				out = a
			}
		}
		return k.launch("gd_embed_rows", s, rowsCfg, sums, dw, dy, ids, in[0], in[1], int32(rows), int32(num), int32(dim), b32(accumulate))
	})
}

// Add sets y = a + b over n elements: nn's Residual (x + fn(x)), and in
// its backward the sum of the gradients of its two paths; one float32
// add, bit for bit nn's. y may be a or b.
func (k *Kernels) Add(s *cuda.Stream, y, a, b uintptr, n int) error {
	return k.AddBF16(s, y, 0, a, b, n)
}

// AddBF16 is Add that also writes y's bf16 copy into y16 (n values of 2
// bytes; 0: none) as it goes, the same bits gpu/gemm's cast gives: for
// gemm.Engine.Provide (a Residual's input gradient, which is the output
// gradient of the Linear that ends the Residual before).
func (k *Kernels) AddBF16(s *cuda.Stream, y, y16, a, b uintptr, n int) error {
	if err := sizeErr("Add", "n", n); err != nil || n == 0 {
		return err
	}
	name, g := "gd_add", grid(n)
	if aligned4([]uintptr{y, a, b}) {
		name, g = "gd_add4", grid((n+3)/4)
	}
	t := rw(2*int64(n), int64(n))
	if y16 != 0 {
		t.w += 2 * int64(n)
	}
	return k.launch(name, s, g, t, y, a, b, int64(n), y16)
}

// Tanh sets y = tanh(x) over n elements (nn's Tanh): the device's tanhf,
// within TanhTol of nn's float32 tanh (chewxy/math32's). y may be x.
func (k *Kernels) Tanh(s *cuda.Stream, y, x uintptr, n int) error {
	if err := sizeErr("Tanh", "n", n); err != nil || n == 0 {
		return err
	}
	return k.launch("gd_tanh", s, grid(n), rw(int64(n), int64(n)), y, x, int64(n))
}

// TanhBackward sets dx = (1 - y^2) dy from Tanh's output y: gorgonia's
// gradient operation for operation, so bit for bit nn's given the same
// y. dx may be dy.
func (k *Kernels) TanhBackward(s *cuda.Stream, dx, dy, y uintptr, n int) error {
	if err := sizeErr("TanhBackward", "n", n); err != nil || n == 0 {
		return err
	}
	return k.launch("gd_tanh_backward", s, grid(n), rw(2*int64(n), int64(n)), dx, dy, y, int64(n))
}

// PositionEmbedding is nn's PositionEmbedding on its own (not right after
// an Embedding): y [rows, dim] = x + pos[r % t] for (N, T, dim) input x,
// rows = N T, pos [t, dim]; one float32 add, bit for bit nn's. y may be
// x. Its backward passes dy through to x's gradient and sums dy over the
// batch into pos's: PositionEmbeddingBackward.
func (k *Kernels) PositionEmbedding(s *cuda.Stream, y, x, pos uintptr, rows, dim, t int) error {
	if err := embedCheck("PositionEmbedding", rows, 1, dim, t); err != nil || rows == 0 {
		return err
	}
	n := int64(rows) * int64(dim)
	return k.launch("gd_add_rows", s, grid64(n), rw(n+int64(t)*int64(dim), n), y, x, pos, n, int64(t)*int64(dim))
}

// PositionEmbeddingBackward sets dpos [t, dim] to the sum of dy [rows,
// dim] over the batch, in order (with accumulate adds it): bit for bit
// nn's, as EmbeddingBackward's position part.
func (k *Kernels) PositionEmbeddingBackward(s *cuda.Stream, dpos, dy uintptr, rows, dim, t int, accumulate bool) error {
	return k.EmbeddingBackward(s, 0, dpos, dy, 0, rows, 1, dim, t, accumulate)
}

// BiasGELU sets y [rows, cols] = GELU(x + bias): the bias add of the
// Linear whose product is x and the GELU after it in one pass, bit for
// bit BiasAdd then GELU (the same float32 add, the same GELU), moving
// 2 rows cols values instead of 4. x stays the product without its bias
// (BiasGELUBackward reads it); y must not be x. y16 (0: none) gets y's
// bf16 copy as GELUBF16's; y 0 writes the copy alone, as GELUBF16's.
func (k *Kernels) BiasGELU(s *cuda.Stream, y, y16, x, bias uintptr, rows, cols int) error {
	if err := sizeErr("BiasGELU", "rows", rows, "cols", cols); err != nil {
		return err
	}
	if y == 0 && y16 == 0 {
		return fmt.Errorf("kernels: BiasGELU with neither y nor its bf16 copy y16: give it one to write")
	}
	if y == x {
		return fmt.Errorf("kernels: BiasGELU: y is x (x, the product without its bias, is read again by BiasGELUBackward: give y its own buffer)")
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	name, v := "gd_bias_gelu", 1
	if aligned4([]uintptr{y, x, bias}, cols) {
		name, v = "gd_bias_gelu4", 4
	}
	n := int64(rows) * int64(cols)
	t := rw(n+int64(cols), 0)
	if y != 0 {
		t.w += 4 * n
	}
	if y16 != 0 {
		t.w += 2 * n
	}
	return k.launch(name, s, rowGrid(rows, cols, v), t, y, x, bias, int32(rows), int32(cols), y16)
}

// BiasGELUBackward is BiasGELU's backward from dy [rows, cols]: dx =
// dy GELU'(x + bias) (GELUBackward's, x the product without its bias;
// bias 0: x is GELU's input as it is) and dbias (0: skipped) the column
// sums of dx, set or with accumulate added to: the gradients of the GELU
// and of the Linear's bias in one pass over dy and x, bit for bit
// GELUBackward then BiasGrad (the column sums in BiasGrad's chunks and
// order), without reading dx again. dx16 (0: none) gets dx's bf16 copy
// as GELUBackwardBF16's. dx may be dy.
func (k *Kernels) BiasGELUBackward(s *cuda.Stream, dx, dx16, dbias, dy, x, bias uintptr, rows, cols int, accumulate bool) error {
	if err := sizeErr("BiasGELUBackward", "rows", rows, "cols", cols); err != nil {
		return err
	}
	if cols == 0 || (rows == 0 && dbias == 0) {
		return nil
	}
	parts, per := colSplit(rows, cols)
	cfg := rtc.Config{Grid: rtc.Dim3{X: (cols + 31) / 32, Y: parts, Z: 1}, Block: rtc.Dim3{X: 32, Y: 8, Z: 1}}
	n := int64(rows) * int64(cols)
	t := rw(2*n+int64(cols), n)
	if dx16 != 0 {
		t.w += 2 * n
	}
	if dbias == 0 || parts == 1 {
		if dbias != 0 {
			t.w += 4 * int64(cols)
		}
		return k.launch("gd_gelu_bias_backward", s, cfg, t, dx, dx16, dbias, dy, x, bias, int32(rows), int32(cols), int32(per), b32(accumulate))
	}
	pc := int64(parts) * int64(cols)
	t.w += 4 * pc
	return k.withScratch(s, int(4*pc), func(ws uintptr) error {
		if err := k.launch("gd_gelu_bias_backward", s, cfg, t, dx, dx16, ws, dy, x, bias, int32(rows), int32(cols), int32(per), int32(0)); err != nil {
			return err
		}
		return k.launch("gd_col_finish", s, grid(cols), rw(pc, int64(cols)), dbias, uintptr(0), ws, uintptr(0), int32(parts), int32(cols), b32(accumulate))
	})
}

// BiasAddResidual sets y [rows, cols] = x + (f + bias): a Residual's add
// (x + fn(x)) with the bias of the Linear that ends fn (f its product
// without the bias) added first, in one pass: bit for bit BiasAdd then
// Add (the same two float32 adds in their order), moving 3 rows cols
// values instead of 5. f stays as it is; y may be x.
func (k *Kernels) BiasAddResidual(s *cuda.Stream, y, x, f, bias uintptr, rows, cols int) error {
	if err := sizeErr("BiasAddResidual", "rows", rows, "cols", cols); err != nil || rows == 0 || cols == 0 {
		return err
	}
	name, v := "gd_bias_residual", 1
	if aligned4([]uintptr{y, x, f, bias}, cols) {
		name, v = "gd_bias_residual4", 4
	}
	n := int64(rows) * int64(cols)
	return k.launch(name, s, rowGrid(rows, cols, v), rw(2*n+int64(cols), n), y, x, f, bias, int32(rows), int32(cols))
}
