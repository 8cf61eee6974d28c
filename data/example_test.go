package data_test

import (
	"fmt"

	"github.com/gdist/gdist/data"
)

// Two ranks at batch 2 see, together, the global batches of one rank at
// batch 4.
func ExampleSampler() {
	ds := data.Synthetic(10, 1)
	for rank := range 2 {
		s := &data.Sampler{N: ds.N, World: 2, Rank: rank, Batch: 2, Seed: 42}
		if err := s.Validate(); err != nil {
			fmt.Println(err)
			return
		}
		for k := range s.NumBatches() {
			fmt.Printf("rank %d batch %d: %v\n", rank, k, s.Indices(0, k, nil))
		}
	}
	one := &data.Sampler{N: ds.N, World: 1, Batch: 4, Seed: 42}
	fmt.Println("global batch 0:", one.GlobalBatch(0, 0))
	fmt.Println((&data.Sampler{N: 100, World: 2, Batch: 64}).Validate())
	// Output:
	// rank 0 batch 0: [5 7]
	// rank 0 batch 1: [9 2]
	// rank 1 batch 0: [3 0]
	// rank 1 batch 1: [8 1]
	// global batch 0: [5 3 7 0]
	// data: invalid argument: batch 64 x 2 ranks = 128 is larger than the 100 samples of the dataset
}
