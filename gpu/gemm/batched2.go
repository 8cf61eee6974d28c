package gemm

import (
	"fmt"
	"unsafe"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
)

// Strides2 places the matrices of a two-level batch (MatMulBatched2):
// product (o, i), o < outer and i < inner, reads its matrix Outer o +
// Inner i elements from the operand's address.
type Strides2 struct{ Outer, Inner int64 }

// linear is whether the offsets are one stride (Inner) times the
// product's index o inner + i.
func (s Strides2) linear(outer, inner int) bool {
	return outer <= 1 || s.Outer == int64(inner)*s.Inner
}

func (s Strides2) at(o, i int) int64 { return int64(o)*s.Outer + int64(i)*s.Inner }

// PointerBatches reports whether MatMulBatched2 computes a batch whose
// offsets are not linear in its index as one product (cuBLAS's
// cublasGemmBatchedEx over arrays of device pointers); otherwise it is
// one strided batched product per outer index (the tiled kernel, or a
// cuBLAS without cublasGemmBatchedEx), and a caller that can copy its
// operands into a linear layout once may do better.
func (e *Engine) PointerBatches() bool { return e.h != nil && e.h.HasGemmBatchedEx() }

// MatMulBatched2 is MatMulBatched over outer x inner products whose
// matrices are Strides2 apart: product (o, i) reads A at a + sa.Outer o
// + sa.Inner i, B likewise and writes C at c + sc.Outer o + sc.Inner i
// (elements; 0 shares a matrix). Attention's heads read in place are
// such a batch: head h of sequence n of (N T, 3C) rows at n T 3C + h D
// (outer N, inner H), offsets no single stride gives. Where every
// operand's offsets are linear (Outer = inner Inner) and the C matrices
// lie one after another it is one MatMulBatched; otherwise, with PointerBatches, one cublasGemmBatchedEx
// whose arrays of pointers the engine keeps on the device (built once
// for each distinct operand and layout, by a copy from pinned memory on
// the engine's stream, and kept: a model whose buffers stay put builds
// them in its first step only; see ptrCache); else one MatMulBatched per
// o (one per (o, i) where an o's C matrices lie side by side in its
// rows). The C matrices must not overlap.
//
// Under bf16 autocast (cast kernel) an operand inside a held region
// (Hold) is read from its bf16 copy in place, with no cast; any other is
// cast into the scratch, compact (only the values it reads), one launch
// (one per o where its offsets are not linear). Registered weights are
// not looked up (they are cast as any operand). Safe for concurrent use;
// queued on the engine's stream.
func (e *Engine) MatMulBatched2(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa Strides2,
	b uintptr, ldb int, sb Strides2, beta float32, c uintptr, ldc int, sc Strides2, outer, inner int) error {
	if outer < 0 || inner < 0 {
		return fmt.Errorf("gemm: MatMulBatched2 of %d x %d products: want outer and inner >= 0", outer, inner)
	}
	for _, s := range []Strides2{sa, sb, sc} {
		if s.Outer < 0 || s.Inner < 0 {
			return fmt.Errorf("gemm: MatMulBatched2: negative strides (A %+v, B %+v, C %+v): want offsets >= 0 (0 shares a matrix)", sa, sb, sc)
		}
	}
	if err := check(ta, tb, m, n, k, lda, ldb, ldc, 0, 0, 0, 1); err != nil {
		return err
	}
	if err := check2(m, n, ldc, sc, outer, inner); err != nil {
		return err
	}
	if m == 0 || n == 0 || outer == 0 || inner == 0 {
		return nil
	}
	apart := outer*inner == 1 || sc.Inner >= int64(m-1)*int64(ldc)+int64(n) // C matrices one after another
	// (under bf16 casts through cuBLAS the pointer batch below looks
	// operands up in held regions either way: a held (N, T, 3C) region
	// of one sequence holds its heads side by side, which MatMulBatched's
	// look-up, by the region's stride, does not see)
	cast := e.prec == BF16 && e.h != nil && !e.castIn && e.PointerBatches()
	if sa.linear(outer, inner) && sb.linear(outer, inner) && sc.linear(outer, inner) && apart && !cast {
		return e.MatMulBatched(ta, tb, m, n, k, alpha, a, lda, sa.Inner, b, ldb, sb.Inner, beta, c, ldc, sc.Inner, outer*inner)
	}
	if !e.PointerBatches() {
		// one strided batch per o, or, where an o's C matrices lie side
		// by side in its rows (which a strided batch refuses), one
		// product per (o, i)
		per := inner
		if !apart {
			per = 1
		}
		for o := 0; o < outer; o++ {
			for i := 0; i < inner; i += per {
				if err := e.MatMulBatched(ta, tb, m, n, k, alpha, f32at(a, sa.at(o, i)), lda, sa.Inner, f32at(b, sb.at(o, i)), ldb, sb.Inner,
					beta, f32at(c, sc.at(o, i)), ldc, sc.Inner, per); err != nil {
					return err
				}
			}
		}
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keepNext, e.held = 0, kept{} // KeepNext's copy is for the next MatMulBatched only
	cspan := span2(m, n, ldc, sc, outer, inner)
	if err := e.heldWritten(c, cspan); err != nil {
		return err
	}
	e.w.written(c, cspan)
	A, B := matrix2{a, cublas.F32, lda, sa}, matrix2{b, cublas.F32, ldb, sb}
	compute := cublas.Compute32F
	if e.prec == TF32 {
		// as Sgemm under the handle's TF32 math mode: an explicit compute
		// type is not changed by the math mode
		compute = cublas.Compute32FFastTF32
	} else if e.prec == BF16 && e.castIn {
		compute = cublas.Compute32FFast16BF
	} else if e.prec == BF16 && k > 0 {
		ar, ac := rowsCols(ta, m, k)
		br, bc := rowsCols(tb, k, n)
		na, nb := A.castValues(e, ar, ac, outer, inner), B.castValues(e, br, bc, outer, inner)
		bOff := (2*na + 255) &^ 255
		if err := e.grow(int(bOff + 2*nb)); err != nil {
			return err
		}
		var err error
		if A, err = A.bf16(e, e.scratch, ar, ac, outer, inner); err != nil {
			return err
		}
		if B, err = B.bf16(e, e.scratch+uintptr(bOff), br, bc, outer, inner); err != nil {
			return err
		}
	}
	// room for the three arrays in one chunk first: a start-over while
	// getting the second or third would overwrite the first
	if err := e.ptrs.room(e, 3*((8*outer*inner+255)&^255)); err != nil {
		return err
	}
	pa, err := e.ptrs.get(e, A.ptr, A.typ.Size(), A.s, outer, inner)
	if err != nil {
		return err
	}
	pb, err := e.ptrs.get(e, B.ptr, B.typ.Size(), B.s, outer, inner)
	if err != nil {
		return err
	}
	pc, err := e.ptrs.get(e, c, 4, sc, outer, inner)
	if err != nil {
		return err
	}
	// row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
	return e.h.GemmBatchedEx(op(tb), op(ta), n, m, k, alpha, cublas.Matrix{Ptr: pb, Type: B.typ, LD: max(B.ld, 1)},
		cublas.Matrix{Ptr: pa, Type: A.typ, LD: max(A.ld, 1)}, beta, cublas.Matrix{Ptr: pc, Type: cublas.F32, LD: max(ldc, 1)},
		outer*inner, compute)
}

// matrix2 is an operand of a two-level batch as a product reads it: at
// ptr, of type typ, rows ld apart, its matrices s apart.
type matrix2 struct {
	ptr uintptr
	typ cublas.DataType
	ld  int
	s   Strides2
}

// band is the operand as one region of outer matrices Outer apart, each
// rows rows of the inner matrices side by side (where they are: Inner
// at least a matrix's cols, all inside a row of ld), for Hold's lookup.
func (x matrix2) band(rows, cols, outer, inner int) (operand, bool) {
	w := int64(inner-1)*x.s.Inner + int64(cols)
	if inner > 1 && (x.s.Inner < int64(cols) || w > int64(x.ld)) {
		return operand{}, false
	}
	return newOperand(x.ptr, false, rows, int(w), x.ld, x.s.Outer, outer), true
}

// held is where a held region has the operand's bf16 copy (0: none).
func (x matrix2) held(e *Engine, rows, cols, outer, inner int) uintptr {
	if x.s.linear(outer, inner) {
		if p := e.heldAt(newOperand(x.ptr, false, rows, cols, x.ld, x.s.Inner, outer*inner)); p != 0 {
			return p
		}
	}
	if band, ok := x.band(rows, cols, outer, inner); ok {
		return e.heldAt(band)
	}
	return 0
}

// castValues is the values the operand's cast casts (0 where it is held).
func (x matrix2) castValues(e *Engine, rows, cols, outer, inner int) int64 {
	if x.held(e, rows, cols, outer, inner) != 0 {
		return 0
	}
	return int64(outer) * int64(inner) * int64(rows) * int64(cols)
}

// bf16 is the operand's bf16 copy: its held one in place, or a compact
// cast into scratch (rows of cols, matrices rows cols apart, one launch
// for each o where its offsets are not linear).
func (x matrix2) bf16(e *Engine, scratch uintptr, rows, cols, outer, inner int) (matrix2, error) {
	if p := x.held(e, rows, cols, outer, inner); p != 0 {
		return matrix2{p, cublas.BF16, x.ld, x.s}, nil
	}
	rc := int64(rows) * int64(cols)
	y := matrix2{scratch, cublas.BF16, cols, Strides2{Outer: int64(inner) * rc, Inner: rc}}
	if x.s.linear(outer, inner) {
		X := newOperand(x.ptr, false, rows, cols, x.ld, x.s.Inner, outer*inner)
		if X.stride == 0 { // one matrix shared by all
			y.s = Strides2{}
		}
		return y, e.toBF16Strided(scratch, X, cols, rc, &e.stats.Operands)
	}
	if x.s.Inner == 0 { // one matrix an o, shared by its inner products
		y.s.Inner = 0
	}
	for o := 0; o < outer; o++ {
		X := newOperand(f32at(x.ptr, x.s.at(o, 0)), false, rows, cols, x.ld, x.s.Inner, inner)
		if err := e.toBF16Strided(scratch+uintptr(2*int64(o)*y.s.Outer), X, cols, rc, &e.stats.Operands); err != nil {
			return y, err
		}
	}
	return y, nil
}

// f32at is the address n float32s after p.
func f32at(p uintptr, n int64) uintptr { return p + uintptr(4*n) }

// span2 is the values from a two-level batch's first matrix's start to
// its last's end.
func span2(rows, cols, ld int, s Strides2, outer, inner int) int64 {
	if rows == 0 || cols == 0 || outer == 0 || inner == 0 {
		return 0
	}
	return s.at(outer-1, inner-1) + int64(rows-1)*int64(ld) + int64(cols)
}

// check2 refuses C matrices that may overlap: within an o, the inner
// matrices one after another (Inner at least a matrix's span) or side by
// side in the rows; the o's one after another.
func check2(m, n, ldc int, s Strides2, outer, inner int) error {
	if m == 0 || n == 0 {
		return nil
	}
	one := int64(m-1)*int64(ldc) + int64(n)
	ok := inner <= 1 || s.Inner >= one || (s.Inner >= int64(n) && int64(inner-1)*s.Inner+int64(n) <= int64(ldc))
	if ok && outer > 1 {
		ok = s.Outer >= span2(m, n, ldc, Strides2{Inner: s.Inner}, 1, inner)
	}
	if !ok {
		return fmt.Errorf("gemm: MatMulBatched2: the %d x %d products' C matrices (%d x %d, ldc %d) may overlap at strides %+v", outer, inner, m, n, ldc, s)
	}
	return nil
}

// ptrCache keeps, on the device, the arrays of matrix addresses that
// cublasGemmBatchedEx reads: one array for each distinct (address,
// element size, strides, outer, inner), built at its first use by a copy
// from pinned memory on the engine's stream and never written again (its
// contents are a function of its key, so it never goes stale). The
// arrays are packed into chunks of device and pinned memory; past
// ptrCacheLimit bytes the engine waits for its stream and starts over.
type ptrCache struct {
	m      map[ptrKey]uintptr
	chunks []ptrChunk
	cur    int // the chunk being filled
	bytes  int // allocated
}

type ptrKey struct {
	p     uintptr
	es    int
	s     Strides2
	outer int
	inner int
}

type ptrChunk struct {
	dev  uintptr
	host []byte
	used int
}

// ptrChunkBytes is a chunk's size (at least), ptrCacheLimit the most the
// arrays hold before the cache starts over: GPT-2 small's 12 layers at
// batch 8 need about 1.5 MB. (Variables for the tests.)
var (
	ptrChunkBytes = 1 << 20
	ptrCacheLimit = 64 << 20
)

// PointerArrayBytes is the device memory of the arrays of pointers
// MatMulBatched2 keeps (and as much pinned host memory).
func (e *Engine) PointerArrayBytes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ptrs.bytes
}

