// Package commtest holds what every backend's tests share: a harness that
// runs N ranks as goroutines (the first error cancels the rest, and nothing
// can hang past a deadline), element helpers, and the conformance suite
// (Suite) that every backend must pass.
package commtest

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gdist/gdist/comm"
)

// World builds n connected Comms, one per rank, for a test. It registers
// their cleanup with t.
type World func(t testing.TB, n int) []comm.Comm

// RunRanks runs fn for every rank concurrently and returns the first error.
// The context given to fn ends on the first error or after timeout.
func RunRanks(ctx context.Context, comms []comm.Comm, timeout time.Duration, fn func(ctx context.Context, c comm.Comm) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range comms {
		c := c
		g.Go(func() error {
			if err := fn(gctx, c); err != nil {
				return fmt.Errorf("rank %d: %w", c.Rank(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// SetElem stores v (converted to dt, wrapping integers) at element i of b.
func SetElem(dt comm.DType, b []byte, i int, v float64) {
	es := dt.Size()
	Fill(dt, b[i*es:(i+1)*es], func(int) float64 { return v })
}

// GetElem reads element i of b as float64.
func GetElem(dt comm.DType, b []byte, i int) float64 {
	es := dt.Size()
	var out float64
	Each(dt, b[i*es:(i+1)*es], func(_ int, v float64) { out = v })
	return out
}

func view[T comm.Elem](dt comm.DType, b []byte) []T {
	s, err := comm.AsSlice[T](mustBuf(dt, b))
	if err != nil {
		panic(err)
	}
	return s
}

// Fill sets every element i of b (a whole number of dt elements) to f(i),
// converted to dt (integers wrap).
func Fill(dt comm.DType, b []byte, f func(i int) float64) {
	switch dt {
	case comm.Float32:
		for i, s := 0, view[float32](dt, b); i < len(s); i++ {
			s[i] = float32(f(i))
		}
	case comm.Float64:
		for i, s := 0, view[float64](dt, b); i < len(s); i++ {
			s[i] = f(i)
		}
	case comm.Int32:
		for i, s := 0, view[int32](dt, b); i < len(s); i++ {
			s[i] = int32(int64(f(i)))
		}
	case comm.Int64:
		for i, s := 0, view[int64](dt, b); i < len(s); i++ {
			s[i] = int64(f(i))
		}
	case comm.Uint8:
		for i := range b {
			b[i] = uint8(int64(f(i)))
		}
	case comm.BFloat16:
		for i, s := 0, view[comm.BF16](dt, b); i < len(s); i++ {
			s[i] = comm.ToBF16(float32(f(i)))
		}
	case comm.Float16:
		for i, s := 0, view[comm.F16](dt, b); i < len(s); i++ {
			s[i] = comm.ToF16(float32(f(i)))
		}
	}
}

// Each calls f(i, v) for every element of b, read as float64.
func Each(dt comm.DType, b []byte, f func(i int, v float64)) {
	switch dt {
	case comm.Float32:
		for i, v := range view[float32](dt, b) {
			f(i, float64(v))
		}
	case comm.Float64:
		for i, v := range view[float64](dt, b) {
			f(i, v)
		}
	case comm.Int32:
		for i, v := range view[int32](dt, b) {
			f(i, float64(v))
		}
	case comm.Int64:
		for i, v := range view[int64](dt, b) {
			f(i, float64(v))
		}
	case comm.Uint8:
		for i, v := range b {
			f(i, float64(v))
		}
	case comm.BFloat16:
		for i, v := range view[comm.BF16](dt, b) {
			f(i, float64(v.Float32()))
		}
	case comm.Float16:
		for i, v := range view[comm.F16](dt, b) {
			f(i, float64(v.Float32()))
		}
	}
}

func mustBuf(dt comm.DType, b []byte) comm.Buffer {
	buf, err := comm.FromBytes(dt, b)
	if err != nil {
		panic(err)
	}
	return buf
}

// NewBuf allocates a Buffer of n elements of dt.
func NewBuf(dt comm.DType, n int) comm.Buffer {
	return mustBuf(dt, make([]byte, n*dt.Size()))
}

// Input is the value rank r contributes at element i for op: small integers
// chosen so that every reduction is exact in every dtype (bfloat16
// included), so each rank can compute the expected result itself.
func Input(dt comm.DType, op comm.ReduceOp, r, i int) float64 {
	switch op {
	case comm.Prod:
		return float64(1 + (r+i)%2)
	case comm.Min, comm.Max:
		v := (r*5 + i*3) % 13
		if dt != comm.Uint8 {
			v -= 6
		}
		return float64(v)
	case comm.BAnd, comm.BOr, comm.BXor:
		if dt == comm.Uint8 {
			return float64((r*37 + i*11 + 5) % 256)
		}
		return float64((r*7919+(i%4096)*104729+12345)%1000003 - 500000)
	}
	return float64((r*3 + i*7) % 11)
}

// period is a period in i of Input for op (and so of Expected).
func period(op comm.ReduceOp) int {
	switch op {
	case comm.Prod:
		return 2
	case comm.Min, comm.Max:
		return 13
	case comm.BAnd, comm.BOr, comm.BXor:
		return 4096 // a multiple of 256 too
	}
	return 11
}

// AvgRule is how a backend computes Avg on floating-point types; the
// results differ in the last bits (at n = 3, for example).
type AvgRule uint8

const (
	// AvgDivide sums the inputs, then divides: fl(sum)/n (the host
	// backends).
	AvgDivide AvgRule = iota
	// AvgPreMultiply multiplies each input by fl(1/n), rounded to the
	// dtype, then sums (NCCL's ncclAvg on floats). The sum's order is the
	// backend's (NCCL's ring or tree), so results are checked within n-1
	// units in the last place of the rank-order sum.
	AvgPreMultiply
)

// ExpectedFunc returns i -> Expected(dt, op, n, i), computed once per period.
func ExpectedFunc(dt comm.DType, op comm.ReduceOp, n int) func(i int) float64 {
	return ExpectedFuncRule(dt, op, n, AvgDivide)
}

// ExpectedFuncRule is ExpectedFunc for a backend whose Avg follows rule.
func ExpectedFuncRule(dt comm.DType, op comm.ReduceOp, n int, rule AvgRule) func(i int) float64 {
	p := period(op)
	tab := make([]float64, p)
	for i := range tab {
		tab[i] = ExpectedRule(dt, op, n, i, rule)
	}
	return func(i int) float64 { return tab[i%p] }
}

// Round is x rounded to dt's precision (dt a float type).
func Round(dt comm.DType, x float64) float64 {
	switch dt {
	case comm.Float32:
		return float64(float32(x))
	case comm.Float16:
		return float64(comm.ToF16(float32(x)).Float32())
	case comm.BFloat16:
		return float64(comm.ToBF16(float32(x)).Float32())
	}
	return x
}

// ExpectedRule is Expected for a backend whose Avg follows rule: with
// AvgPreMultiply, Avg on a float type is the rank-order sum of
// fl(Input * fl(1/n)), each step rounded to dt (float32 for the 16-bit
// types, which are rounded once at the end, as NCCL accumulates them).
func ExpectedRule(dt comm.DType, op comm.ReduceOp, n, i int, rule AvgRule) float64 {
	if op != comm.Avg || rule != AvgPreMultiply || !dt.IsFloat() {
		return Expected(dt, op, n, i)
	}
	acc := dt
	if dt == comm.Float16 || dt == comm.BFloat16 {
		acc = comm.Float32
	}
	scale := Round(dt, 1/float64(n))
	sum := 0.0
	for r := 0; r < n; r++ {
		sum = Round(acc, sum+Round(dt, Input(dt, op, r, i)*scale))
	}
	return Round(dt, sum)
}

// AvgTolerance is how far a result of Avg on dt over n ranks may be from
// want under rule: 0 for AvgDivide (exact), n-1 units in the last place of
// dt at want's magnitude for AvgPreMultiply.
func AvgTolerance(dt comm.DType, n int, rule AvgRule, want float64) float64 {
	if rule != AvgPreMultiply || !dt.IsFloat() || n < 3 {
		return 0
	}
	mant := map[comm.DType]int{comm.Float64: 52, comm.Float32: 23, comm.Float16: 10, comm.BFloat16: 7}[dt]
	_, exp := math.Frexp(math.Abs(want))
	return float64(n-1) * math.Ldexp(1, exp-1-mant)
}

// CheckReduced is CheckElems for the result of a reduction op over n ranks
// whose Avg follows rule (see AvgTolerance).
func CheckReduced(dt comm.DType, op comm.ReduceOp, n int, rule AvgRule, b []byte, count int, want func(i int) float64) error {
	if op != comm.Avg || rule != AvgPreMultiply || !dt.IsFloat() {
		return CheckElems(dt, b, count, want)
	}
	for i := 0; i < count; i++ {
		got, w := GetElem(dt, b, i), want(i)
		if d := math.Abs(got - w); d > AvgTolerance(dt, n, rule, w) || math.IsNaN(got) {
			return fmt.Errorf("%v element %d of %d: got %v, want %v (avg with inputs pre-multiplied by 1/%d)", dt, i, count, got, w, n)
		}
	}
	return nil
}

// Expected is the reduction over n ranks of Input at element i, as dt
// computes it.
func Expected(dt comm.DType, op comm.ReduceOp, n, i int) float64 {
	if dt.IsFloat() {
		acc := Input(dt, op, 0, i)
		for r := 1; r < n; r++ {
			v := Input(dt, op, r, i)
			switch op {
			case comm.Sum, comm.Avg:
				acc += v
			case comm.Prod:
				acc *= v
			case comm.Min:
				acc = math.Min(acc, v)
			case comm.Max:
				acc = math.Max(acc, v)
			}
		}
		if op == comm.Avg {
			if dt == comm.Float64 {
				return acc / float64(n)
			}
			return float64(float32(acc) / float32(n))
		}
		return acc
	}
	wrap := func(v int64) int64 {
		switch dt {
		case comm.Int32:
			return int64(int32(v))
		case comm.Uint8:
			return int64(uint8(v))
		}
		return v
	}
	acc := wrap(int64(Input(dt, op, 0, i)))
	for r := 1; r < n; r++ {
		v := wrap(int64(Input(dt, op, r, i)))
		switch op {
		case comm.Sum, comm.Avg:
			acc = wrap(acc + v)
		case comm.Prod:
			acc = wrap(acc * v)
		case comm.Min:
			acc = min(acc, v)
		case comm.Max:
			acc = max(acc, v)
		case comm.BAnd:
			acc &= v
		case comm.BOr:
			acc |= v
		case comm.BXor:
			acc ^= v
		}
	}
	if op == comm.Avg {
		acc = wrap(acc / int64(n))
	}
	return float64(acc)
}

// Pattern is the value rank r holds at element i for data-movement ops.
func Pattern(r, i int) float64 { return float64((r*13 + i*5) % 61) }

// CheckElems reports the first of n elements of b that differs from want(i)
// (rounded to dt).
func CheckElems(dt comm.DType, b []byte, n int, want func(i int) float64) error {
	es := dt.Size()
	b = b[:n*es]
	exp := make([]byte, len(b))
	Fill(dt, exp, want)
	if string(exp) == string(b) {
		return nil
	}
	for i := 0; i < n; i++ {
		if string(exp[i*es:(i+1)*es]) != string(b[i*es:(i+1)*es]) {
			return fmt.Errorf("%v element %d of %d: got %v, want %v", dt, i, n, GetElem(dt, b, i), GetElem(dt, exp, i))
		}
	}
	return nil
}
