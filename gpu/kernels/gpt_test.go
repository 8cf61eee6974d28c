package kernels_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// Embedding then PositionEmbedding (gpt's first two layers), forward and
// backward, bit for bit nn's: the rows copied and the position added in
// one float32 add; the weight's gradient summed over the positions that
// use each row in order (no atomics), the position's over the batch in
// order. An id outside the table gives a row of NaNs (nn refuses it).
// Widths 12 (four values a thread), 5 and 12 into an output 4 bytes off
// 16-byte alignment (one a thread); 15 rows, and 45 with widths of 12
// and 70 (the gradient's warps of 32 values, the third part-filled); 600
// rows (the gradient's sort in 3 blocks of 256 positions, an id naming
// 40 and more rows: their values loaded in groups of 32).
// TestEmbeddingGradVocab: larger tables.
func TestEmbedding(t *testing.T) {
	for _, c := range []struct{ n, dim, shift int }{{3, 12, 0}, {3, 5, 0}, {3, 12, 1}, {9, 12, 0}, {9, 70, 0}, {120, 12, 0}} {
		t.Run(fmt.Sprintf("%dx%d+%d", c.n, c.dim, c.shift), func(t *testing.T) { testEmbedding(t, c.n, c.dim, c.shift) })
	}
}

func testEmbedding(t *testing.T, n, dim, shift int) {
	const dev = 0
	k, s := setup(t, dev)
	const tt, num = 5, 11
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
	dy := devtest.Vals(120, n*tt*dim, 1)
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
	y := devtest.Alloc(t, dev, n*tt*dim+shift, 4) + uintptr(4*shift)
	g0 := devtest.Vals(121, num*dim, 1)
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

// The causal softmax of each row of scores (row i of each T x T matrix
// over its first i+1 entries, zeros above) against float64 within
// kernels.SoftmaxTol (relative), and its backward, dS = P (dP - sum P dP)
// scale, against float64 from the same P within GemmTol of the terms.
func TestCausalSoftmax(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range [][2]int{{3, 7}, {2, 40}, {1, 1}, {1, 70}} {
		b, tt := sh[0], sh[1]
		n := b * tt * tt
		sc, dp := devtest.Vals(130, n, 6), devtest.Vals(131, n, 1)
		dS, dDP := devtest.Upload(t, dev, sc), devtest.Upload(t, dev, dp)
		if err := k.CausalSoftmax(s, dS, b*tt, tt); err != nil {
			t.Fatal(err)
		}
		const scale = 0.35
		if err := k.CausalSoftmaxBackward(s, dDP, dS, b*tt, tt, scale); err != nil {
			t.Fatal(err)
		}
		p, ds := devtest.Floats(t, dev, dS, n), devtest.Floats(t, dev, dDP, n)
		wp, tp := make([]float64, n), make([]float64, n)
		wds, tds := make([]float64, n), make([]float64, n)
		for r := 0; r < b*tt; r++ {
			row, i := sc[r*tt:(r+1)*tt], r%tt
			mx := math.Inf(-1)
			for _, v := range row[:i+1] {
				mx = math.Max(mx, float64(v))
			}
			var sum, dot, adot float64
			for _, v := range row[:i+1] {
				sum += math.Exp(float64(v) - mx)
			}
			for j := range row[:i+1] {
				wp[r*tt+j] = math.Exp(float64(row[j])-mx) / sum
				tp[r*tt+j] = kernels.SoftmaxTol * wp[r*tt+j]
				pd := float64(p[r*tt+j]) * float64(dp[r*tt+j])
				dot += pd
				adot += math.Abs(pd)
			}
			for j := range row[:i+1] {
				pv, d := float64(p[r*tt+j]), float64(dp[r*tt+j])
				wds[r*tt+j] = pv * (d - dot) * scale
				tds[r*tt+j] = kernels.GemmTol(i+4) * math.Abs(pv) * (math.Abs(d) + adot) * scale
			}
		}
		near(t, "p", p, wp, tp)
		near(t, "ds", ds, wds, tds)
	}
}

// nn's CausalSelfAttention on the device (LinearForward for the
// projections, AttentionForward between them; their backward in reverse)
// against nn's layer on the CPU path: every value of the output and of
// every gradient within kernels.AttentionTol of the largest of its
// tensor (the products differ in summation order; the softmax follows
// nn's operations).
func TestAttention(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	h := cublasHandle(t, dev, s)
	// D = 4, 8, 4 (the heads copied four values a thread), 3 (one), and
	// D = 4 with qkv and the workspace 4 bytes off 16-byte alignment (one)
	for i, g := range []kernels.AttentionGeom{{N: 2, T: 5, C: 12, H: 3}, {N: 1, T: 33, C: 16, H: 2}, {N: 3, T: 1, C: 4, H: 1}, {N: 2, T: 3, C: 6, H: 2}, {N: 2, T: 5, C: 12, H: 3}} {
		shift := 0
		if i == 4 {
			shift = 1
		}
		c, rows := g.C, g.N*g.T
		x, dy := devtest.Vals(140, rows*c, 1), devtest.Vals(141, rows*c, 1)
		win, bin, wout, bout := devtest.Vals(142, c*3*c, 0.5), devtest.Vals(143, 3*c, 0.1), devtest.Vals(144, c*c, 0.3), devtest.Vals(145, c, 0.1)
		cpu := newCPULayer(t, &nn.CausalSelfAttention{Dim: c, Heads: g.H}, []int{g.T, c}, g.N)
		for i, v := range [][]float32{win, bin, wout, bout} {
			cpu.set(i, v)
		}
		want := cpu.forward(t, x)
		wdx := cpu.backward(t, x, dy)

		dX, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy)
		dWin, dBin, dWout, dBout := devtest.Upload(t, dev, win), devtest.Upload(t, dev, bin), devtest.Upload(t, dev, wout), devtest.Upload(t, dev, bout)
		qkv, att, y := devtest.Alloc(t, dev, rows*3*c+shift, 4)+uintptr(4*shift), devtest.Alloc(t, dev, rows*c, 4), devtest.Alloc(t, dev, rows*c, 4)
		p, ws := devtest.Alloc(t, dev, g.Probs(), 4), devtest.Alloc(t, dev, g.Workspace()+shift, 4)+uintptr(4*shift)
		dqkv, datt, dx := devtest.Alloc(t, dev, rows*3*c, 4), devtest.Alloc(t, dev, rows*c, 4), devtest.Alloc(t, dev, rows*c, 4)
		gWin, gBin, gWout, gBout := devtest.Alloc(t, dev, len(win), 4), devtest.Alloc(t, dev, len(bin), 4), devtest.Alloc(t, dev, len(wout), 4), devtest.Alloc(t, dev, len(bout), 4)
		for _, err := range []error{
			kernels.LinearForward(h, k, qkv, dX, dWin, dBin, rows, c, 3*c),
			kernels.AttentionForward(h, k, att, p, qkv, ws, g),
			kernels.LinearForward(h, k, y, att, dWout, dBout, rows, c, c),
			kernels.LinearBackward(h, k, datt, gWout, gBout, att, dWout, dDY, rows, c, c, false),
			kernels.AttentionBackward(h, k, dqkv, datt, qkv, p, ws, g),
			kernels.LinearBackward(h, k, dx, gWin, gBin, dX, dWin, dqkv, rows, c, 3*c, false),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		byMax := func(what string, got, want []float32) {
			t.Helper()
			nearByMax(t, fmt.Sprintf("%+v %s", g, what), got, want)
		}
		byMax("y", devtest.Floats(t, dev, y, rows*c), want)
		byMax("dx", devtest.Floats(t, dev, dx, rows*c), wdx)
		byMax("d in_proj_weight", devtest.Floats(t, dev, gWin, len(win)), cpu.grads[0])
		byMax("d in_proj_bias", devtest.Floats(t, dev, gBin, len(bin)), cpu.grads[1])
		byMax("d out_proj.weight", devtest.Floats(t, dev, gWout, len(wout)), cpu.grads[2])
		byMax("d out_proj.bias", devtest.Floats(t, dev, gBout, len(bout)), cpu.grads[3])
	}
}

// Add (nn's Residual) is one float32 add: exact; in place works.
// Aligned (four values a thread, and the last 1001 % 4 one each) and b
// 4 bytes off 16-byte alignment (one a thread).
func TestAdd(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	const n = 1001
	for shift := 0; shift < 2; shift++ {
		a, b := devtest.Vals(180, n, 1), devtest.Vals(181, n, 1e-3)
		da, db := devtest.Upload(t, dev, a), devtest.Alloc(t, dev, n+shift, 4)+uintptr(4*shift)
		devtest.Put(t, dev, db, b)
		if err := k.Add(s, da, da, db, n); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, n)
		for i := range want {
			want[i] = a[i] + b[i]
		}
		same(t, fmt.Sprintf("a+b (b off by %d)", 4*shift), devtest.Floats(t, dev, da, n), want)
	}
}

