package nn

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
)

// Layer is one building block of a network: it declares its learnables
// and builds its forward computation on a gorgonia graph. It is the one
// interface a user-defined layer implements; a model of such layers gets
// DDP, ZeRO stages 1 to 3 and pipeline stages with no further code.
//
// Fwd must take the learnables from b.Param (never make its own), and its
// output must depend on everything it computes. Gradients are gorgonia's:
// write Fwd with gorgonia's ops (or custom ops with SymDiff) and nn
// differentiates it. Fwd is called once per graph the model builds
// (training and evaluation graphs, pipeline stages), so it must not keep
// nodes between calls.
type Layer interface {
	// Params declares the layer's learnables, in a fixed order.
	Params() []Param
	// Fwd builds the layer's output for input x.
	Fwd(b *Builder, x *G.Node) (*G.Node, error)
}

// Container is a layer made of other layers (Sequential, Residual). Its
// learnables are its children's, named "<child>.<param>" as in a PyTorch
// state_dict; its own Params must be empty. Fwd builds the children with
// b.Child.
type Container interface {
	Layer
	Children() []Child
}

// Child is one named sub-layer of a Container.
type Child struct {
	Name  string
	Layer Layer
}

// Param declares one learnable tensor of a layer.
type Param struct {
	Name  string // PyTorch name within the layer: "weight", "bias"
	Shape []int  // shape in the graph
	// Torch is the shape in PyTorch's state_dict (nil: Shape). With TransT
	// the tensor is stored transposed relative to PyTorch (Linear's weight
	// is [in, out] here and [out, in] there); checkpoints transpose it.
	Torch  []int
	TransT bool
	// Init sets the initial values; nil leaves zeros.
	Init InitFunc
}

// InitFunc fills dst with initial values, drawing from uniform (uniform
// on [0, 1), the model's seeded generator: same seed, same model).
type InitFunc func(dst []float32, uniform func() float64)

// Uniform initialises uniformly on (-bound, bound) (PyTorch's default
// for Linear and Conv2d is bound = 1/sqrt(fan_in)).
func Uniform(bound float64) InitFunc {
	return func(dst []float32, u func() float64) {
		for i := range dst {
			dst[i] = float32((2*u() - 1) * bound)
		}
	}
}

// FanIn is Uniform(1/sqrt(fanIn)).
func FanIn(fanIn int) InitFunc { return Uniform(1 / math.Sqrt(float64(fanIn))) }

// Fill sets every value to v (it draws nothing from the generator).
func Fill(v float32) InitFunc {
	return func(dst []float32, _ func() float64) {
		for i := range dst {
			dst[i] = v
		}
	}
}

// Normal initialises from N(0, std^2) (Box-Muller over uniform).
func Normal(std float64) InitFunc {
	return func(dst []float32, u func() float64) {
		for i := range dst {
			u1 := u()
			for u1 == 0 {
				u1 = u()
			}
			dst[i] = float32(std * math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u()))
		}
	}
}

// Fwder is the forward method of the layers of Go's other gorgonia layer
// libraries (golgi, goras).
type Fwder interface {
	Fwd(x *G.Node) (*G.Node, error)
}

// Adapt wraps a layer written for another gorgonia layer library: params
// declares its learnables, and build makes the layer over the learnable
// nodes nn supplies (one per Param, in order), for example a golgi layer
// constructed with those nodes as its weights. build is called once per
// graph.
func Adapt(params []Param, build func(learnables []*G.Node) (Fwder, error)) Layer {
	return &adapted{params: params, build: build}
}

type adapted struct {
	params []Param
	build  func([]*G.Node) (Fwder, error)
}

func (a *adapted) Params() []Param { return a.params }
func (a *adapted) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	ps := make([]*G.Node, len(a.params))
	for k := range ps {
		ps[k] = b.Param(k)
	}
	l, err := a.build(ps)
	if err != nil {
		return nil, err
	}
	return l.Fwd(x)
}

// Func makes a layer from a forward function (the function form of
// Layer: params declares the learnables, fwd builds the output).
func Func(params []Param, fwd func(b *Builder, x *G.Node) (*G.Node, error)) Layer {
	return &funcLayer{params, fwd}
}

type funcLayer struct {
	params []Param
	fwd    func(*Builder, *G.Node) (*G.Node, error)
}

func (f *funcLayer) Params() []Param                            { return f.params }
func (f *funcLayer) Fwd(b *Builder, x *G.Node) (*G.Node, error) { return f.fwd(b, x) }

// module is one layer of a model's layer tree, flattened.
type module struct {
	l        Layer
	prefix   string // "" for the root, "0", "3.fn", ...
	first, n int    // its own parameters: model params [first, first+n)
	children []int  // module indices
	// pfirst, pend: the parameters of the whole subtree.
	pfirst, pend int
}

func (m module) name(p string) string {
	if m.prefix == "" {
		return p
	}
	return m.prefix + "." + p
}

// flatten walks the layer tree depth-first, children in order.
func flattenTree(root Layer) ([]module, []Param, error) {
	var mods []module
	var params []Param
	var walk func(l Layer, prefix string, depth int) (int, error)
	walk = func(l Layer, prefix string, depth int) (int, error) {
		if l == nil {
			return 0, fmt.Errorf("nn: layer %q is nil", prefix)
		}
		if depth > 64 {
			return 0, fmt.Errorf("nn: layers nested deeper than 64 at %q (a container holds itself?)", prefix)
		}
		id := len(mods)
		mods = append(mods, module{l: l, prefix: prefix, first: len(params), pfirst: len(params)})
		own := l.Params()
		c, isC := l.(Container)
		if isC && len(own) > 0 {
			return 0, fmt.Errorf("nn: container %q (%T) declares parameters of its own; give them to a child", prefix, l)
		}
		seen := map[string]bool{}
		for _, p := range own {
			if p.Name == "" || seen[p.Name] {
				return 0, fmt.Errorf("nn: layer %q (%T): parameter name %q empty or repeated", prefix, l, p.Name)
			}
			seen[p.Name] = true
			if prod(p.Shape) < 1 {
				return 0, fmt.Errorf("nn: layer %q (%T): parameter %q has shape %v", prefix, l, p.Name, p.Shape)
			}
			if p.Torch != nil && prod(p.Torch) != prod(p.Shape) {
				return 0, fmt.Errorf("nn: layer %q (%T): parameter %q: PyTorch shape %v does not hold shape %v", prefix, l, p.Name, p.Torch, p.Shape)
			}
			params = append(params, p)
		}
		mods[id].n = len(own)
		if isC {
			names := map[string]bool{}
			for _, ch := range c.Children() {
				if ch.Name == "" || names[ch.Name] {
					return 0, fmt.Errorf("nn: container %q: child name %q empty or repeated", prefix, ch.Name)
				}
				names[ch.Name] = true
				cp := ch.Name
				if prefix != "" {
					cp = prefix + "." + ch.Name
				}
				cid, err := walk(ch.Layer, cp, depth+1)
				if err != nil {
					return 0, err
				}
				mods[id].children = append(mods[id].children, cid)
			}
		}
		mods[id].pend = len(params)
		return id, nil
	}
	if _, err := walk(root, "", 0); err != nil {
		return nil, nil, err
	}
	return mods, params, nil
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}
