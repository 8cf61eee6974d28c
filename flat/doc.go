// Package flat lays a model's learnables out in two flat buffers, one for
// the parameters and one for their gradients, so that a strategy (package
// ddp, package zero) can reduce a bucket of gradients as one contiguous
// view: never a copy. The buffers are float32 (Value, Grad), or float64
// (Value64, Grad64) for a plain gorgonia model whose learnables are all
// float64 (DType says which; ValueBuf and GradBuf serve collectives
// either way).
//
// It is the meeting point of the ways into gdist: a plain gorgonia model
// (learnables as []*gorgonia.Node, bound here with Bind), a model that
// builds a new graph every step over tensors it keeps (BindValues), and
// the models built from package nn, which lay out their own Params.
//
// # Plain gorgonia models
//
// Bind takes the learnables (in the order their Spans will have), copies
// their current values into Params.Value and re-backs every node's value
// in place onto its view: the same *tensor.Dense the node held (and that
// the model may keep elsewhere, in a struct of weights) now reads and
// writes Value[Offset:Offset+Size]; its gradient (gorgonia's dual value)
// likewise lies over Grad[Offset:Offset+Size]. gorgonia's solvers and
// package optim then read and write the flat buffers in place. A value
// that cannot be re-backed in place (a view of another tensor, masked,
// manually managed memory, one tensor shared by two learnables) is an
// error naming the learnable.
//
// Gradients land in the dual values only when the tape machine binds
// them: build it with gorgonia.BindDualValues(learnables...), as
// gorgonia's own examples do. The tape machine then adds every backward
// pass's gradient into Grad (gradients accumulate until someone zeroes
// them: gorgonia's solvers do at the end of Step; with package optim call
// ZeroGrad after the update).
//
// # A new graph every step
//
// A model that builds a new graph every step (a LispMachine, a recurrent
// model unrolled to each sequence's length) has new learnable nodes each
// step but keeps its parameter tensors. BindValues takes those tensors
// (named, as flat.Value) and re-backs them in place, once; each step's
// graph is built over them (gorgonia.WithValue(t)), and after the pass
// AddGrads adds the step's gradients (nodes[i]: this graph's node over
// tensor i) into Grad, telling the strategy as each one lands.
// ValueGrads hands a gorgonia solver the tensors with the flat gradients.
//
// # Gradient taps
//
// Tap(w) returns an identity node to use in place of the learnable w in
// the forward code. Its backward tells the strategy the moment w's
// gradient is complete in Grad, so that a bucket's reduction can start
// while backward goes on (the overlap of PyTorch's DDP). Without taps
// everything still works, with every reduction after backward. Rules,
// each checked with an error that names the learnable: tap each learnable
// at most once, use only the tapped node in the forward code, and tap
// before gorgonia.Grad differentiates the graph.
//
// # Building graphs concurrently
//
// Ranks as goroutines of one process (the inproc backend) build their
// graphs at the same time; gorgonia's graph construction and
// differentiation share unsynchronised state, so build each graph, call
// gorgonia.Grad and make its machine inside Build (see Build for the
// exact rule).
package flat