// One transformer layer of models' gpt (two residual blocks: x +
// attention(LayerNorm(x)), then x + Linear(GELU(Linear(LayerNorm(x))))),
// composed on the device from LayerNorm, LinearForward over the (N T)
// rows, AttentionForward, GELU and Add, and back, against the same layer
// of nn on the CPU path: the output and every gradient within
// kernels.AttentionTol of the largest value of its tensor.
func TestGPTBlock(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	h := cublasHandle(t, dev, s)
	g := kernels.AttentionGeom{N: 2, T: 6, C: 16, H: 2}
	c, rows := g.C, g.N*g.T
	block := nn.Seq(
		&nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: c}, &nn.CausalSelfAttention{Dim: c, Heads: g.H})},
		&nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: c}, &nn.Linear{In: c, Out: 4 * c}, nn.GELU{}, &nn.Linear{In: 4 * c, Out: c})})
	cpu := newCPULayer(t, block, []int{g.T, c}, g.N)
	// parameters: ln1 (w, b), in_proj (w, b), out_proj (w, b), ln2 (w, b), fc1 (w, b), fc2 (w, b)
	sizes := []int{c, c, c * 3 * c, 3 * c, c * c, c, c, c, c * 4 * c, 4 * c, 4 * c * c, c}
	scales := []float32{1, 0.2, 0.4, 0.1, 0.3, 0.1, 1, 0.2, 0.4, 0.1, 0.2, 0.1}
	var dp, dgr []uintptr
	for i, n := range sizes {
		v := devtest.Vals(190+i, n, scales[i])
		if i == 0 || i == 6 {
			for j := range v {
				v[j] += 1 // LayerNorm's scale about 1
			}
		}
		cpu.set(i, v)
		dp, dgr = append(dp, devtest.Upload(t, dev, v)), append(dgr, devtest.Alloc(t, dev, n, 4))
	}
	x, dy := devtest.Vals(210, rows*c, 1), devtest.Vals(211, rows*c, 1)
	want, wdx := cpu.forward(t, x), cpu.backward(t, x, dy)

	buf := func(n int) uintptr { return devtest.Alloc(t, dev, n, 4) }
	dX, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy)
	h1, xh1, inv1, qkv, att, a, x2 := buf(rows*c), buf(rows*c), buf(rows), buf(rows*3*c), buf(rows*c), buf(rows*c), buf(rows*c)
	h2, xh2, inv2, u, gu, v, y := buf(rows*c), buf(rows*c), buf(rows), buf(rows*4*c), buf(rows*4*c), buf(rows*c), buf(rows*c)
	p, ws := buf(g.Probs()), buf(g.Workspace())
	dgu, du, dh2, dx2, datt, dqkv, dh1, dx := buf(rows*4*c), buf(rows*4*c), buf(rows*c), buf(rows*c), buf(rows*c), buf(rows*3*c), buf(rows*c), buf(rows*c)
	for i, err := range []error{
		k.LayerNormForward(s, h1, xh1, inv1, dX, dp[0], dp[1], rows, c, 1e-5),
		kernels.LinearForward(h, k, qkv, h1, dp[2], dp[3], rows, c, 3*c),
		kernels.AttentionForward(h, k, att, p, qkv, ws, g),
		kernels.LinearForward(h, k, a, att, dp[4], dp[5], rows, c, c),
		k.Add(s, x2, dX, a, rows*c),
		k.LayerNormForward(s, h2, xh2, inv2, x2, dp[6], dp[7], rows, c, 1e-5),
		kernels.LinearForward(h, k, u, h2, dp[8], dp[9], rows, c, 4*c),
		k.GELU(s, gu, u, rows*4*c),
		kernels.LinearForward(h, k, v, gu, dp[10], dp[11], rows, 4*c, c),
		k.Add(s, y, x2, v, rows*c),
		// backward
		kernels.LinearBackward(h, k, dgu, dgr[10], dgr[11], gu, dp[10], dDY, rows, 4*c, c, false),
		k.GELUBackward(s, du, dgu, u, rows*4*c),
		kernels.LinearBackward(h, k, dh2, dgr[8], dgr[9], h2, dp[8], du, rows, c, 4*c, false),
		k.LayerNormBackward(s, dx2, dgr[6], dgr[7], dh2, xh2, inv2, dp[6], rows, c, false),
		k.Add(s, dx2, dx2, dDY, rows*c),
		kernels.LinearBackward(h, k, datt, dgr[4], dgr[5], att, dp[4], dx2, rows, c, c, false),
		kernels.AttentionBackward(h, k, dqkv, datt, qkv, p, ws, g),
		kernels.LinearBackward(h, k, dh1, dgr[2], dgr[3], h1, dp[2], dqkv, rows, c, 3*c, false),
		k.LayerNormBackward(s, dx, dgr[0], dgr[1], dh1, xh1, inv1, dp[0], rows, c, false),
		k.Add(s, dx, dx, dx2, rows*c),
	} {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	nearByMax(t, "y", devtest.Floats(t, dev, y, rows*c), want)
	nearByMax(t, "dx", devtest.Floats(t, dev, dx, rows*c), wdx)
	for i, n := range sizes {
		nearByMax(t, fmt.Sprintf("parameter %d's gradient", i), devtest.Floats(t, dev, dgr[i], n), cpu.grads[i])
	}
}

// nearByMax checks got against want within kernels.AttentionTol times
// want's largest magnitude.
func nearByMax(t *testing.T, what string, got, want []float32) {
	t.Helper()
	var m float64
	for _, v := range want {
		m = math.Max(m, math.Abs(float64(v)))
	}
	tol := make([]float64, len(want))
	for i := range tol {
		tol[i] = kernels.AttentionTol * m
	}
	near(t, what, got, f32to64(want), tol)
}
