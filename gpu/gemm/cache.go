package gemm

import (
	"fmt"
	"os"
	"sort"
)

// EnvAutocastCache, set to "0", turns the bf16 weight cache off in every
// engine made after (as Config.NoWeightCache does for one): for
// comparisons, PyTorch's torch.autocast(cache_enabled=False). "1" or
// unset leaves it on; New refuses any other value.
const EnvAutocastCache = "GDIST_AUTOCAST_CACHE"

// cacheOff reads $GDIST_AUTOCAST_CACHE.
func cacheOff() (bool, error) {
	switch v := os.Getenv(EnvAutocastCache); v {
	case "", "1":
		return false, nil
	case "0":
		return true, nil
	default:
		return false, fmt.Errorf("gemm: $%s=%q: want 0 (the bf16 weight cache off) or 1 (on, the default)", EnvAutocastCache, v)
	}
}

// CastStats counts the values an engine has cast from fp32 to bf16 under
// bf16 autocast through cuBLAS (the tiled kernel rounds as it loads its
// tiles and casts nothing). Each value cast reads 4 bytes and writes 2:
// Bytes is the memory traffic of the casts. Take the difference of two
// readings for a step's.
type CastStats struct {
	// Operands: values cast for one product (or, by KeepNext, two in a
	// row; by Hold, every product until Release): activations,
	// gradients, and weights outside the cache.
	Operands int64
	// Weights: values of registered parameters cast into the weight
	// cache (each once after each WeightsChanged, when a product first
	// reads it).
	Weights int64
	// WeightReuses: values of registered parameters that products read
	// from the cache with no cast: the casts the cache saved.
	WeightReuses int64
}

// Values is the number of values cast.
func (c CastStats) Values() int64 { return c.Operands + c.Weights }

// Bytes is the casts' memory traffic: 4 bytes read and 2 written a value.
func (c CastStats) Bytes() int64 { return 6 * c.Values() }

// Sub is c less an earlier reading o (a step's casts).
func (c CastStats) Sub(o CastStats) CastStats {
	return CastStats{c.Operands - o.Operands, c.Weights - o.Weights, c.WeightReuses - o.WeightReuses}
}

// weights is the registered parameter range [lo, lo + 4 n) and the bf16
// copy of it at buf (2 bytes a value, each at the same index), of which
// the ranges in valid (sorted, disjoint, not touching; in values from lo)
// have been cast since the parameters last changed.
type weights struct {
	off   bool // NoWeightCache
	lo    uintptr
	n     int64
	buf   uintptr
	cap   int // buf's bytes
	valid []span64
}

type span64 struct{ lo, hi int64 }

// Weights registers the n fp32 values at ptr (a model's flat parameter
// buffer: the master weights) with the engine. Under bf16 autocast
// through cuBLAS, a product operand whose span lies inside them is not
// cast for the product: the engine keeps a bf16 copy of the registered
// values (2 n bytes, allocated by the first product that reads one, and
// counted in ScratchBytes), casts each operand's values into it the first
// time a product reads them and serves every later product from it,
// until WeightsChanged. So a weight is cast once per optimizer step,
// however many products read it (a Linear's forward and its backward's
// input gradient, every micro-batch's), as PyTorch's autocast caches
// the cast of a leaf that requires grad for the autocast region.
//
// The caller promises to call WeightsChanged whenever anything but
// these products writes the registered values (an optimizer update, a
// copy from the host, a gather or broadcast into them), with no product
// queued between that call and the write (before or after the write is
// queued, before the next product is), and that the memory stays
// allocated while registered. A product whose output C overlaps the
// registered values drops their copies itself. n 0 unregisters; a new
// registration replaces the last (and forgets its copies). Nothing
// happens in the other precisions, with the tiled kernel, with
// Config.NoWeightCache, or with BF16Cast CastInCUBLAS (nothing is cast).
func (e *Engine) Weights(ptr uintptr, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n <= 0 {
		ptr, n = 0, 0
	}
	e.w.lo, e.w.n = ptr, int64(n) // the buffer, if big enough, is kept
	e.w.valid = e.w.valid[:0]
}

