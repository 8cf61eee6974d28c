package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"os"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/rtc"
)

// EnvAttention chooses attention's kernels: "fused" for the fused
// causal attention (AttentionFusedForward and AttentionFusedBackward:
// no T x T probabilities stored), "" or "blocks" for the block-causal
// products (AttentionForward and AttentionBackward, the default).
// AttentionGeom.Fused reads it (gpu/devmodel's plan asks it per
// attention layer); another value is refused there, naming it.
const EnvAttention = "GDIST_ATTENTION"

// FusedMaxHead is the widest head (D = C / H) the fused kernels take.
const FusedMaxHead = 128

// AttentionFusedSource is the fused attention's CUDA C++ (compiled
// without --fmad=false: its sums are not nn's order anyway).
var AttentionFusedSource = withHeaders("attention_fused.cu", attentionFusedCU)

//go:embed attention_fused.cu
var attentionFusedCU string

// fusedWidths are the head widths the kernels are instantiated for (a
// head of D uses the first at or above D, its values padded with zeros).
var fusedWidths = []int{16, 32, 64, 128}

// fusedProgram is the fused attention's program for Programs.
func fusedProgram() Program {
	var names []string
	for _, w := range fusedWidths {
		for _, k := range []string{"fwd", "dq", "dkdv"} {
			names = append(names, fmt.Sprintf("gd_attn_fused_%s_d%d", k, w))
		}
	}
	return Program{"gdist_attention_fused.cu", AttentionFusedSource, nil, names}
}

// fusedRows is the rows (queries, or keys) a block of the fused kernels
// owns: AF_ROWS in attention_fused.cu.
const fusedRows = 64

// Fused reports whether $GDIST_ATTENTION asks for the fused kernels
// ("fused"; "" and "blocks" do not), and refuses another value or, when
// asked, a geometry they do not take (heads wider than FusedMaxHead),
// saying what to do.
func (g AttentionGeom) Fused() (bool, error) {
	switch v := os.Getenv(EnvAttention); v {
	case "", "blocks":
		return false, nil
	case "fused":
		if err := g.fusedCheck("fused attention"); err != nil {
			return false, fmt.Errorf("%w (unset $%s for the block-causal products)", err, EnvAttention)
		}
		return true, nil
	default:
		return false, fmt.Errorf("kernels: $%s=%q: want fused, or blocks (the default)", EnvAttention, v)
	}
}

// FusedKeep is the float32s AttentionFusedForward keeps for
// AttentionFusedBackward besides its output: each row's log-sum-exp, N
// H T (against Probs' N H T^2 for AttentionForward).
func (g AttentionGeom) FusedKeep() int { return g.N * g.H * g.T }

// FusedWorkspace is the float32s of scratch AttentionFusedBackward
// needs: D_i = dO_i . O_i of each row, N H T.
func (g AttentionGeom) FusedWorkspace() int { return g.N * g.H * g.T }

func (g AttentionGeom) fusedCheck(op string) error {
	if err := sizeErr(op, "N", g.N, "T", g.T, "C", g.C, "H", g.H); err != nil {
		return err
	}
	if g.N < 1 || g.T < 1 || g.H < 1 || g.C < 1 || g.C%g.H != 0 {
		return fmt.Errorf("kernels: %s: %d heads of a dimension %d over %d x %d positions", op, g.H, g.C, g.N, g.T)
	}
	if d := g.C / g.H; d > FusedMaxHead {
		return fmt.Errorf("kernels: %s: heads of %d values (C %d / H %d): the fused kernels take up to %d (use more heads)", op, d, g.C, g.H, FusedMaxHead)
	}
	if int64(g.N)*int64(g.H) > 65535 || int64(g.N)*int64(g.T)*3*int64(g.C) > 1<<40 {
		return fmt.Errorf("kernels: %s: %+v is too large (split the batch)", op, g)
	}
	return nil
}

