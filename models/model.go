// Package models defines the networks gdist trains, as gorgonia expression
// graphs whose parameters all live in one contiguous float32 buffer
// (Flat.Value, a flat.Params) and whose gradients live in another
// (Flat.Grad), so that a gradient bucket is a view, never a copy. A Model
// satisfies the small interfaces the strategies define (ddp.Model,
// zero.Sharded, syncbn.Model; pipeline.Model through a two-line adapter,
// see package train).
//
// Models: "mlp" (784-256-128-10, ReLU), "cnn" (two conv 3x3 + ReLU + 2x2
// max-pool blocks of 32 and 64 channels, then 3136-128-10) and "cnn-bn" (the
// same with batch norm after each convolution); "mlp-xl"
// (784-4096-4096-4096-10, 36.8M parameters) for the ZeRO experiments.
// Parameter names and shapes
// follow the equivalent PyTorch nn.Sequential, so a checkpoint loads there
// with load_state_dict. Initialisation is PyTorch's default (uniform in
// +-1/sqrt(fan_in)), drawn from a seeded generator: the same seed gives the
// same model everywhere.
//
// Gradients: every learnable enters the forward graph through an identity
// op whose gradient op calls Graph.OnGrad with the parameter's index and
// gradient the moment gorgonia produces it during backward (last layer
// first). The default OnGrad adds the gradient into Flat.Grad; set it to
// ddp.DDP.AddGrad or zero.Engine.AddGrad to start reductions while
// backward goes on.
//
// Graphs are built under flat.Build's lock, so ranks as goroutines may
// build them at the same time.
//
// With Model.Store set (ZeRO stage 3), the model holds no parameters:
// layers fetch theirs from the ParamStore inside their own forward and
// backward ops and hand their gradients back (sharded.go).
//
// Matrix products use OpenBLAS through gonum's netlib in the default build
// (blas.go); -tags noblas builds the pure-Go fallback.
package models

import (
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unsafe"
)

// Param is one learnable tensor, a slice of the flat buffers.
type Param struct {
	Name   string // PyTorch state_dict name, e.g. "0.weight"
	Shape  []int  // shape in our graph
	Torch  []int  // shape in PyTorch
	TransT bool   // stored transposed relative to PyTorch ([in,out] vs [out,in])
	Offset int    // first element in Flat / Grad
	Size   int
	fanIn  int
	ones   bool // init to 1 (batch-norm scale)
	zeros  bool // init to 0 (batch-norm shift)
}

// Model is a network's parameters, gradients, batch-norm state and
// architecture. Build graphs from it with NewGraph.
type Model struct {
	Name   string
	Params []Param
	// Flat holds the parameters (Flat.Value) and gradients (Flat.Grad);
	// its spans are Params' offsets and sizes. Strategies may pad or
	// replace its buffers (package zero): build graphs after them.
	Flat *flat.Params
	BNs  []*BNLayer
	// Store, when set before NewGraph, supplies the parameters instead of
	// Flat and receives the gradients (ZeRO stage 3).
	Store                  flat.Store
	layers                 []layer
	inC, inH, inW, classes int
}

// Names lists the models for real use: "mlp", "cnn", "cnn-bn".
func Names() []string { return []string{"mlp", "cnn", "cnn-bn"} }

// AllNames adds "mlp-xl" (784-4096-4096-4096-10, 36.8M parameters), a
// model large enough for communication and memory to matter in the ZeRO
// experiments.
//
// "mlp-deep" (784-784x7-10, 4.3M parameters: seven equal hidden layers) is
// the pipeline benchmark's model: its layers are many and alike, so that
// stages can be balanced (a pipeline's bubble matches theory only when
// stages take equal time). "mlp-deep-N" has N such hidden layers (1 to
// 64): more layers balance more finely.
func AllNames() []string { return append(Names(), "mlp-xl", "mlp-deep", "mlp-deep-N") }

// Known tells whether New builds the named model.
func Known(name string) bool {
	if _, ok := deepLayers(name); ok {
		return true
	}
	return slices.Contains(append(Names(), "mlp-xl"), name)
}

// deepLayers is the hidden layer count of an mlp-deep model name.
func deepLayers(name string) (int, bool) {
	if name == "mlp-deep" {
		return 7, true
	}
	n, err := strconv.Atoi(strings.TrimPrefix(name, "mlp-deep-"))
	if !strings.HasPrefix(name, "mlp-deep-") || err != nil || n < 1 || n > 64 || strconv.Itoa(n) != name[len("mlp-deep-"):] {
		return 0, false
	}
	return n, true
}

// deep sets m's layers to 784-784xh-10 (ReLU).
func (m *Model) deep(h int) {
	m.layers = []layer{flatten{}}
	for i := 0; i < h; i++ {
		m.layers = append(m.layers, linear{torch: 2 * i, in: 784, out: 784}, relu{})
	}
	m.layers = append(m.layers, linear{torch: 2 * h, in: 784, out: 10})
}

