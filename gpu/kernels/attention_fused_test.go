package kernels_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// fusedGeoms are the fused kernels' test shapes: heads of 2, 4, 8, 24,
// 32, 40, 64, 72 and 128 values (each instantiation, 16, 32, 64 and
// 128, padded and exact), T of 1, shorter than a tile (64 rows), a
// multiple of it and not (65, 129: the last tile of one row; 40 and 70
// over key tiles of 32 at D over 64), several heads and sequences: the
// causal mask falls on the tiles' edges and inside them.
var fusedGeoms = []kernels.AttentionGeom{
	{N: 2, T: 13, C: 12, H: 3},
	{N: 3, T: 1, C: 4, H: 2},
	{N: 1, T: 129, C: 16, H: 2},
	{N: 2, T: 64, C: 64, H: 2},
	{N: 2, T: 70, C: 40, H: 1},
	{N: 1, T: 65, C: 128, H: 2},
	{N: 1, T: 40, C: 128, H: 1},
	{N: 2, T: 33, C: 48, H: 2},
	{N: 1, T: 70, C: 144, H: 2},
}

// The fused attention (AttentionFusedForward, AttentionFusedBackward)
// computes what the block-causal products compute (AttentionForward and
// AttentionBackward through the default gemm.Engine): each element of
// out, dQ, dK and dV is within a bound derived from float32's rounding
// (attnRef) of the float64 attention of the same inputs, for both
// paths (so the two are within twice the bound of each other: their
// difference is logged, not asserted, as it follows). Every output
// is written (out and dqkv filled with NaN before), lse and the
// workspace not beyond their sizes, and two runs give the same bits.
// Queries scaled by 3 so that the scores span several units (the online
// softmax rescales as its maximum grows).
func TestAttentionFused(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	e := gemmEngine(t, dev, s, gemm.Config{})
	for _, g := range fusedGeoms {
		t.Run(fmt.Sprintf("N%d-T%d-C%d-H%d", g.N, g.T, g.C, g.H), func(t *testing.T) {
			rows, c := g.N*g.T, g.C
			qkv := devtest.Vals(160+g.T, rows*3*c, 1)
			for r := 0; r < rows; r++ {
				for j := 0; j < c; j++ {
					qkv[r*3*c+j] *= 3
				}
			}
			dout := devtest.Vals(161+g.T, rows*c, 1)
			ref := attnRef(g, qkv, dout)
			fused := fusedRun(t, k, s, g, qkv, dout)
			again := fusedRun(t, k, s, g, qkv, dout)
			for i := range fused {
				for j := range fused[i] {
					if math.Float32bits(fused[i][j]) != math.Float32bits(again[i][j]) {
						t.Fatalf("two runs differ: result %d [%d]: %v, then %v", i, j, fused[i][j], again[i][j])
					}
				}
			}
			blocks := blocksRun(t, k, e, g, qkv, dout)
			for i, what := range []string{"out", "dqkv"} {
				near(t, "fused "+what, fused[i], ref.val[i], ref.tol[i])
				near(t, "blocks "+what, blocks[i], ref.val[i], ref.tol[i])
				worst := 0.0
				for j, v := range ref.tol[i] {
					worst = math.Max(worst, math.Abs(float64(fused[i][j])-float64(blocks[i][j]))/math.Max(v, 1e-300))
				}
				t.Logf("fused against blocks %s: differ by at most %.3g of the bound", what, worst)
			}
		})
	}
}

