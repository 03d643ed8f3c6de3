package cpu

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// BenchmarkInt8Peak measures the machine's int8 multiply-add peak with a
// register-only VPDPBUSD loop, on one thread and on all of them (GOP/s,
// 2 ops per multiply-add, like GFLOP/s for FMAs).
func BenchmarkInt8Peak(b *testing.B) {
	if int8Peak(1) == 0 {
		b.Skip("no AVX-512 VNNI on this CPU")
	}
	for _, threads := range []int{1, New(0).threads} {
		b.Run(fmt.Sprintf("vnni/threads%d", threads), func(b *testing.B) {
			be := New(threads)
			const iters = 1 << 19
			var ops atomic.Int64
			for b.Loop() {
				be.parallelFor(threads, 1, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						ops.Add(int8Peak(iters))
					}
				})
			}
			b.ReportMetric(float64(ops.Load())/b.Elapsed().Seconds()/1e9, "GOP/s")
		})
	}
}

// BenchmarkGEMMInt8VsF32 compares the W8A8_DYNAMIC product (activation
// quantization and epilogue included) and the W8A8_MXFP8 product with
// the float32 MatMul on F32 weights of the same shape, M = 1, 32, 256 and
// K = N = 4096, on all threads. GOP/s counts 2*M*N*K operations for all.
func BenchmarkGEMMInt8VsF32(b *testing.B) {
	const n = 4096
	be := New(0)
	rng := rand.New(rand.NewPCG(1, 2))
	wf := make([]float32, n*n)
	for i := range wf {
		wf[i] = float32(rng.NormFloat64() * 0.02)
	}
	wF32 := f32Tensor(be, wf, n, n)
	qw := makeQuantWeight(b, be, wf, 0, n, n, quant.W8A8Dynamic, 0, 0)
	be.PrepareQuant(qw)
	mx := makeQuantWeight(b, be, wf, 0, n, n, quant.W8A8MXFP8, 0, 0)
	be.PrepareQuant(mx)
	for _, m := range []int{1, 32, 256} {
		x := f32Tensor(be, randF32(rng, m*n, 1), m, n)
		out := npu.Must(be.Alloc(npu.F32, m, n))
		ops := 2 * float64(m) * n * n
		b.Run(fmt.Sprintf("f32/%s/M%d", activeKernels.name, m), func(b *testing.B) {
			be.MatMul(out, x, wF32)
			b.ResetTimer()
			for b.Loop() {
				be.MatMul(out, x, wF32)
			}
			b.ReportMetric(ops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
		})
		b.Run(fmt.Sprintf("int8/%s/M%d", activeI8.name, m), func(b *testing.B) {
			be.MatMulQ(out, x, qw)
			b.ResetTimer()
			for b.Loop() {
				be.MatMulQ(out, x, qw)
			}
			b.ReportMetric(ops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
		})
		b.Run(fmt.Sprintf("mxfp8/%s/M%d", activeKernels.name, m), func(b *testing.B) {
			be.MatMulQ(out, x, mx)
			b.ResetTimer()
			for b.Loop() {
				be.MatMulQ(out, x, mx)
			}
			b.ReportMetric(ops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
		})
	}
}