// get is the device address of the array of the outer x inner matrix
// addresses p + es (Outer o + Inner i).
func (c *ptrCache) get(e *Engine, p uintptr, es int, s Strides2, outer, inner int) (uintptr, error) {
	k := ptrKey{p: p, es: es, s: s, outer: outer, inner: inner}
	if a, ok := c.m[k]; ok {
		return a, nil
	}
	n := 8 * outer * inner
	if err := c.room(e, n); err != nil {
		return 0, err
	}
	ch := &c.chunks[c.cur]
	buf := ch.host[ch.used : ch.used+n]
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			v := uint64(p) + uint64(es)*uint64(s.at(o, i))
			j := 8 * (o*inner + i)
			*(*uint64)(unsafe.Pointer(&buf[j])) = v
		}
	}
	dst := ch.dev + uintptr(ch.used)
	var err error
	if e.s != nil {
		err = e.s.CopyAsync(dst, uintptr(unsafe.Pointer(&buf[0])), n, cuda.HostToDevice)
	} else {
		err = cuda.CopyHtoD(e.dev, dst, buf)
	}
	if err != nil {
		return 0, fmt.Errorf("gemm: a batch's pointer array: %w", err)
	}
	ch.used += (n + 255) &^ 255
	if c.m == nil {
		c.m = map[ptrKey]uintptr{}
	}
	c.m[k] = dst
	return dst, nil
}

