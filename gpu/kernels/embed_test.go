package kernels_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/nn"
)

// The embedding's weight gradient (EmbeddingBackward's dw: a stable sort
// of the rows by id on the device, then each table row's dy rows added
// in increasing order) is nn's bit for bit, set and accumulated, at a
// byte vocabulary (256: one pass of the sort) and at GPT-2's (50257: two
// passes; 70000: three; 524300: three, and more table rows than the
// sums' grid covers), with ids repeated many times (one id a third of
// the rows, a 1000-row run of one id), ids never used (rows of zeros, or
// left as they were when accumulating), rows in several blocks of the
// sort (600: 3 blocks of 256; 140000: 512 blocks of 1 or 2 rounds of
// 256) and widths with a part-filled warp (33).
func TestEmbeddingGradVocab(t *testing.T) {
	for _, c := range []struct {
		num, n, tt, dim int
		skew            bool
	}{
		{256, 120, 5, 12, false}, {256, 20, 30, 33, true}, {256, 1, 1000, 3, true},
		{50257, 2, 37, 5, false}, {50257, 10, 60, 3, true}, {70000, 3, 11, 2, false}, {1, 4, 3, 2, false},
		{8*65535 + 20, 1, 7, 1, false}, // the sums' grid strides: table rows past 65535 blocks of 8
		{300, 1, 140000, 1, true},      // 547 rounds of 256 rows: the sort's 512 blocks take 1 or 2
	} {
		t.Run(fmt.Sprintf("V%d-%dx%dx%d-skew%v", c.num, c.n, c.tt, c.dim, c.skew), func(t *testing.T) {
			ids := make([]float32, c.n*c.tt)
			for i := range ids {
				v := (i*i*7919 + i*31) % c.num // spread: both digits, most rows unused at a large V
				switch {
				case c.skew && i%3 == 0:
					v = 32 % c.num // a third of the rows name one id
				case c.skew && i >= 200 && i < 1200:
					v = c.num - 1 // a run of one id
				case i == 5:
					v = c.num - 1
				case i%17 == 0:
					v = 0
				}
				ids[i] = float32(v)
			}
			testEmbeddingGrad(t, ids, c.n, c.tt, c.num, c.dim)
		})
	}
}

func testEmbeddingGrad(t *testing.T, ids []float32, n, tt, num, dim int) {
	const dev = 0
	k, s := setup(t, dev)
	m, err := nn.New("emb", nn.Seq(&nn.Embedding{Num: num, Dim: dim}, nn.Flatten{}), []int{tt}, 7)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.NewStage(0, 1, n, false) // the embedding
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var cpu []float32
	st.OnGrad = func(i int, g []float32) {
		if i == 0 {
			cpu = append([]float32(nil), g...)
		}
	}
	dy := devtest.Vals(140, n*tt*dim, 1)
	if _, err := st.Forward(ids); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Backward(ids, dy); err != nil {
		t.Fatal(err)
	}
	if ref := embedGradRef(ids, dy, num, dim); fmt.Sprint(ref) != fmt.Sprint(cpu) {
		t.Fatal("the test's reference is not nn's")
	}
	dIDs, dDY := devtest.Upload(t, dev, ids), devtest.Upload(t, dev, dy)
	g0 := devtest.Vals(141, num*dim, 1)
	gw := devtest.Upload(t, dev, g0)
	if err := k.EmbeddingBackward(s, gw, 0, dDY, dIDs, n*tt, num, dim, tt, false); err != nil {
		t.Fatal(err)
	}
	same(t, "dweight", devtest.Floats(t, dev, gw, num*dim), cpu)
	devtest.Put(t, dev, gw, g0)
	if err := k.EmbeddingBackward(s, gw, 0, dDY, dIDs, n*tt, num, dim, tt, true); err != nil {
		t.Fatal(err)
	}
	acc := make([]float32, num*dim)
	for i := range acc {
		acc[i] = g0[i] + cpu[i]
	}
	same(t, "accumulated dweight", devtest.Floats(t, dev, gw, num*dim), acc)
}

// embedGradRef is nn's weight gradient written out: each table row the
// sum of dy's rows naming it, in order, from 0; a row whose id names no
// table row adds to none.
func embedGradRef(ids, dy []float32, num, dim int) []float32 {
	dw := make([]float32, num*dim)
	for r, f := range ids {
		id := int(f)
		if f != f || float32(id) != f || id < 0 || id >= num {
			continue
		}
		for d := range dim {
			dw[id*dim+d] += dy[r*dim+d]
		}
	}
	return dw
}

// Ids that name no table row (num, -1, 1.5, NaN: Embedding gives their
// rows NaNs) add to no row of the gradient, among rows of id 0 (the
// sort's key of a bad id, which table row 0's warps skip); and no rows
// at all: dw zeroed, or left when accumulating.
func TestEmbeddingGradBadIDs(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, num := range []int{11, 50257} {
		const rows, dim = 300, 5
		ids := make([]float32, rows)
		for i := range ids {
			ids[i] = float32((i * 7) % 3 * (num / 3)) // ids 0, num/3, 2 num/3
		}
		for i, b := range []float32{float32(num), -1, 1.5, float32(math.NaN()), float32(num + 1000)} {
			ids[3+40*i], ids[4+40*i] = b, b
		}
		dy := devtest.Vals(142, rows*dim, 1)
		dIDs, dDY := devtest.Upload(t, dev, ids), devtest.Upload(t, dev, dy)
		gw := devtest.Upload(t, dev, devtest.Vals(143, num*dim, 1))
		if err := k.EmbeddingBackward(s, gw, 0, dDY, dIDs, rows, num, dim, 1, false); err != nil {
			t.Fatal(err)
		}
		same(t, fmt.Sprintf("dweight (table of %d, bad ids)", num), devtest.Floats(t, dev, gw, num*dim), embedGradRef(ids, dy, num, dim))
	}
	const num, dim = 7, 3
	g0 := devtest.Vals(144, num*dim, 1)
	gw := devtest.Upload(t, dev, g0)
	if err := k.EmbeddingBackward(s, gw, 0, gw, gw, 0, num, dim, 1, true); err != nil {
		t.Fatal(err)
	}
	same(t, "dweight of no rows, accumulated", devtest.Floats(t, dev, gw, num*dim), g0)
	if err := k.EmbeddingBackward(s, gw, 0, gw, gw, 0, num, dim, 1, false); err != nil {
		t.Fatal(err)
	}
	same(t, "dweight of no rows", devtest.Floats(t, dev, gw, num*dim), make([]float32, num*dim))
}
