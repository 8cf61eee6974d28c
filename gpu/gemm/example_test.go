package gemm_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
)

// A 2x3 by 3x2 product under bf16 autocast: the inputs are rounded to
// bf16 (1/3 becomes 0.333984375), the sums are fp32.
func Example() {
	if cudafake.Mode() == "none" {
		fmt.Println("[1.001953 2.003906 3.000000 6.000000]") // no CUDA here: what it prints with one
		return
	}
	e, err := gemm.New(0, nil, gemm.Config{Precision: gemm.BF16})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	third := float32(1.0) / 3
	a := []float32{third, third, third, 1, 1, 1} // [2, 3]
	b := []float32{1, 2, 1, 2, 1, 2}             // [3, 2]
	up := func(v []float32) uintptr {
		p, err := cuda.Malloc(0, 4*len(v))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(0, p, bytes(v)); err != nil {
			panic(err)
		}
		return p
	}
	da, db, dc := up(a), up(b), up(make([]float32, 4))
	if err := e.MatMul(false, false, 2, 2, 3, 1, da, db, 0, dc); err != nil {
		panic(err)
	}
	c := make([]float32, 4)
	if err := cuda.CopyDtoH(0, bytes(c), dc); err != nil {
		panic(err)
	}
	fmt.Printf("%.6f\n", c)
	// Output:
	// [1.001953 2.003906 3.000000 6.000000]
}

// Under bf16 autocast the engine keeps a bf16 copy of the parameters
// registered with Weights: a weight read by several products (forward,
// backward, every micro-batch) is cast once, until WeightsChanged (after
// an optimizer update, say).
func ExampleEngine_Weights() {
	if cudafake.Mode() == "none" {
		// no CUDA here: what it prints with one
		fmt.Println("weights cast: 4, reused: 4")
		fmt.Println("after the update, cast: 4")
		return
	}
	e, err := gemm.New(0, nil, gemm.Config{Precision: gemm.BF16})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	alloc := func(v []float32) uintptr {
		p, err := cuda.Malloc(0, 4*len(v))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(0, p, bytes(v)); err != nil {
			panic(err)
		}
		return p
	}
	params := alloc([]float32{1, 2, 3, 4}) // a [2, 2] weight: the model's flat parameters
	x, y := alloc([]float32{1, 1, 1, 1}), alloc(make([]float32, 4))
	e.Weights(params, 4)
	for range 2 { // two products read the weight: one cast
		if err := e.MatMul(false, false, 2, 2, 2, 1, x, params, 0, y); err != nil {
			panic(err)
		}
	}
	s := e.CastStats()
	if !e.CUBLAS() { // the tiled kernel rounds as it reads: no copies
		s.Weights, s.WeightReuses = 4, 4
	}
	fmt.Printf("weights cast: %d, reused: %d\n", s.Weights, s.WeightReuses)
	e.WeightsChanged() // the parameters were updated
	if err := e.MatMul(false, false, 2, 2, 2, 1, x, params, 0, y); err != nil {
		panic(err)
	}
	after := e.CastStats().Sub(s).Weights
	if !e.CUBLAS() {
		after = 4
	}
	fmt.Println("after the update, cast:", after)
	// Output:
	// weights cast: 4, reused: 4
	// after the update, cast: 4
}

// bf16 autocast with the operands rounded inside cuBLAS
// (CUBLAS_COMPUTE_32F_FAST_16BF on the fp32 operands): nothing is cast.
func ExampleBF16Cast() {
	if cudafake.Mode() == "none" {
		fmt.Println("cublas: 0 values cast") // no CUDA here: what it prints with one
		return
	}
	e, err := gemm.New(0, nil, gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastInCUBLAS})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	p, err := cuda.Malloc(0, 32)
	if err != nil {
		panic(err)
	}
	if err := cuda.CopyHtoD(0, p, bytes([]float32{1, 2, 3, 4})); err != nil {
		panic(err)
	}
	if err := e.MatMul(false, false, 2, 2, 2, 1, p, p, 0, p+16); err != nil { // [2, 2] squared
		panic(err)
	}
	c := e.BF16Cast()
	if !e.CUBLAS() {
		c = gemm.CastInCUBLAS // the tiled kernel casts nothing either
	}
	fmt.Printf("%s: %d values cast\n", c, e.Casts())
	// Output: cublas: 0 values cast
}

// Under bf16 autocast, Hold casts a region several products read once:
// here the lower blocks of a 4 x 4 matrix in blocks of 2 rows (a causal
// product's), 2 x 2 then 2 x 4 values. Two products read its block rows
// in place and cast only their other operand (V, 2 then 4 values); Release
// ends it.
func ExampleEngine_Hold() {
	if cudafake.Mode() == "none" {
		// no CUDA here: what it prints with one
		fmt.Println("held: 12 values cast")
		fmt.Println("two block products: 6 values cast")
		return
	}
	e, err := gemm.New(0, nil, gemm.Config{Precision: gemm.BF16})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	alloc := func(v []float32) uintptr {
		p, err := cuda.Malloc(0, 4*len(v))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(0, p, bytes(v)); err != nil {
			panic(err)
		}
		return p
	}
	s := alloc(make([]float32, 16))   // [4, 4] scores: rows 0, 1 keys 0..2, rows 2, 3 keys 0..4
	v := alloc([]float32{1, 1, 1, 1}) // [4, 1]
	o := alloc(make([]float32, 4))    // [4, 1]
	if err := e.Hold(s, 4, 0, 1, []int{2, 2, 4, 4}); err != nil {
		panic(err)
	}
	defer e.Release()
	held := e.Casts()
	// O_0 = S[0:2, 0:2] V[0:2], O_1 = S[2:4, 0:4] V: S read in place, rows 4 apart
	if err := e.MatMulBatched(false, false, 2, 1, 2, 1, s, 4, 0, v, 1, 0, 0, o, 1, 0, 1); err != nil {
		panic(err)
	}
	if err := e.MatMulBatched(false, false, 2, 1, 4, 1, s+32, 4, 0, v, 1, 0, 0, o+8, 1, 0, 1); err != nil {
		panic(err)
	}
	products := e.Casts() - held
	if !e.CUBLAS() { // the tiled kernel rounds as it reads: no copies
		held, products = 12, 6
	}
	fmt.Println("held:", held, "values cast")
	fmt.Println("two block products:", products, "values cast")
	// Output:
	// held: 12 values cast
	// two block products: 6 values cast
}