// fusedRun runs the fused forward and backward over qkv and dout with
// out, dqkv, lse and the workspace filled with NaN (lse and the
// workspace 17 values longer, which must stay NaN), and returns out and
// dqkv, checking that neither has a NaN.
func fusedRun(t *testing.T, k *kernels.Kernels, s *cuda.Stream, g kernels.AttentionGeom, qkv, dout []float32) [2][]float32 {
	t.Helper()
	const dev, extra = 0, 17
	rows, c := g.N*g.T, g.C
	in, dy := devtest.Upload(t, dev, qkv), devtest.Upload(t, dev, dout)
	out, dqkv := nanBuf(t, rows*c), nanBuf(t, rows*3*c)
	lse, ws := nanBuf(t, g.FusedKeep()+extra), nanBuf(t, g.FusedWorkspace()+extra)
	if err := k.AttentionFusedForward(s, out, lse, in, g); err != nil {
		t.Fatal(err)
	}
	if err := k.AttentionFusedBackward(s, dqkv, dy, in, out, lse, ws, g); err != nil {
		t.Fatal(err)
	}
	for what, b := range map[string]struct {
		p uintptr
		n int
	}{"lse": {lse, g.FusedKeep()}, "workspace": {ws, g.FusedWorkspace()}} {
		v := devtest.Floats(t, dev, b.p, b.n+extra)
		for i, x := range v {
			if (i >= b.n) != math.IsNaN(float64(x)) {
				t.Fatalf("%s[%d] of %d: %v", what, i, b.n, x)
			}
		}
	}
	return noNaN(t, [2][]float32{devtest.Floats(t, dev, out, rows*c), devtest.Floats(t, dev, dqkv, rows*3*c)})
}

// blocksRun is fusedRun through AttentionForward and AttentionBackward.
func blocksRun(t *testing.T, k *kernels.Kernels, h kernels.Products, g kernels.AttentionGeom, qkv, dout []float32) [2][]float32 {
	t.Helper()
	const dev = 0
	rows, c := g.N*g.T, g.C
	in, dy := devtest.Upload(t, dev, qkv), devtest.Upload(t, dev, dout)
	out, dqkv, p, ws := nanBuf(t, rows*c), nanBuf(t, rows*3*c), nanBuf(t, g.Probs()), nanBuf(t, g.Workspace())
	if err := kernels.AttentionForward(h, k, out, p, in, ws, g); err != nil {
		t.Fatal(err)
	}
	if err := kernels.AttentionBackward(h, k, dqkv, dy, in, p, ws, g); err != nil {
		t.Fatal(err)
	}
	return noNaN(t, [2][]float32{devtest.Floats(t, dev, out, rows*c), devtest.Floats(t, dev, dqkv, rows*3*c)})
}

func nanBuf(t *testing.T, n int) uintptr {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return devtest.Upload(t, 0, v)
}

func noNaN(t *testing.T, res [2][]float32) [2][]float32 {
	t.Helper()
	for i, v := range res {
		for j, x := range v {
			if math.IsNaN(float64(x)) {
				t.Fatalf("result %d [%d] is NaN: not written", i, j)
			}
		}
	}
	return res
}

// attnResult is the float64 attention's out and dqkv and, per element,
// the bound on a float32 computation's error.
type attnResult struct {
	val, tol [2][]float64
}