// WeightsChanged says that the registered parameters (Weights) were
// written, or are about to be: the next product that reads one casts it
// again. No product may be queued between this call and the write.
// Cheap (no device work); safe for concurrent use.
func (e *Engine) WeightsChanged() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.valid = e.w.valid[:0]
}

// holds reports whether the n values at p lie inside the registered
// parameters and are served from the cache.
func (w *weights) holds(p uintptr, n int64) bool {
	if w.off || w.n == 0 || n <= 0 || p < w.lo || (p-w.lo)%4 != 0 {
		return false
	}
	i := int64(p-w.lo) / 4
	if i < 0 { // 2^63 bytes or more above lo (registered at a host address, p on the fake's devices): as hold.go's at
		return false
	}
	return i+n <= w.n
}

// at is the bf16 copy of the registered value at p.
func (w *weights) at(p uintptr) uintptr { return w.buf + (p-w.lo)/2 }

// alloc makes the cache's buffer hold the registered values.
func (w *weights) alloc(e *Engine) error {
	need := int(2 * w.n)
	if err := e.regrow(&w.buf, &w.cap, need); err != nil {
		return fmt.Errorf("gemm: %d bytes for the bf16 copies of %d weights (Config.NoWeightCache or %s=0 turns the cache off): %w", need, w.n, EnvAutocastCache, err)
	}
	return nil
}

// cast makes the copies of the n registered values at p valid: the parts
// not cast since the last change are cast now (queued on the stream
// before the product that reads them).
func (w *weights) cast(e *Engine, p uintptr, n int64) error {
	lo := int64(p-w.lo) / 4
	hi := lo + n
	at, before := lo, e.stats.Weights
	// the valid ranges that touch [lo, hi], in order
	i := sort.Search(len(w.valid), func(i int) bool { return w.valid[i].hi >= lo })
	j := i
	for ; j < len(w.valid) && w.valid[j].lo <= hi; j++ {
		v := w.valid[j]
		if v.lo > at {
			if err := e.toBF16(w.buf+uintptr(2*at), w.lo+uintptr(4*at), v.lo-at, &e.stats.Weights); err != nil {
				return err
			}
		}
		at = max(at, v.hi)
	}
	if at < hi {
		if err := e.toBF16(w.buf+uintptr(2*at), w.lo+uintptr(4*at), hi-at, &e.stats.Weights); err != nil {
			return err
		}
	}
	e.stats.WeightReuses += n - (e.stats.Weights - before)
	// merge [lo, hi] with valid[i:j]
	m := span64{lo, hi}
	if i < j {
		m.lo, m.hi = min(m.lo, w.valid[i].lo), max(m.hi, w.valid[j-1].hi)
	}
	w.valid = append(w.valid[:i], append([]span64{m}, w.valid[j:]...)...)
	return nil
}

// written drops the copies of registered values in the n values at c
// (a product's output).
func (w *weights) written(c uintptr, n int64) {
	if w.n == 0 || n <= 0 || len(w.valid) == 0 {
		return
	}
	end := w.lo + uintptr(4*w.n)
	if c >= end || c+uintptr(4*n) <= w.lo {
		return
	}
	// in values from lo, rounded outwards
	lo := (int64(c) - int64(w.lo)) / 4
	if int64(c) < int64(w.lo) {
		lo = 0
	}
	hi := (int64(c) + 4*n - int64(w.lo) + 3) / 4
	out := w.valid[:0:0]
	for _, v := range w.valid {
		if v.hi <= lo || v.lo >= hi {
			out = append(out, v)
			continue
		}
		if v.lo < lo {
			out = append(out, span64{v.lo, lo})
		}
		if v.hi > hi {
			out = append(out, span64{hi, v.hi})
		}
	}
	w.valid = out
}
