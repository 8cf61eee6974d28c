package nn

import (
	"fmt"
	"sort"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/internal/hugepage"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ParamInfo is one learnable of a model: its declaration and its place in
// the flat buffers.
type ParamInfo struct {
	Name   string // PyTorch state_dict name, e.g. "0.weight"
	Shape  []int  // shape in the graph
	Torch  []int  // shape in PyTorch
	TransT bool   // stored transposed relative to PyTorch
	Offset int    // first element in Flat.Value / Flat.Grad
	Size   int
}

// ToTorch returns v, the parameter's values as the graph holds them, in
// PyTorch's layout (transposed when TransT; v itself otherwise).
func (p ParamInfo) ToTorch(v []float32) []float32 {
	if !p.TransT {
		return v
	}
	return transpose(v, p.Shape[0], p.Shape[1])
}

// ToTorchInto is ToTorch writing into dst (len(v) values).
func (p ParamInfo) ToTorchInto(dst, v []float32) {
	if !p.TransT {
		copy(dst, v)
		return
	}
	transposeInto(dst, v, p.Shape[0], p.Shape[1])
}

// FromTorch is the inverse of ToTorch: v in PyTorch's layout, returned in
// the graph's.
func (p ParamInfo) FromTorch(v []float32) []float32 {
	if !p.TransT {
		return v
	}
	return transpose(v, p.Torch[0], p.Torch[1])
}

// transpose returns the transpose of the rows x cols matrix v.
func transpose(v []float32, rows, cols int) []float32 {
	out := make([]float32, len(v))
	transposeInto(out, v, rows, cols)
	return out
}

// transposeInto writes the transpose of the rows x cols matrix v to out,
// 8 x 8 blocks at a time (each read as 8 row pieces, written as 8
// contiguous column pieces): for power-of-two widths, where the output
// lines of a wider tile all fall in one cache set, this is 5x the speed of
// 32 x 32 tiles (checkpoint snapshots of mlp-xl spent 260 ms here).
func transposeInto(out, v []float32, rows, cols int) {
	i := 0
	for ; i+8 <= rows; i += 8 {
		j := 0
		for ; j+8 <= cols; j += 8 {
			var b [8][8]float32
			for a := range 8 {
				r := v[(i+a)*cols+j : (i+a)*cols+j+8]
				for c := range 8 {
					b[c][a] = r[c]
				}
			}
			for c := range 8 {
				copy(out[(j+c)*rows+i:(j+c)*rows+i+8], b[c][:])
			}
		}
		for ; j < cols; j++ {
			for a := range 8 {
				out[j*rows+i+a] = v[(i+a)*cols+j]
			}
		}
	}
	for ; i < rows; i++ {
		for j := range cols {
			out[j*rows+i] = v[i*cols+j]
		}
	}
}

// Model is a network (a layer, usually a Sequential) with its parameters
// in one flat buffer (Flat.Value, in declaration order) and its gradients
// in another (Flat.Grad), its batch-norm state, and the sample shape it
// takes. Build graphs from it with NewGraph; every graph of a model shares
// its parameters, gradients and state. A Model satisfies the interfaces
// the strategies define: ddp.Model, zero.Sharded, syncbn.Model and
// pipeline.Model[*StageGraph] (none of them imported here).
type Model struct {
	Name   string
	Net    Layer
	Params []ParamInfo
	// Flat holds the parameters and gradients. Strategies may pad or
	// replace its buffers (package zero): build graphs after them.
	Flat *flat.Params
	// BNs is every batch-norm layer's state, in layer order.
	BNs []*BNLayer
	// Store, when set before NewGraph, supplies the parameters instead of
	// Flat and receives the gradients (ZeRO stage 3; see SetStore).
	Store flat.Store

	inShape []int
	classes int
	perLab  int // labels per sample: 1, or T for (batch, T, classes) logits
	mods    []module
	inits   []InitFunc
}

// New makes a model of net for samples of shape in (for example
// {1, 28, 28} for an image, {784} for a vector), its parameters
// initialised from seed. The output of net must be logits, (batch,
// classes) or (batch, T, classes) for a sequence (a language model: one
// label per position): graphs end in the mean softmax cross-entropy
// against the labels.
func New(name string, net Layer, in []int, seed int64) (*Model, error) {
	if len(in) == 0 || prod(in) < 1 {
		return nil, fmt.Errorf("nn: %s: sample shape %v is empty", name, in)
	}
	mods, decl, err := flattenTree(net)
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", name, err)
	}
	m := &Model{Name: name, Net: net, inShape: append([]int(nil), in...), mods: mods}
	off := 0
	for _, md := range mods {
		for _, p := range decl[md.first : md.first+md.n] {
			torch := p.Torch
			if torch == nil {
				torch = p.Shape
			}
			m.Params = append(m.Params, ParamInfo{Name: md.name(p.Name), Shape: append([]int(nil), p.Shape...),
				Torch: append([]int(nil), torch...), TransT: p.TransT, Offset: off, Size: prod(p.Shape)})
			m.inits = append(m.inits, p.Init)
			off += prod(p.Shape)
		}
		if bn, ok := md.l.(*BatchNorm); ok {
			if bn.state.Prefix != "" && bn.state.Prefix != md.prefix {
				return nil, fmt.Errorf("nn: %s: batch norm %q is also layer %q: a layer belongs to one model", name, md.prefix, bn.state.Prefix)
			}
			bn.state.Prefix = md.prefix
			m.BNs = append(m.BNs, bn.state)
		}
	}
	spans := make([]flat.Span, len(m.Params))
	for i, p := range m.Params {
		spans[i] = flat.Span{Name: p.Name, Shape: p.Shape, Offset: p.Offset, Size: p.Size}
	}
	if m.Flat, err = flat.New(hugepage.Float32s(off), hugepage.Float32s(off), spans); err != nil {
		return nil, fmt.Errorf("nn: %s: %w", name, err)
	}
	shapes, err := m.shapes(1, 0, m.NumLayers())
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", name, err)
	}
	out := shapes[len(shapes)-1]
	if len(out) < 2 || len(out) > 3 || out[0] != 1 {
		return nil, fmt.Errorf("nn: %s: output shape %v for one sample; want (1, classes) or (1, T, classes) logits", name, out)
	}
	m.classes = out[len(out)-1]
	m.perLab = out.TotalSize() / m.classes
	m.Init(seed)
	return m, nil
}

