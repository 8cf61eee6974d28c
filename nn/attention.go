package nn

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// CausalSelfAttention is multi-head self-attention in which position t
// attends to positions 0..t, over (N, T, Dim) input. Its parameters carry
// the names and layout of PyTorch's nn.MultiheadAttention(Dim, Heads,
// batch_first=True) ("in_proj_weight" [3 Dim, Dim] holding the query, key
// and value projections, "in_proj_bias", "out_proj.weight",
// "out_proj.bias"), which computes the same with a causal attn_mask.
type CausalSelfAttention struct{ Dim, Heads int }

func (l *CausalSelfAttention) Params() []Param {
	c := l.Dim
	return []Param{
		// PyTorch: xavier_uniform_ for in_proj_weight, zeros for the biases.
		{Name: "in_proj_weight", Shape: []int{c, 3 * c}, Torch: []int{3 * c, c}, TransT: true, Init: Uniform(math.Sqrt(6 / float64(4*c)))},
		{Name: "in_proj_bias", Shape: []int{3 * c}, Init: Fill(0)},
		{Name: "out_proj.weight", Shape: []int{c, c}, Torch: []int{c, c}, TransT: true, Init: FanIn(c)},
		{Name: "out_proj.bias", Shape: []int{c}, Init: Fill(0)},
	}
}

func (l *CausalSelfAttention) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	s := x.Shape()
	if l.Heads < 1 || l.Dim%l.Heads != 0 {
		return nil, fmt.Errorf("attention: %d heads do not divide dimension %d", l.Heads, l.Dim)
	}
	if len(s) != 3 || s[2] != l.Dim {
		return nil, fmt.Errorf("attention over %d: input shape %v; want (N, T, %d)", l.Dim, s, l.Dim)
	}
	qkv, err := affine(b, x, b.Param(0), b.Param(1), l.Dim, 3*l.Dim)
	if err != nil {
		return nil, err
	}
	o, err := G.ApplyOp(&attnOp{baseOp: baseOp{nextID(), "attention"}, heads: l.Heads, st: &attnState{}}, qkv)
	if err != nil {
		return nil, err
	}
	return affine(b, o, b.Param(2), b.Param(3), l.Dim, l.Dim)
}

// attnState keeps the attention probabilities for backward.
type attnState struct{ p []float64 } // (N, H, T, T), lower triangle

// attnOp: (N, T, 3C) queries|keys|values -> (N, T, C), causal, H heads.
type attnOp struct {
	baseOp
	heads int
	st    *attnState
}

func (op *attnOp) Arity() int       { return 1 }
func (op *attnOp) Type() hm.Type    { return hm.NewFnType(tt(3), tt(3)) }
func (op *attnOp) ReturnsPtr() bool { return false }
func (op *attnOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	s := ds[0].(tensor.Shape)
	if len(s) != 3 || s[2]%3 != 0 {
		return nil, fmt.Errorf("nn: attention input %v; want (N, T, 3C)", s)
	}
	return tensor.Shape{s[0], s[1], s[2] / 3}, nil
}

// geom returns N, T, C and the head size.
func (op *attnOp) geom(s tensor.Shape) (n, t, c, d int) {
	return s[0], s[1], s[2] / 3, s[2] / 3 / op.heads
}

func (op *attnOp) Do(v ...G.Value) (G.Value, error) {
	qkv, s, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	n, t, c, d := op.geom(s)
	h := op.heads
	scale := 1 / math.Sqrt(float64(d))
	p := make([]float64, n*h*t*t)
	out := make([]float32, n*t*c)
	row := func(b, i int) []float32 { return qkv[(b*t+i)*3*c : (b*t+i+1)*3*c] }
	for b := 0; b < n; b++ {
		for hd := 0; hd < h; hd++ {
			off := hd * d
			for i := 0; i < t; i++ {
				q := row(b, i)[off : off+d]
				pr := p[((b*h+hd)*t+i)*t:][:i+1]
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					k := row(b, j)[c+off : c+off+d]
					var dot float64
					for e := range q {
						dot += float64(q[e]) * float64(k[e])
					}
					pr[j] = dot * scale
					mx = math.Max(mx, pr[j])
				}
				var sum float64
				for j := range pr {
					pr[j] = math.Exp(pr[j] - mx)
					sum += pr[j]
				}
				o := out[(b*t+i)*c+off : (b*t+i)*c+off+d]
				acc := make([]float64, d)
				for j := range pr {
					pr[j] /= sum
					vv := row(b, j)[2*c+off : 2*c+off+d]
					for e := range acc {
						acc[e] += pr[j] * float64(vv[e])
					}
				}
				for e := range o {
					o[e] = float32(acc[e])
				}
			}
		}
	}
	op.st.p = p
	return tensor.New(tensor.WithShape(n, t, c), tensor.WithBacking(out)), nil
}

func (op *attnOp) DiffWRT(int) []bool { return []bool{true} }
func (op *attnOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&attnGradOp{baseOp: baseOp{nextID(), "attention'"}, fwd: op}, inputs[0], grad)
	return G.Nodes{d}, err
}

// attnGradOp: (qkv, dout) -> dqkv.
type attnGradOp struct {
	baseOp
	fwd *attnOp
}

func (op *attnGradOp) Arity() int       { return 2 }
func (op *attnGradOp) Type() hm.Type    { return hm.NewFnType(tt(3), tt(3), tt(3)) }
func (op *attnGradOp) ReturnsPtr() bool { return false }
func (op *attnGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}

func (op *attnGradOp) Do(v ...G.Value) (G.Value, error) {
	qkv, s, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	dout, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	n, t, c, d := op.fwd.geom(s)
	h := op.fwd.heads
	p := op.fwd.st.p
	if len(p) != n*h*t*t {
		return nil, fmt.Errorf("nn: attention gradient without its forward pass")
	}
	scale := 1 / math.Sqrt(float64(d))
	dq := make([]float64, len(qkv))
	at := func(b, i int) int { return (b*t + i) * 3 * c }
	dp := make([]float64, t)
	for b := 0; b < n; b++ {
		for hd := 0; hd < h; hd++ {
			off := hd * d
			for i := 0; i < t; i++ {
				pr := p[((b*h+hd)*t+i)*t:][:i+1]
				do := dout[(b*t+i)*c+off : (b*t+i)*c+off+d]
				// dP[j] = do . v_j; dV_j += P[j] do
				var dot float64
				for j := range pr {
					vo := at(b, j) + 2*c + off
					var s float64
					for e := 0; e < d; e++ {
						s += float64(do[e]) * float64(qkv[vo+e])
						dq[vo+e] += pr[j] * float64(do[e])
					}
					dp[j] = s
					dot += pr[j] * s
				}
				qo := at(b, i) + off
				for j := range pr {
					ds := pr[j] * (dp[j] - dot) * scale
					ko := at(b, j) + c + off
					for e := 0; e < d; e++ {
						dq[qo+e] += ds * float64(qkv[ko+e])
						dq[ko+e] += ds * float64(qkv[qo+e])
					}
				}
			}
		}
	}
	out := make([]float32, len(dq))
	for i, x := range dq {
		out[i] = float32(x)
	}
	return tensor.New(tensor.WithShape(s.Clone()...), tensor.WithBacking(out)), nil
}
