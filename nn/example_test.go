package nn_test

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

// Scale is a user-defined layer: y = x * weight, per feature.
type Scale struct{ C int }

func (l *Scale) Params() []nn.Param {
	return []nn.Param{{Name: "weight", Shape: []int{l.C}, Init: nn.Fill(1)}}
}

func (l *Scale) Fwd(b *nn.Builder, x *G.Node) (*G.Node, error) {
	return G.BroadcastHadamardProd(x, b.Param(0), nil, []byte{0})
}

// shift is a layer in another library's style: its weights come in at
// construction and it has a Fwd(x) method.
type shift struct{ b *G.Node }

func (s shift) Fwd(x *G.Node) (*G.Node, error) { return G.BroadcastAdd(x, s.b, nil, []byte{0}) }

// A model of nn layers, a user-defined layer and an adapted one, trained
// with SGD on one process. The same model trains with ddp.New, zero.New
// (stages 1 to 3) and pipeline.New unchanged.
func Example() {
	adapted := nn.Adapt([]nn.Param{{Name: "bias", Shape: []int{8}}},
		func(ws []*G.Node) (nn.Fwder, error) { return shift{ws[0]}, nil })
	net := nn.Seq(&nn.Linear{In: 4, Out: 8}, &Scale{C: 8}, adapted, nn.GELU{}, &nn.Linear{In: 8, Out: 2})
	m, err := nn.New("example", net, []int{4}, 1)
	if err != nil {
		panic(err)
	}
	for _, p := range m.Params {
		fmt.Println(p.Name, p.Torch)
	}
	gr, err := m.NewGraph(8, true)
	if err != nil {
		panic(err)
	}
	opt, _ := optim.New(optim.Config{Name: "sgd", LR: 0.5}, m.NumParams())
	x := make([]float32, 8*4)
	y := make([]int32, 8)
	for i := range y {
		y[i] = int32(i % 2)
		x[i*4+i%2] = 1 // the label's feature is on
	}
	var first, last float32
	for step := 0; step < 50; step++ {
		loss, err := gr.Step(context.Background(), x, y)
		if err != nil {
			panic(err)
		}
		opt.Step(m.Flat.Value, m.Flat.Grad)
		m.ZeroGrad()
		if step == 0 {
			first = loss
		}
		last = loss
	}
	fmt.Println("loss falls:", last < first/10)
	// Output:
	// 0.weight [8 4]
	// 0.bias [8]
	// 1.weight [8]
	// 2.bias [8]
	// 4.weight [2 8]
	// 4.bias [2]
	// loss falls: true
}
