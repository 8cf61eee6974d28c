// Package ddp is distributed data parallelism, like PyTorch's
// DistributedDataParallel: every rank holds the whole model, trains on its
// own slice of each global batch, and averages gradients with all-reduce
// before the optimizer step.
//
// # Any gorgonia model
//
// Wrap takes a plain gorgonia model's learnables ([]*gorgonia.Node): the
// user keeps the graph, the loss, the tape machine and the solver.
//
//	d, err := ddp.Wrap(ctx, c, learnables, ddp.Options{}) // broadcasts rank 0's values
//	...
//	vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(learnables...))
//	for step := range steps {
//		// load this rank's part of the global batch into the input nodes
//		if err := d.Backward(ctx, vm.RunAll); err != nil { ... } // forward, backward, average
//		vm.Reset()
//		solver.Step(gorgonia.NodesToValueGrads(learnables)) // also clears the gradients
//	}
//
// Wrap re-backs every learnable's value tensor in place onto a view of one
// flat parameter buffer and its gradient (gorgonia's dual value) onto a
// view of one flat gradient buffer (package flat), so a bucket is a view,
// never a copy, the solver reads the averaged gradients where it always
// does, and the *tensor.Dense values the model kept are the ones trained
// (a value that cannot be re-backed in place fails Wrap, naming it). Using Tap(w)
// in place of each learnable w in the forward code lets a bucket start its
// all-reduce as soon as its last gradient is complete, while backward goes
// on; without taps every bucket is reduced after backward.
//
// The learnables are float32 or float64 (all one type): float64 ones get
// float64 buffers and all-reduces (the fp16/bf16 hooks take float32 only).
//
// # A new graph every step
//
// A model that builds a new graph every step (a LispMachine, a recurrent
// model unrolled to each sequence) keeps its parameter tensors, not its
// nodes: WrapValues takes the tensors once, and each step hands that
// step's gradients over with AddGrads inside Backward's function; the
// solver steps ValueGrads (see WrapValues and examples/charrnn).
//
// Who zeroes gradients: gorgonia's tape machine adds every backward pass's
// gradients into the buffer, and nothing clears it but gorgonia's solvers
// (at the end of Step) or ZeroGrad (call it after an update with package
// optim).
//
// # Buckets
//
// Gradients are all-reduced in buckets: contiguous ranges of the flat
// gradient buffer in reverse parameter order, the first (last layers)
// capped at Options.FirstBucketMB and the rest at Options.BucketMB.
// Options.NoOverlap defers all of them to the end, for comparison. Finish
// waits for every bucket. A gradient produced after its bucket started
// (two backward passes without Finish between) is never added under a
// running reduction: Finish reports ErrLateGradient.
//
// On a Comm that is a comm.Allocator with shared memory (the shm backend;
// auto with every rank on one host), New and Wrap move the gradient buffer
// into that memory (comm.Alloc), so every bucket's all-reduce is
// zero-copy: each rank reads the others' gradients where they lie, with
// no copy through the transport's rings (buckets under
// GDIST_ZEROCOPY_MIN, 128 KiB by default, take the ordinary path).
// Where the shared memory has no room for the buffer (shm's area, see
// GDIST_SHM_AREA_BYTES), it stays in ordinary memory and SharedGradsErr
// says why. Options.OrdinaryGrads keeps the buffer where it was; Close moves it back
// into ordinary memory and frees the shared memory. The model's buffers
// are re-pointed (flat.Params.Move), so code that kept the old gradient
// slice must fetch it again.
//
// NoSync skips communication for gradient accumulation: gradients add up
// locally until the next step that syncs. CommHook replaces the plain
// average (FP16Compress and BF16Compress halve the bytes sent). With
// Options.Debug, Finish also checks that every rank holds bit-identical
// parameters.
//
// Models built from package nn implement Model; their graphs hand
// each gradient to AddGrad as it is produced. A DDP is used by one
// goroutine (the training loop).
package ddp
