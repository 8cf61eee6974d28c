package nccl_test

import (
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/nccl"
)

// Whether two local ranks of this host would use different GPUs under
// NCCL: GPUOf names each rank's GPU by host and PCI bus id, so processes
// that each "see one GPU" (a container-wide NVIDIA_VISIBLE_DEVICES=0)
// but share it are told apart, as the "auto" backend does before it
// picks NCCL. Not run: the answer is the machine's.
func ExampleGPUOf() {
	gpus := map[string]int{}
	for r := range 2 {
		gpu, err := nccl.GPUOf(comm.Config{Rank: r, Size: 2, LocalRank: r, LocalSize: 2})
		if err != nil {
			fmt.Println(err) // no CUDA, or fewer GPUs than local ranks
			return
		}
		if first, dup := gpus[gpu]; dup {
			fmt.Println(nccl.SharedGPU(first, r, gpu))
			return
		}
		gpus[gpu] = r
	}
	fmt.Println("a GPU each:", gpus)
}