// fusedKernel is the instantiation for heads of d values, its launch
// over g's query or key tiles (blocks of fusedRows rows of G threads
// each, G = width / 32 from 32 on) and the scores' scale (1/sqrt(d),
// as nn) and its base-2 form.
func (g AttentionGeom) fusedKernel(kind string) (string, rtc.Config, float32, float32) {
	d := g.C / g.H
	w := fusedWidths[len(fusedWidths)-1]
	for _, x := range fusedWidths {
		if d <= x {
			w = x
			break
		}
	}
	threads := fusedRows * max(1, w/32)
	cfg := rtc.Config{Grid: rtc.Dim3{X: (g.T + fusedRows - 1) / fusedRows, Y: g.N * g.H, Z: 1}, Block: rtc.Dim(threads)}
	scale := float32(1 / math.Sqrt(float64(d)))
	return fmt.Sprintf("gd_attn_fused_%s_d%d", kind, w), cfg, scale, scale * float32(math.Log2E)
}

// fusedFLOPs is the FLOPs of n multiply-add products of D over every
// (query, key) pair at or below the diagonal: 2 for the forward (S, P
// V), 3 for dQ's kernel (S, dP, dQ), 4 for dK and dV's (S, dP, dV, dK);
// the audit's ideal time (the kernels also compute the masked half of
// each diagonal tile).
func (g AttentionGeom) fusedFLOPs(n int) float64 {
	pairs := float64(g.N*g.H) * float64(g.T) * float64(g.T+1) / 2
	return 2 * float64(n) * float64(g.C/g.H) * pairs
}

// AttentionFusedForward is AttentionForward's core (nn's attnOp) as
// one fused kernel: per sequence and head, out = softmax(mask(Q K^T /
// sqrt(D))) V, each block of threads taking 64 queries and reading the
// keys and values up to its last query 64 at a time (32 for heads wider
// than 64) with an online softmax (a running maximum and sum per row):
// the T x T scores are never stored, and key tiles wholly after a block's
// queries are never read. Q, K and V are read in place from qkv (N T,
// 3C), out (N T, C) written in place; lse gets each row's log-sum-exp of
// the scaled scores in base 2 (g.FusedKeep() float32s, kept for
// AttentionFusedBackward). fp32 arithmetic whatever the precision of the
// products around it (under bf16 autocast more accurate than autocast
// needs). Each output within a bound derived from float32's rounding of
// the exact value, as AttentionForward's (TestAttentionFused; the
// package comment). Heads of up to FusedMaxHead values. On s.
func (k *Kernels) AttentionFusedForward(s *cuda.Stream, out, lse, qkv uintptr, g AttentionGeom) error {
	if err := g.fusedCheck("AttentionFusedForward"); err != nil {
		return err
	}
	name, cfg, _, scale2 := g.fusedKernel("fwd")
	ntc := int64(g.N) * int64(g.T) * int64(g.C)
	return k.launch(name, s, cfg, rw(3*ntc, ntc+int64(g.FusedKeep())), out, lse, qkv, int32(g.T), int32(g.C), int32(g.H), scale2)
}

// AttentionFusedBackward is AttentionBackward's core from what
// AttentionFusedForward left (out, its output, and lse), recomputing the
// probabilities tile by tile: dqkv (N T, 3C) gets dQ, dK and dV of dout
// (N T, C), written in place. Two kernels, no atomics (the same bits
// every run): over query tiles, D_i = dO_i . O_i (kept in ws,
// g.FusedWorkspace() float32s) and dQ = dS K with dS = P (dO V^T - D) /
// sqrt(D); then over key tiles, dV = P^T dO and dK = dS^T Q. On s.
func (k *Kernels) AttentionFusedBackward(s *cuda.Stream, dqkv, dout, qkv, out, lse, ws uintptr, g AttentionGeom) error {
	if err := g.fusedCheck("AttentionFusedBackward"); err != nil {
		return err
	}
	ntc, nht := int64(g.N)*int64(g.T)*int64(g.C), int64(g.FusedKeep())
	name, cfg, scale, scale2 := g.fusedKernel("dq")
	// reads q, k, v, dO, O and L; writes dQ and D
	if err := k.launch(name, s, cfg, rw(5*ntc+nht, ntc+nht), dqkv, ws, dout, qkv, out, lse, int32(g.T), int32(g.C), int32(g.H), scale2, scale); err != nil {
		return err
	}
	name, cfg, _, _ = g.fusedKernel("dkdv")
	// reads q, k, v, dO, L and D; writes dK and dV
	return k.launch(name, s, cfg, rw(4*ntc+2*nht, 2*ntc), dqkv, dout, qkv, lse, ws, int32(g.T), int32(g.C), int32(g.H), scale2, scale)
}