// attnRef is the causal attention of qkv (N T, 3C) and its backward for
// dout (N T, C) in float64, with each element's error bound for float32
// arithmetic that sums in any order (u = 2^-24; GemmTol(k) = (k+2) u, a
// sum of k products relative to the sum of their magnitudes), per
// sequence and head:
//
//   - a score s_ij = scale q_i . k_j: es_ij = GemmTol(D) scale sum |q_i||k_j|;
//   - P_ij = exp(s_ij - L_i): relative error relP_ij = 2 max_j es_ij
//     (the exponent's error: its score's and the log-sum-exp's) +
//     GemmTol(2T) (the sum of at most T exponentials, each rounded, and
//     the online softmax's at most T/16 rescalings) + 8u (exp, log,
//     the divisions) + 4u (|s_ij - L_i| + ln(i+1)) (the scale rounded
//     to float32, times log2(e) rounded, their product rounded: every
//     score of the row off by one factor, which moves P_ij by that
//     factor times s_ij - sum_k P_ik s_ik, at most |s_ij - L_i| + ln(i+1)
//     away; and s - m rounded before the exponential);
//   - out_ic = sum_j P_ij v_jc: sum_j (eP_ij + GemmTol(T) P_ij) |v_jc|;
//   - dP_ij = dO_i . v_j: edP = GemmTol(D) sum |dO_i||v_j|;
//   - D_i = dO_i . O_i (fused) or sum_j P_ij dP_ij (the blocks): the
//     sum of both bounds (GemmTol(D) sum |dO||O| + sum |dO| eO; sum_j
//     (eP |dP| + P edP) + GemmTol(T) sum P |dP|);
//   - dS_ij = scale P_ij (dP_ij - D_i): scale (eP_ij |dP_ij - D_i| +
//     P_ij (edP_ij + eD_i) + 4u P_ij |dP_ij - D_i|);
//   - dQ_i = sum_j dS_ij k_j, dK_j = sum_i dS_ij q_i and dV_j = sum_i
//     P_ij dO_i: the terms' errors plus GemmTol(T) times their
//     magnitudes.
func attnRef(g kernels.AttentionGeom, qkv, dout []float32) attnResult {
	const u = 0x1p-24
	T, C, H, D := g.T, g.C, g.H, g.C/g.H
	scale := 1 / math.Sqrt(float64(D))
	gt := kernels.GemmTol
	var r attnResult
	for i := range 2 {
		n := g.N * T * C * (1 + 2*i)
		r.val[i], r.tol[i] = make([]float64, n), make([]float64, n)
	}
	out, eOut, dqkv, eD := r.val[0], r.tol[0], r.val[1], r.tol[1]
	P, eP := make([]float64, T*T), make([]float64, T*T)
	dP, edP := make([]float64, T*T), make([]float64, T*T)
	dS, edS := make([]float64, T*T), make([]float64, T*T)
	for n := 0; n < g.N; n++ {
		for h := 0; h < H; h++ {
			at := func(sec, i, c int) int { return (n*T+i)*3*C + sec*C + h*D + c }
			x := func(sec, i, c int) float64 { return float64(qkv[at(sec, i, c)]) }
			oat := func(i, c int) int { return (n*T+i)*C + h*D + c }
			do := func(i, c int) float64 { return float64(dout[oat(i, c)]) }
			di, eDi := make([]float64, T), make([]float64, T)
			for i := 0; i < T; i++ {
				s, es := make([]float64, i+1), make([]float64, i+1)
				mx, emx := math.Inf(-1), 0.0
				for j := 0; j <= i; j++ {
					var v, a float64
					for c := 0; c < D; c++ {
						v += x(0, i, c) * x(1, j, c)
						a += math.Abs(x(0, i, c) * x(1, j, c))
					}
					s[j], es[j] = scale*v, gt(D)*scale*a
					mx, emx = math.Max(mx, s[j]), math.Max(emx, es[j])
				}
				var l float64
				for j := range s {
					l += math.Exp(s[j] - mx)
				}
				rel, lse, ent := 2*emx+gt(2*T)+8*u, mx+math.Log(l), math.Log(float64(i+1))
				for j := 0; j <= i; j++ {
					P[i*T+j] = math.Exp(s[j]-mx) / l
					eP[i*T+j] = P[i*T+j] * (rel + 4*u*(math.Abs(s[j]-lse)+ent))
				}
				for c := 0; c < D; c++ {
					var v, e float64
					for j := 0; j <= i; j++ {
						v += P[i*T+j] * x(2, j, c)
						e += (eP[i*T+j] + gt(T)*P[i*T+j]) * math.Abs(x(2, j, c))
					}
					out[oat(i, c)], eOut[oat(i, c)] = v, e
				}
				// dP, D_i
				var d1, a1, e1 float64
				for c := 0; c < D; c++ {
					d1 += do(i, c) * out[oat(i, c)]
					a1 += math.Abs(do(i, c) * out[oat(i, c)])
					e1 += math.Abs(do(i, c)) * eOut[oat(i, c)]
				}
				var e2, a2 float64
				for j := 0; j <= i; j++ {
					var v, a float64
					for c := 0; c < D; c++ {
						v += do(i, c) * x(2, j, c)
						a += math.Abs(do(i, c) * x(2, j, c))
					}
					dP[i*T+j], edP[i*T+j] = v, gt(D)*a
					e2 += eP[i*T+j]*math.Abs(v) + P[i*T+j]*edP[i*T+j]
					a2 += P[i*T+j] * math.Abs(v)
				}
				di[i], eDi[i] = d1, gt(D)*a1+e1+e2+gt(T)*a2
				for j := 0; j <= i; j++ {
					w := dP[i*T+j] - di[i]
					dS[i*T+j] = scale * P[i*T+j] * w
					edS[i*T+j] = scale * (eP[i*T+j]*math.Abs(w) + P[i*T+j]*(edP[i*T+j]+eDi[i]) + 4*u*P[i*T+j]*math.Abs(w))
				}
			}
			for i := 0; i < T; i++ {
				for c := 0; c < D; c++ {
					var q, eq, kk, ek, v, ev float64
					for j := 0; j <= i; j++ { // dQ_i over keys j <= i
						q += dS[i*T+j] * x(1, j, c)
						eq += (edS[i*T+j] + gt(T)*math.Abs(dS[i*T+j])) * math.Abs(x(1, j, c))
					}
					for q2 := i; q2 < T; q2++ { // dK_i, dV_i over queries >= i
						kk += dS[q2*T+i] * x(0, q2, c)
						ek += (edS[q2*T+i] + gt(T)*math.Abs(dS[q2*T+i])) * math.Abs(x(0, q2, c))
						v += P[q2*T+i] * do(q2, c)
						ev += (eP[q2*T+i] + gt(T)*P[q2*T+i]) * math.Abs(do(q2, c))
					}
					for sec, y := range [3][2]float64{{q, eq}, {kk, ek}, {v, ev}} {
						dqkv[at(sec, i, c)], eD[at(sec, i, c)] = y[0], y[1]
					}
				}
			}
		}
	}
	return r
}

