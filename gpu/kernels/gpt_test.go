package kernels_test

import (
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/nn"
)

// Embedding then PositionEmbedding (gpt's first two layers), forward and
// backward, bit for bit nn's: the rows copied and the position added in
// one float32 add; the weight's gradient summed over the positions that
// use each row in order (no atomics), the position's over the batch in
// order. An id outside the table gives a row of NaNs (nn refuses it).
func TestEmbedding(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	const n, tt, num, dim = 3, 5, 11, 12
	m, err := nn.New("emb", nn.Seq(&nn.Embedding{Num: num, Dim: dim}, &nn.PositionEmbedding{T: tt, Dim: dim, Std: 0.5}, nn.Flatten{}), []int{tt}, 7)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.NewStage(0, 2, n, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	grads := map[int][]float32{}
	st.OnGrad = func(i int, g []float32) { grads[i] = append([]float32(nil), g...) }
	ids := make([]float32, n*tt)
	for i := range ids {
		ids[i] = float32((i * i * 7) % num) // repeats, and rows unused
	}
	dy := vals(120, n*tt*dim, 1)
	want, err := st.Forward(ids)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Backward(ids, dy); err != nil {
		t.Fatal(err)
	}
	w, p := m.Params[0], m.Params[1]
	dW, dP := devtest.Upload(t, dev, m.Flat.Value[w.Offset:w.Offset+w.Size]), devtest.Upload(t, dev, m.Flat.Value[p.Offset:p.Offset+p.Size])
	dIDs, dDY := devtest.Upload(t, dev, ids), devtest.Upload(t, dev, dy)
	y := devtest.Alloc(t, dev, n*tt*dim, 4)
	g0 := vals(121, num*dim, 1)
	gw, gp := devtest.Upload(t, dev, g0), devtest.Upload(t, dev, g0[:tt*dim])
	if err := k.Embedding(s, y, dIDs, dW, dP, n*tt, num, dim, tt); err != nil {
		t.Fatal(err)
	}
	if err := k.EmbeddingBackward(s, gw, gp, dDY, dIDs, n*tt, num, dim, tt, false); err != nil {
		t.Fatal(err)
	}
	same(t, "y", devtest.Floats(t, dev, y, n*tt*dim), want)
	same(t, "dweight", devtest.Floats(t, dev, gw, num*dim), grads[0])
	same(t, "dposition", devtest.Floats(t, dev, gp, tt*dim), grads[1])
	// accumulate adds; no position embedding
	devtest.Put(t, dev, gw, g0)
	if err := k.EmbeddingBackward(s, gw, 0, dDY, dIDs, n*tt, num, dim, tt, true); err != nil {
		t.Fatal(err)
	}
	acc := make([]float32, num*dim)
	for i := range acc {
		acc[i] = g0[i] + grads[0][i]
	}
	same(t, "accumulated dweight", devtest.Floats(t, dev, gw, num*dim), acc)
	// a bad id: NaNs
	bad := append([]float32(nil), ids...)
	bad[1], bad[2] = num, 1.5
	devtest.Put(t, dev, dIDs, bad)
	if err := k.Embedding(s, y, dIDs, dW, 0, n*tt, num, dim, tt); err != nil {
		t.Fatal(err)
	}
	got := devtest.Floats(t, dev, y, n*tt*dim)
	for i, v := range got {
		if r := i / dim; (r == 1 || r == 2) != math.IsNaN(float64(v)) {
			t.Fatalf("row %d (id %v): %v", r, bad[r], v)
		}
	}
}
