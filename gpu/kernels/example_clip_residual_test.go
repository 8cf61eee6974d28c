package kernels_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/kernels"
)

// ZeRO's clipping with the norm kept on the device: each rank's shard
// has its norm (ClipGradNorm with no bound) squared by ClipSquare, the
// ranks sum the squares (an all-reduce over NCCL; here two shards on one
// device, added on the host), and ClipGlobal scales each shard by the
// global norm's factor. The shards [3 0] and [0 4] have the global norm
// 5: clipped to 1, they become [0.6 0] and [0 0.8].
func ExampleKernels_ClipGlobal() {
	if cudafake.Mode() == "none" {
		fmt.Println("norm 5: [0.6000 0.0000] [0.0000 0.8000]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	k := load(dev)
	f64 := func(p uintptr) float64 {
		b := make([]byte, 8)
		if err := cuda.CopyDtoH(dev, b, p); err != nil {
			panic(err)
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	shards := []uintptr{put(dev, []float32{3, 0}), put(dev, []float32{0, 4})}
	var ws, sq []uintptr
	for _, g := range shards {
		w, err := cuda.Malloc(dev, kernels.ClipWorkspace)
		if err != nil {
			panic(err)
		}
		q, err := cuda.Malloc(dev, 8)
		if err != nil {
			panic(err)
		}
		if err := k.ClipGradNorm(nil, g, 2, math.Inf(1), w); err != nil { // the shard's norm at w
			panic(err)
		}
		if err := k.ClipSquare(nil, q, w); err != nil { // its square at q
			panic(err)
		}
		ws, sq = append(ws, w), append(sq, q)
	}
	sum := binary.LittleEndian.AppendUint64(nil, math.Float64bits(f64(sq[0])+f64(sq[1]))) // the ranks' all-reduce
	for i, g := range shards {
		if err := cuda.CopyHtoD(dev, sq[i], sum); err != nil {
			panic(err)
		}
		if err := k.ClipGlobal(nil, g, 2, 1, ws[i], sq[i]); err != nil {
			panic(err)
		}
	}
	fmt.Printf("norm %g: %.4f %.4f\n", f64(ws[0]), get(dev, shards[0], 2), get(dev, shards[1], 2))
	// Output: norm 5: [0.6000 0.0000] [0.0000 0.8000]
}

// A Residual whose function ends with a Linear adds the Linear's bias in
// its sum: y = x + (f + bias), f the Linear's product without its bias.
func ExampleKernels_BiasAddResidual() {
	if cudafake.Mode() == "none" {
		fmt.Println("[11.5 21.5 33.5 43.5]") // no CUDA here: what it prints with one
		return
	}
	const dev, rows, cols = 0, 2, 2
	k := load(dev)
	x := put(dev, []float32{1, 2, 3, 4})     // the Residual's input
	f := put(dev, []float32{10, 20, 30, 40}) // its function's last product
	b := put(dev, []float32{0.5, -0.5})      // that Linear's bias
	y := put(dev, make([]float32, rows*cols))
	if err := k.BiasAddResidual(nil, y, x, f, b, rows, cols); err != nil {
		panic(err)
	}
	fmt.Printf("%.1f\n", get(dev, y, rows*cols))
	// Output: [11.5 21.5 33.5 43.5]
}