// $GDIST_ATTENTION chooses the kernels: unset or "blocks" the
// block-causal products, "fused" the fused kernels; another value, and
// "fused" with heads wider than kernels.FusedMaxHead, are refused naming
// the problem and the way out; the fused calls refuse such heads too,
// before anything is queued.
func TestAttentionFusedEnv(t *testing.T) {
	g := kernels.AttentionGeom{N: 1, T: 4, C: 8, H: 2}
	for v, want := range map[string]bool{"": false, "blocks": false, "fused": true} {
		t.Setenv(kernels.EnvAttention, v)
		if got, err := g.Fused(); err != nil || got != want {
			t.Errorf("$%s=%q: %v, %v; want %v", kernels.EnvAttention, v, got, err, want)
		}
	}
	t.Setenv(kernels.EnvAttention, "flash")
	if _, err := g.Fused(); err == nil || !strings.Contains(err.Error(), kernels.EnvAttention) || !strings.Contains(err.Error(), "fused") {
		t.Errorf("$%s=flash: %v", kernels.EnvAttention, err)
	}
	t.Setenv(kernels.EnvAttention, "fused")
	wide := kernels.AttentionGeom{N: 1, T: 4, C: 512, H: 2}
	if _, err := wide.Fused(); err == nil || !strings.Contains(err.Error(), "256") || !strings.Contains(err.Error(), "unset $"+kernels.EnvAttention) {
		t.Errorf("heads of 256: %v", err)
	}
	k, s := setup(t, 0)
	if err := k.AttentionFusedForward(s, 0, 0, 0, wide); err == nil || !strings.Contains(err.Error(), "more heads") {
		t.Errorf("AttentionFusedForward, heads of 256: %v", err)
	}
	if err := k.AttentionFusedBackward(s, 0, 0, 0, 0, 0, 0, wide); err == nil || !strings.Contains(err.Error(), "more heads") {
		t.Errorf("AttentionFusedBackward, heads of 256: %v", err)
	}
}
