package kernels_test

import (
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// noKeep hides a Products' KeepNext and Hold: every product casts its
// operands.
type noKeep struct{ kernels.Products }

// Under bf16 autocast (gpu/gemm through cuBLAS) the layers' backward
// passes cast an operand that two products in a row read once, not twice
// (LinearBackward's dy, Conv2dBackward's D by KeepNext;
// AttentionBackward's dO and dS, held), and give the same bits as
// without.
func TestBF16KeepsShared(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	keep := gemmEngine(t, dev, s, gemm.Config{Precision: gemm.BF16})
	if !keep.CUBLAS() {
		t.Skip(keep.Backend())
	}
	plain := gemmEngine(t, dev, s, gemm.Config{Precision: gemm.BF16})
	ag := kernels.AttentionGeom{N: 2, T: 5, C: 12, H: 3}
	cg := kernels.ConvGeom{N: 2, C: 3, H: 7, W: 6, Cout: 4, K: 3, Pad: 1}
	rows, c := ag.N*ag.T, ag.C
	ho, wo := cg.Out()
	// run is a gpt block's attention and a convolution, forward and
	// backward, through h; it returns every output and gradient.
	run := func(h kernels.Products) [][]float32 {
		up := func(seed, n int) uintptr { return devtest.Upload(t, dev, devtest.Vals(seed, n, 1)) }
		buf := func(n int) uintptr { return devtest.Alloc(t, dev, n, 4) }
		x, dy, win, bin, wout, bout := up(1, rows*c), up(2, rows*c), up(3, c*3*c), up(4, 3*c), up(5, c*c), up(6, c)
		qkv, att, y, p, ws := buf(rows*3*c), buf(rows*c), buf(rows*c), buf(ag.Probs()), buf(ag.Workspace())
		dqkv, datt, dx := buf(rows*3*c), buf(rows*c), buf(rows*c)
		gWin, gBin, gWout, gBout := buf(c*3*c), buf(3*c), buf(c*c), buf(c)
		cx, cw, cb, cdy := up(7, cg.N*cg.C*cg.H*cg.W), up(8, cg.Cout*cg.C*cg.K*cg.K), up(9, cg.Cout), up(10, cg.N*cg.Cout*ho*wo)
		cy, cws, cdx, cdw, cdb := buf(cg.N*cg.Cout*ho*wo), buf(cg.Workspace()), buf(cg.N*cg.C*cg.H*cg.W), buf(cg.Cout*cg.C*cg.K*cg.K), buf(cg.Cout)
		for _, err := range []error{
			kernels.LinearForward(h, k, qkv, x, win, bin, rows, c, 3*c),
			kernels.AttentionForward(h, k, att, p, qkv, ws, ag),
			kernels.LinearForward(h, k, y, att, wout, bout, rows, c, c),
			kernels.LinearBackward(h, k, datt, gWout, gBout, att, wout, dy, rows, c, c, false),
			kernels.AttentionBackward(h, k, dqkv, datt, qkv, p, ws, ag),
			kernels.LinearBackward(h, k, dx, gWin, gBin, x, win, dqkv, rows, c, 3*c, false),
			kernels.Conv2dForward(h, k, cy, cx, cw, cb, cws, cg),
			kernels.Conv2dBackward(h, k, cdx, cdw, cdb, cx, cw, cdy, cws, cg, false),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		var out [][]float32
		for _, b := range []struct {
			p uintptr
			n int
		}{{y, rows * c}, {dx, rows * c}, {gWin, c * 3 * c}, {gBin, 3 * c}, {gWout, c * c}, {gBout, c},
			{cy, cg.N * cg.Cout * ho * wo}, {cdx, cg.N * cg.C * cg.H * cg.W}, {cdw, cg.Cout * cg.C * cg.K * cg.K}, {cdb, cg.Cout}} {
			out = append(out, devtest.Floats(t, dev, b.p, b.n))
		}
		return out
	}
	got, want := run(keep), run(noKeep{plain})
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("output %d [%d]: %v kept, %v not", i, j, got[i][j], want[i][j])
			}
		}
	}
	// fewer casts: dy of both Linears, dO and dS, the convolution's D
	saved := rows*c + rows*3*c + rows*c + ag.Probs() + cg.Cout*cg.N*ho*wo
	if d := plain.Casts() - keep.Casts(); d != int64(saved) {
		t.Errorf("values cast: %d kept, %d not: %d fewer, want %d", keep.Casts(), plain.Casts(), d, saved)
	}
	t.Logf("values cast: %d (kept) vs %d", keep.Casts(), plain.Casts())
}