// Init sets the parameters from seed and resets batch-norm state.
func (m *Model) Init(seed int64) {
	r := newRNG(uint64(seed))
	for i, p := range m.Params {
		dst := m.Flat.Value[p.Offset : p.Offset+p.Size]
		clear(dst)
		if f := m.inits[i]; f != nil {
			f(dst, r.float64)
		}
	}
	for _, b := range m.BNs {
		b.reset()
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
func (m *Model) InputSize() int { return prod(m.inShape) }

// InputShape is the shape of one sample.
func (m *Model) InputShape() []int { return append([]int(nil), m.inShape...) }

// Classes is the number of output classes.
func (m *Model) Classes() int { return m.classes }

// LabelsPerSample is 1 for (batch, classes) logits and T for (batch, T,
// classes): Step takes Batch x LabelsPerSample labels.
func (m *Model) LabelsPerSample() int { return m.perLab }

// lossInput reshapes logits to (rows, classes) for the cross-entropy.
func (m *Model) lossInput(h *G.Node) (*G.Node, error) {
	if h.Dims() == 2 {
		return h, nil
	}
	return G.Reshape(h, tensor.Shape{h.Shape().TotalSize() / m.classes, m.classes})
}

// checkLabels copies labels y into dst (as float32), checking count and range.
func (m *Model) checkLabels(dst []float32, y []int32) error {
	if len(y) != len(dst) {
		return fmt.Errorf("nn: got %d labels, want %d (batch x %d per sample)", len(y), len(dst), m.perLab)
	}
	for i, l := range y {
		if l < 0 || int(l) >= m.classes {
			return fmt.Errorf("nn: label %d (index %d) out of range [0, %d)", l, i, m.classes)
		}
		dst[i] = float32(l)
	}
	return nil
}

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

// LayerParams lists the parameter indices of each layer that has any, in
// forward order (for a store's prefetching).
func (m *Model) LayerParams() [][]int {
	var out [][]int
	for _, md := range m.mods {
		if md.n == 0 {
			continue
		}
		idx := make([]int, md.n)
		for j := range idx {
			idx[j] = md.first + j
		}
		out = append(out, idx)
	}
	return out
}

// SetBatchNormSync sets every batch-norm layer's Sync hook (nil: per rank
// again) and returns how many layers there are (syncbn.Convert).
func (m *Model) SetBatchNormSync(fn SyncFunc) int {
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

// top is the module whose children are the pipeline's layers: the root if
// it is a Sequential, else none (the root is the only layer).
func (m *Model) top() (children []int, ok bool) {
	if _, isSeq := m.Net.(*Sequential); isSeq {
		return m.mods[0].children, true
	}
	return nil, false
}

// NumLayers is the number of layers a pipeline may split the model
// between: the children of a Sequential model (activations and reshapes
// count), or 1.
func (m *Model) NumLayers() int {
	if ch, ok := m.top(); ok {
		return len(ch)
	}
	return 1
}

// layerMod is the module of pipeline layer i.
func (m *Model) layerMod(i int) int {
	if ch, ok := m.top(); ok {
		return ch[i]
	}
	return 0
}

// LayerParamRange returns, for layer i, the index in m.Params of its first
// parameter, how many parameters it has, and how many scalars they hold.
func (m *Model) LayerParamRange(i int) (first, count, scalars int) {
	if i >= m.NumLayers() {
		return len(m.Params), 0, 0
	}
	md := m.mods[m.layerMod(i)]
	for _, p := range m.Params[md.pfirst:md.pend] {
		scalars += p.Size
	}
	return md.pfirst, md.pend - md.pfirst, scalars
}

// StageRange returns the range [off, off+n) of Flat and Grad holding the
// parameters of layers [from, to).
func (m *Model) StageRange(from, to int) (off, n int) {
	first, _, _ := m.LayerParamRange(from)
	off = m.NumParams()
	if first < len(m.Params) {
		off = m.Params[first].Offset
	}
	for i := from; i < to; i++ {
		_, _, s := m.LayerParamRange(i)
		n += s
	}
	return off, n
}

// LayerShapes returns the activation shapes at every layer boundary for a
// batch: element i is the input shape of layer i, element NumLayers() the
// logits' shape.
func (m *Model) LayerShapes(batch int) ([]tensor.Shape, error) {
	if batch < 1 {
		return nil, fmt.Errorf("nn: batch %d < 1", batch)
	}
	return m.shapes(batch, 0, m.NumLayers())
}

// shapes builds layers [from, to) on placeholders and returns the shapes
// at their boundaries.
func (m *Model) shapes(batch, from, to int) (out []tensor.Shape, err error) {
	err = flat.Build(func() (err error) {
		out, err = m.shapesLocked(batch, from, to)
		return err
	})
	return out, err
}

// shapesLocked is shapes for a caller holding flat.Build's lock.
func (m *Model) shapesLocked(batch, from, to int) (out []tensor.Shape, err error) {
	{
		g := G.NewGraph()
		b := m.builder(g, true, batch, nil)
		b.shapesOnly = true
		h := G.NewTensor(g, tensor.Float32, len(m.inShape)+1, G.WithShape(append([]int{batch}, m.inShape...)...), G.WithName("x"))
		out = []tensor.Shape{h.Shape().Clone()}
		for i := from; i < to; i++ {
			if h, err = b.build(m.layerMod(i), h); err != nil {
				return nil, err
			}
			out = append(out, h.Shape().Clone())
		}
	}
	return out, nil
}

// builder starts building a graph of m: every graph build passes here, so
// the BLAS is installed before any graph of m runs (UseBLAS).
func (m *Model) builder(g *G.ExprGraph, train bool, batch int, hooks *hookSet) *Builder {
	UseBLAS()
	return &Builder{g: g, m: m, train: train, batch: batch, hooks: hooks,
		nodes: map[int]*G.Node{}, needDX: map[*G.Node]bool{}}
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