// room makes n bytes free in the current chunk: the next chunk, a new
// one, or (past ptrCacheLimit) the first again once the stream is done.
func (c *ptrCache) room(e *Engine, n int) error {
	need := (n + 255) &^ 255
	for ; c.cur < len(c.chunks); c.cur++ {
		if ch := &c.chunks[c.cur]; len(ch.host)-ch.used >= need {
			return nil
		}
	}
	size := max(ptrChunkBytes, need)
	if c.bytes+size > ptrCacheLimit && len(c.chunks) > 0 {
		if e.s != nil {
			if err := e.s.Synchronize(); err != nil {
				return err
			}
		} else if err := cuda.DeviceSynchronize(e.dev); err != nil {
			return err
		}
		clear(c.m)
		for i := range c.chunks {
			c.chunks[i].used = 0
		}
		for c.cur = 0; c.cur < len(c.chunks); c.cur++ {
			if len(c.chunks[c.cur].host) >= need {
				return nil
			}
		}
	}
	d, err := cuda.Malloc(e.dev, size)
	if err != nil {
		return fmt.Errorf("gemm: %d bytes for pointer arrays: %w", size, err)
	}
	h, err := cuda.HostAlloc(e.dev, size)
	if err != nil {
		cuda.Free(e.dev, d)
		return fmt.Errorf("gemm: %d bytes of pinned memory for pointer arrays: %w", size, err)
	}
	c.chunks = append(c.chunks, ptrChunk{dev: d, host: h})
	c.cur = len(c.chunks) - 1
	c.bytes += size
	return nil
}

// free releases the chunks (the stream done with them: Close).
func (c *ptrCache) free(dev int) error {
	var err error
	for _, ch := range c.chunks {
		if ferr := cuda.Free(dev, ch.dev); err == nil {
			err = ferr
		}
		if ferr := cuda.FreeHost(dev, ch.host); err == nil {
			err = ferr
		}
	}
	*c = ptrCache{}
	return err
}
