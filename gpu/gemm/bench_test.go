package gemm_test

import (
	"fmt"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// BenchmarkBF16Step times, on a real GPU (on the fake, which computes
// products on the host, at tiny sizes: the code runs, the numbers mean
// nothing), the products of one training step of a layer of
// gpt-L12-D768-H12-T1024 at batch 8 (R = 8192 rows) in each way to
// compute them: fp32, and bf16 with the cast kernel and no weight cache,
// with the cache, and with the operands rounded inside cuBLAS
// (CastInCUBLAS). linear: the MLP's first Linear (768 -> 3072): y = x W,
// dW = x^T dy, dx = dy W^T (dy kept), as gpu/kernels runs them.
// attention: the core's P V (96 products of [1024, 1024] x [1024, 64])
// and dV = P^T dO, whole; attention-blocks: the same block-causal in
// blocks of 128 (gpu/kernels' attention: 8 block rows, 8 block columns,
// the blocks of P compact-cast under bf16). Reported: TFLOP/s of the products and GB/s of the
// casts (values cast x 6 bytes over the time). One session, one card:
// run all the rows together (`go test -c ./gpu/gemm`, then
// `gemm.test -test.run '^$' -test.bench BF16Step` on the GPU machine).
func BenchmarkBF16Step(b *testing.B) {
	cudafake.RequireCUDA(b)
	R, D, F := 8192, 768, 3072
	BH, T, d, tb := 96, 1024, 64, 128
	if cudafake.Mode() != "real" {
		R, D, F, BH, T, d, tb = 64, 16, 48, 2, 16, 8, 4
	}
	x, dy := devtest.Upload(b, dev, devtest.Vals(1, R*D, 1)), devtest.Upload(b, dev, devtest.Vals(2, R*F, 1))
	w := devtest.Upload(b, dev, devtest.Vals(3, D*F, 0.05))
	y, dw, dx := devtest.Alloc(b, dev, R*F, 4), devtest.Alloc(b, dev, D*F, 4), devtest.Alloc(b, dev, R*D, 4)
	p, v := devtest.Upload(b, dev, devtest.Vals(4, BH*T*T, 0.001)), devtest.Upload(b, dev, devtest.Vals(5, BH*T*d, 1))
	o := devtest.Alloc(b, dev, BH*T*d, 4)
	cases := []struct {
		name string
		cfg  gemm.Config
	}{
		{"fp32", gemm.Config{}},
		{"bf16-kernel-nocache", gemm.Config{Precision: gemm.BF16, NoWeightCache: true, BF16Cast: gemm.CastKernel}},
		{"bf16-kernel-cache", gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastKernel}},
		{"bf16-cublas", gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastInCUBLAS}},
	}
	for _, c := range cases {
		s, err := cuda.NewStream(dev, false)
		if err != nil {
			b.Fatal(err)
		}
		e, err := gemm.New(dev, s, c.cfg)
		if err != nil {
			b.Fatal(err)
		}
		e.Weights(w, D*F)
		run := func(b *testing.B, flop float64, step func() error) {
			if err := step(); err != nil { // warm: scratch, cache, heuristics
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			before := e.CastStats()
			b.ResetTimer()
			for range b.N {
				e.WeightsChanged() // an update a step
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			sec := b.Elapsed().Seconds()
			b.ReportMetric(flop*float64(b.N)/sec/1e12, "TFLOP/s")
			b.ReportMetric(float64(e.CastStats().Sub(before).Bytes())/sec/1e9, "castGB/s")
		}
		b.Run(fmt.Sprintf("linear/%s", c.name), func(b *testing.B) {
			run(b, 3*2*float64(R*D*F), func() error {
				if err := e.MatMul(false, false, R, F, D, 1, x, w, 0, y); err != nil {
					return err
				}
				e.KeepNext(dy)
				if err := e.MatMul(true, false, D, F, R, 1, x, dy, 0, dw); err != nil {
					return err
				}
				return e.MatMul(false, true, R, D, F, 1, dy, w, 0, dx)
			})
		})
		b.Run(fmt.Sprintf("attention/%s", c.name), func(b *testing.B) {
			td, tt := int64(T*d), int64(T*T)
			run(b, 2*2*float64(BH*T*T*d), func() error {
				if err := e.MatMulBatched(false, false, T, d, T, 1, p, T, tt, v, d, td, 0, o, d, td, BH); err != nil {
					return err
				}
				return e.MatMulBatched(true, false, T, d, T, 1, p, T, tt, v, d, td, 0, o, d, td, BH)
			})
		})
		b.Run(fmt.Sprintf("attention-blocks/%s", c.name), func(b *testing.B) {
			// the same two products block-causal, as gpu/kernels runs them:
			// P_i V_{0..i} by block rows, dV_j = P_{j..,j}^T dO_{j..} by
			// block columns, each over the BH heads; TFLOP/s of the FLOPs
			// computed (56% of the whole products' at T 1024)
			td, tt := int64(T*d), int64(T*T)
			f := func(p uintptr, n int) uintptr { return p + uintptr(4*n) }
			lower := 0
			for i := 0; i < T; i += tb {
				lower += min(tb, T-i) * min(i+tb, T)
			}
			run(b, 2*2*float64(BH*lower*d), func() error {
				for i := 0; i < T; i += tb {
					if err := e.MatMulBatched(false, false, min(tb, T-i), d, min(i+tb, T), 1, f(p, i*T), T, tt, v, d, td, 0, f(o, i*d), d, td, BH); err != nil {
						return err
					}
				}
				for j := 0; j < T; j += tb {
					if err := e.MatMulBatched(true, false, min(tb, T-j), d, T-j, 1, f(p, j*T+j), T, tt, f(v, j*d), d, td, 0, f(o, j*d), d, td, BH); err != nil {
						return err
					}
				}
				return nil
			})
		})
		e.Close()
		s.Destroy()
	}
}
