package cpu

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// Benchmarks of the CPU backend's hot paths. Each reports its own metric
// (GFLOP/s, GB/s) through b.ReportMetric; they are sized to finish in a
// second or two each under `make bench`.

// BenchmarkFMAPeak measures the machine's single-precision FMA peak with
// register-only assembly loops of independent FMAs, for each vector width
// the CPU has, on one thread and on all of them.
func BenchmarkFMAPeak(b *testing.B) {
	if fmaPeak(1) == 0 {
		b.Skip("no SIMD FMA kernel on this CPU")
	}
	for _, isa := range fmaPeakISAs() {
		for _, threads := range []int{1, New(0).threads} {
			b.Run(fmt.Sprintf("%s/threads%d", isa.name, threads), func(b *testing.B) {
				be := New(threads)
				const iters = 1 << 19
				var flops atomic.Int64
				for b.Loop() {
					be.parallelFor(threads, 1, func(lo, hi int) {
						for i := lo; i < hi; i++ {
							flops.Add(isa.run(iters))
						}
					})
				}
				b.ReportMetric(float64(flops.Load())/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// benchTensor returns a tensor of random values in [-1, 1).
func benchTensor(be *Backend, dt npu.DType, shape ...int) *npu.Tensor {
	t := npu.Must(be.Alloc(dt, shape...))
	rng := rand.New(rand.NewPCG(1, uint64(t.Numel())))
	v := make([]float32, t.Numel())
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	src := npu.Must(be.FromHost(npu.F32, unsafeBytesF32(v), len(v)))
	be.Copy(t.Reshape(-1), src)
	return t
}

// unsafeBytesF32 copies v into a byte slice (little-endian float32).
func unsafeBytesF32(v []float32) []byte {
	b := allocBytes(len(v) * 4)
	copy(f32s(b), v)
	return b
}

// BenchmarkMatMul1024 is the square 1024^3 product with both threads, for
// F32 and BF16 weights.
func BenchmarkMatMul1024(b *testing.B) {
	const n = 1024
	be := New(0)
	for _, dt := range []npu.DType{npu.F32, npu.BF16} {
		b.Run(fmt.Sprintf("%s/%v", activeKernels.name, dt), func(b *testing.B) {
			x, w, out := benchTensor(be, npu.F32, n, n), benchTensor(be, dt, n, n), npu.Must(be.Alloc(npu.F32, n, n))
			be.MatMul(out, x, w) // warm up (page faults, pools)
			b.ResetTimer()
			for b.Loop() {
				be.MatMul(out, x, w)
			}
			b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkMatMulDecode is the decode-shaped product (M = 1 and a batch of
// 32) over BF16 weights, reporting weight bytes streamed per second and
// GFLOP/s. The weights rotate over copies totalling at least 512 MiB so
// that they come from memory, not from cache.
func BenchmarkMatMulDecode(b *testing.B) {
	be := New(0)
	for _, k := range []int{1024, 2048, 4096} {
		copies := max(1, (512<<20)/(k*k*2))
		ws := make([]*npu.Tensor, copies)
		w0 := benchTensor(be, npu.BF16, k, k)
		for i := range ws {
			ws[i] = npu.Must(be.Alloc(npu.BF16, k, k))
			be.Copy(ws[i], w0)
		}
		for _, m := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/M%d/K%d", activeKernels.name, m, k), func(b *testing.B) {
				x, out := benchTensor(be, npu.F32, m, k), npu.Must(be.Alloc(npu.F32, m, k))
				i := 0
				b.ResetTimer()
				for b.Loop() {
					be.MatMul(out, x, ws[i%copies])
					i++
				}
				sec := b.Elapsed().Seconds()
				b.ReportMetric(float64(k*k*2)*float64(b.N)/sec/1e9, "GB/s")
				b.ReportMetric(2*float64(m*k*k)*float64(b.N)/sec/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkCopyBandwidth copies a 256 MiB F32 tensor (512 MiB touched per
// copy, beyond the last-level cache) with both threads; GB/s counts the
// bytes copied (read and write traffic is twice that).
func BenchmarkCopyBandwidth(b *testing.B) {
	const n = 256 << 20
	be := New(0)
	src, dst := npu.Must(be.Alloc(npu.F32, n/4)), npu.Must(be.Alloc(npu.F32, n/4))
	be.Fill(src, 1)
	be.Copy(dst, src) // fault the pages in
	b.SetBytes(n)
	b.ResetTimer()
	for b.Loop() {
		be.Copy(dst, src)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
