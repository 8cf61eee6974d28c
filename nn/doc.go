// Package nn is gdist's layer library: layers with PyTorch's names, a
// Model that keeps every parameter in one flat buffer, and graphs that the
// strategies (ddp, zero 1 to 3, syncbn, pipeline) train without knowing
// the layers.
//
// # Layers
//
// Linear, Conv2d, BatchNorm1d/2d, LayerNorm, Embedding, ReLU, GELU, Tanh,
// MaxPool2d, Flatten, Dropout, CausalSelfAttention, and the containers
// Sequential and Residual. Parameter names and shapes follow PyTorch's
// state_dict ("0.weight", "3.in_proj_weight", ...), so a checkpoint loads
// there with load_state_dict; Param.Torch and Param.TransT say how a
// tensor is laid out there when it is stored transposed here.
//
// A Sequential builds some runs of layers as one op, with the values and
// gradients of the layers built one by one, bit for bit: Conv2d, ReLU,
// MaxPool2d (each image convolved, biased and pooled while in cache; see
// convpool.go) and ReLU, MaxPool2d (pooling first, the ReLU on a quarter
// of the values). A pipeline stage builds its layers one by one (the
// same values).
//
// The convolution's unrolling (im2col) and its adjoint, pooling forward
// and backward, bias sums and adds, batch norm's per-channel loops, GELU,
// layer norm, attention's softmax, the embedding's gradient and the
// float32 sums run as internal/vecmath's kernels: AVX-512 or AVX2
// assembly where the CPU has it, the same values bit for bit in Go
// elsewhere (GDIST_KERNELS=go|avx2|avx512 caps the choice, the purego
// build tag forces Go); the matrix products go to OpenBLAS (the constant
// BLAS names it; -tags noblas or no cgo: gonum's pure Go) but for
// attention's small ones, which skip the causal mask's zero blocks and run
// as vecmath's AVX-512 tiles where the shapes fit (attention.go), the
// convolutions' to its AVX-512 small-matrix kernels where the CPU and the
// library have them (convgemm.go; GDIST_CONV_GEMM=blas keeps sgemm). Importing nn has
// no side effect: the BLAS is installed process-wide, for gorgonia and
// gonum's blas32, at the first graph build, or earlier by an explicit
// UseBLAS. 3x3 convolutions
// with padding 1 and 16 or more channels each way run as Winograd
// F(2x2, 3x3) (winograd.go: 16 multiplications per 2x2 outputs instead of
// 36, as accurate as the unrolled product).
//
// # Your own layer
//
// A layer implements Layer: Params declares its learnables (name, shape,
// initialisation), Fwd builds its output from gorgonia ops, taking each
// learnable from b.Param(k):
//
//	type Scale struct{ C int }
//
//	func (l *Scale) Params() []nn.Param {
//		return []nn.Param{{Name: "weight", Shape: []int{l.C}, Init: nn.Fill(1)}}
//	}
//	func (l *Scale) Fwd(b *nn.Builder, x *gorgonia.Node) (*gorgonia.Node, error) {
//		return gorgonia.BroadcastHadamardProd(x, b.Param(0), nil, []byte{0})
//	}
//
// That is all: the layer's gradients reach the strategies, ZeRO-3 gathers
// its parameters around it (see below), a pipeline can cut before or after
// it. Containers implement Container and build their children with
// b.Child. Func makes a layer from a function.
//
// Layers of Go's other gorgonia layer libraries (golgi, goras: a Fwd(x)
// method over learnables given at construction) wrap with Adapt: declare
// the learnables, and build the layer over the nodes nn hands you with
// the library's constructor that takes its weights:
//
//	nn.Adapt(params, func(ws []*gorgonia.Node) (nn.Fwder, error) {
//		return theirLayer(ws[0], ws[1]) // e.g. a golgi layer made with these weights
//	})
//
// # Models, graphs and gradients
//
// New(name, net, sampleShape, seed) lays the parameters out in
// declaration order in Model.Flat (flat.Params: Value and Grad, one
// buffer each, a Span per tensor) and initialises them from seed (the
// same everywhere). NewGraph(batch, train) compiles a graph: the network,
// then softmax cross-entropy against class labels. Graph.Step(ctx, x, y)
// runs forward and backward; every learnable's complete gradient goes to
// Graph.OnGrad the moment gorgonia produces it (last layer first) — a
// strategy's AddGrad, so that reductions start while backward goes on —
// or, by default, is added into Flat.Grad. Nothing zeroes Flat.Grad but
// Model.ZeroGrad (the strategies' Step/update does it for you).
//
// Graphs are built under flat.Build's lock, so ranks as goroutines may
// build them at the same time; a graph is used by one goroutine. A
// training graph keeps every node's value (all activations) for its life:
// Close the graphs you are done with, and that memory goes. An evaluation
// graph (NewGraph(batch, false)) is forward only: no gradients, and its
// own executor (forward.go) frees each activation once the last op that
// reads it has run, so a pass holds a few layers' activations (gpt-large
// at batch 64: 0.4 GB of peak RSS, against 2.3 GB on gorgonia's tape
// machine), with the tape machine's values bit for bit.
//
// # ZeRO stage 3
//
// With a flat.Store set (zero.New with Stage 3 does it), the model holds
// no parameters. Each layer with learnables is built between two identity
// ops: the one before it fetches the layer's parameters from the store and
// points the learnables' tensors at them, the one after releases them;
// in backward the layer's parameters are fetched again and released once
// all its gradients are out (handed to the store). A rank thus holds full
// parameters only for the layers at work, and every layer, yours
// included, is sharded without code of its own. Builder.NoBackwardFetch
// lets a layer whose backward does not read its parameters skip the
// second fetch (Linear and Conv2d at the network's input do).
//
// # Pipelines, batch norm, dropout
//
// Model.NewStage compiles a range of a Sequential's children on its own
// (StageGraph); package pipeline takes a Model as it is (nn does not import
// it) and splits it between those children. Model.Sample makes valid
// random input (token ids where the network starts with an Embedding) and
// labels, which balancing stages by time profiles on. Batch norm takes its
// statistics over the rank's
// batch, or over all ranks' with syncbn.Convert (SyncBatchNorm; its
// collectives run under the ctx given to Step). Dropout's masks are a
// hash of the seed, the run and the sample's place in the global batch
// (Graph.SampleOffset), so data-parallel runs drop what one process
// would. Neither batch norm nor dropout may sit in a pipeline stage.
package nn