// New builds the named model, initialised from seed.
func New(name string, seed int64) (*Model, error) {
	m := &Model{Name: name, inC: 1, inH: 28, inW: 28, classes: 10}
	switch name {
	case "mlp-xl":
		m.layers = []layer{
			flatten{}, linear{torch: 0, in: 784, out: 4096}, relu{},
			linear{torch: 2, in: 4096, out: 4096}, relu{},
			linear{torch: 4, in: 4096, out: 4096}, relu{},
			linear{torch: 6, in: 4096, out: 10},
		}
	case "mlp-deep":
		m.deep(7)
	case "mlp":
		m.layers = []layer{
			flatten{}, linear{torch: 0, in: 784, out: 256}, relu{},
			linear{torch: 2, in: 256, out: 128}, relu{},
			linear{torch: 4, in: 128, out: 10},
		}
	case "cnn", "cnn-bn":
		bn := name == "cnn-bn"
		i := 0
		next := func() int { i++; return i - 1 }
		add := func(l layer) { m.layers = append(m.layers, l) }
		for _, blk := range [][2]int{{1, 32}, {32, 64}} {
			add(conv{torch: next(), in: blk[0], out: blk[1], k: 3, pad: 1})
			if bn {
				add(batchNorm{torch: next(), c: blk[1]})
			}
			add(relu{torch: next()})
			add(maxPool{torch: next()})
		}
		add(flatten{torch: next()})
		add(linear{torch: next(), in: 64 * 7 * 7, out: 128})
		add(relu{torch: next()})
		add(linear{torch: next(), in: 128, out: 10})
	default:
		h, ok := deepLayers(name)
		if !ok {
			return nil, fmt.Errorf("models: unknown model %q (have %v)", name, AllNames())
		}
		m.deep(h)
	}
	off := 0
	for _, l := range m.layers {
		for _, p := range l.params() {
			p.Offset = off
			p.Size = prod(p.Shape)
			off += p.Size
			m.Params = append(m.Params, p)
		}
		if b, ok := l.(batchNorm); ok {
			m.BNs = append(m.BNs, newBNLayer(fmt.Sprint(b.torch), b.c))
		}
	}
	spans := make([]flat.Span, len(m.Params))
	for i, p := range m.Params {
		spans[i] = flat.Span{Name: p.Name, Shape: p.Shape, Offset: p.Offset, Size: p.Size}
	}
	var err error
	if m.Flat, err = flat.New(make([]float32, off), make([]float32, off), spans); err != nil {
		return nil, fmt.Errorf("models: %s: %w", name, err)
	}
	m.Init(seed)
	return m, nil
}

// Init sets the parameters from seed (PyTorch's default scheme) and resets
// batch-norm state.
func (m *Model) Init(seed int64) {
	rng := newRNG(uint64(seed))
	for _, p := range m.Params {
		dst := m.Flat.Value[p.Offset : p.Offset+p.Size]
		switch {
		case p.ones:
			for i := range dst {
				dst[i] = 1
			}
		case p.zeros:
			clear(dst)
		default:
			bound := 1 / math.Sqrt(float64(p.fanIn))
			for i := range dst {
				dst[i] = float32((2*rng.float64() - 1) * bound)
			}
		}
	}
	for _, b := range m.BNs {
		clear(b.RunningMean)
		for i := range b.RunningVar {
			b.RunningVar[i] = 1
		}
		b.NumBatches = 0
	}
}

// NumParams is the number of learnable scalars.
func (m *Model) NumParams() int {
	if len(m.Params) == 0 {
		return 0
	}
	p := m.Params[len(m.Params)-1]
	return p.Offset + p.Size
}

// InputSize is the number of floats per sample.
func (m *Model) InputSize() int { return m.inC * m.inH * m.inW }

// Classes is the number of output classes.
func (m *Model) Classes() int { return m.classes }

// ZeroGrad clears the gradient buffer.
func (m *Model) ZeroGrad() { clear(m.Flat.Grad) }

// StateBuffers is the non-learnable state (each batch-norm layer's
// running mean, running variance and batch count) as views, in layer order.
func (m *Model) StateBuffers() []comm.Buffer {
	var out []comm.Buffer
	for _, b := range m.BNs {
		out = append(out, comm.FromSlice(b.RunningMean), comm.FromSlice(b.RunningVar), comm.FromSlice(unsafe.Slice(&b.NumBatches, 1)))
	}
	return out
}

// SetStore makes graphs built from now on take their parameters from s
// (zero.Sharded: ZeRO stage 3).
func (m *Model) SetStore(s flat.Store) { m.Store = s }

// SetBatchNormSync sets every batch-norm layer's Sync hook (nil: per rank
// again) and returns how many layers there are (syncbn.Convert).
func (m *Model) SetBatchNormSync(fn func(stage string, buf []float64) error) int {
	for _, b := range m.BNs {
		b.Sync = fn
	}
	return len(m.BNs)
}

// FlatParams returns m.Flat (the strategies' view of the model).
func (m *Model) FlatParams() *flat.Params { return m.Flat }

// Buffers returns the non-learnable state (batch-norm running statistics)
// as name -> values, with PyTorch's names ("1.running_mean", ...).
func (m *Model) Buffers() map[string][]float32 {
	out := map[string][]float32{}
	for _, b := range m.BNs {
		out[b.Prefix+".running_mean"] = b.RunningMean
		out[b.Prefix+".running_var"] = b.RunningVar
	}
	return out
}

// BufferNames lists Buffers' keys in a fixed order.
func (m *Model) BufferNames() []string {
	var out []string
	for k := range m.Buffers() {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// rng is splitmix64: tiny, fast and the same on every platform.
type rng struct{ s uint64 }

func newRNG(seed uint64) *rng { return &rng{s: seed ^ 0x9e3779b97f4a7c15} }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) float64() float64 { return float64(r.next()>>11) / (1 << 53) }
