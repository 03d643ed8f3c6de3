package cuda

import (
	"fmt"
	"os"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// TestGPUThroughput measures a few ops with CUDA events against the
// H200's ceilings (memory bandwidth, tensor-core rate) when
// NPUSERVE_CUDA_BENCH=1; it is not a correctness test.
func TestGPUThroughput(t *testing.T) {
	g := newGPUBench(t)
	b, timed, alloc := g.b, g.timed, g.alloc
	report := func(name string, ms, bytes, flops float64) { g.report(44, name, ms, bytes, flops) }

	n := 1 << 29 // 2 GiB of F32
	a, c := alloc(npu.F32, n), alloc(npu.F32, n)
	b.Fill(a, 1)
	report("Copy F32->F32 2 GiB (cuMemcpyDtoD)", timed(5, func() { b.Copy(c, a) }), 2*4*float64(n), 0)
	report("Scale F32 2 GiB", timed(5, func() { b.Scale(c, a, 2) }), 2*4*float64(n), 0)
	h := alloc(npu.BF16, n)
	report("Copy F32->BF16 2 GiB", timed(5, func() { b.Copy(h, a) }), 6*float64(n), 0)
	b.Free(h)
	x := a.Reshape(n/8192, 8192)
	w := alloc(npu.F32, 8192)
	b.Fill(w, 1)
	report("RMSNorm [65536, 8192] F32", timed(5, func() { b.RMSNorm(c.Reshape(n/8192, 8192), x, w, 1e-6) }), 2*4*float64(n), 0)
	b.Free(w)
	b.Free(c)
	b.Free(a)

	for _, s := range []struct {
		wdt     npu.DType
		M, N, K int
		split   bool
	}{
		{npu.BF16, 1, 8192, 8192, true},
		{npu.BF16, 4, 8192, 8192, true},
		{npu.BF16, 8, 8192, 8192, true},
		{npu.F16, 1, 8192, 8192, true},
		{npu.BF16, 64, 8192, 8192, true},
		{npu.BF16, 4096, 4096, 4096, true},
		{npu.BF16, 4096, 4096, 4096, false},
		{npu.F32, 4096, 4096, 4096, true},
		{npu.F32, 1, 8192, 8192, true},
	} {
		SplitBF16 = s.split
		xm, wm, om := alloc(npu.F32, s.M, s.K), alloc(s.wdt, s.N, s.K), alloc(npu.F32, s.M, s.N)
		b.Fill(xm, 0.01)
		b.Fill(wm, 0.02)
		reps := 20
		if s.M >= 4096 {
			reps = 5
		}
		ms := timed(reps, func() { b.MatMul(om, xm, wm) })
		bytes := float64(s.N*s.K*s.wdt.Size() + 4*s.M*s.K + 4*s.M*s.N)
		report(fmt.Sprintf("MatMul %v M=%d N=%d K=%d split=%v", s.wdt, s.M, s.N, s.K, s.split), ms, bytes, 2*float64(s.M)*float64(s.N)*float64(s.K))
		b.Free(xm)
		b.Free(wm)
		b.Free(om)
	}
	SplitBF16 = true

	// FP8_BLOCK128 prefill-sized GEMMs: the e4m3 tensor cores against the
	// fp32-emulated kernels (EnvFP8TC=0's path), and bf16 above.
	for _, s := range []struct{ M, N, K int }{{4096, 4096, 4096}, {8192, 4096, 16384}} {
		xm, om := alloc(npu.F32, s.M, s.K), alloc(npu.F32, s.M, s.N)
		b.Fill(xm, 0.01)
		codes := make([]byte, s.N*s.K)
		for i := range codes {
			codes[i] = byte(0x30 + i%8) // 0.5 .. 0.94
		}
		wq := npu.Must(b.FromHost(npu.F8E4M3, codes, s.N, s.K))
		sc := alloc(npu.F32, (s.N+127)/128, (s.K+127)/128)
		b.Fill(sc, 0.01)
		w := &npu.QuantWeight{Scheme: npu.QFP8Block, GroupSize: npu.FP8Block, Weight: wq, Scale: sc}
		b.PrepareQuant(w)
		flops := 2 * float64(s.M) * float64(s.N) * float64(s.K)
		on := b.fp8TC
		for _, tc := range []bool{true, false} {
			b.fp8TC = on && tc
			report(fmt.Sprintf("MatMulQ FP8_BLOCK128 M=%d N=%d K=%d tc=%v", s.M, s.N, s.K, b.fp8TC), timed(5, func() { b.MatMulQ(om, xm, w) }), 0, flops)
		}
		b.fp8TC = on
		for _, f := range []*npu.Tensor{xm, om, wq, sc} {
			b.Free(f)
		}
	}
}

// TestGPUDecodeGEMV measures the decode MatMuls of the slice config
// (BF16 weights, M = 1, 8 and 16; 32 for the threshold) with k_gemv_tc
// and k_gemv_tc16 and with the kernels they replaced (gemvTC = false:
// k_gemm_small at M <= 4, the split cuBLASLt GEMM above), as GB/s of weights read and the fraction of the measured
// device copy rate (read + write bytes of a 2 GiB cuMemcpyDtoD), when
// NPUSERVE_CUDA_BENCH=1. Weights smaller than the L2 cache are cycled
// through enough copies (256 MiB at least) that each run reads HBM.
func TestGPUDecodeGEMV(t *testing.T) {
	g := newGPUBench(t)
	b, alloc := g.b, g.alloc
	defer func(e bool) { gemvTC, gemvEarly = true, e }(gemvEarly)
	copyGBs := g.copyRate()
	t.Logf("device copy rate %.0f GB/s (read + write)", copyGBs)
	for _, s := range []struct {
		name    string
		M, N, K int
	}{
		{"lm_head", 1, 154880, 4096},
		{"4096x4096", 1, 4096, 4096},
		{"4096x4096", 8, 4096, 4096},
		{"q_a 1536x4096", 1, 1536, 4096},
		{"q_b 16384x1536", 1, 16384, 1536},
		{"o_proj 4096x16384", 1, 4096, 16384},
		{"dense gate_up 24576x4096", 1, 24576, 4096},
		{"dense gate_up 24576x4096", 8, 24576, 4096},
		{"dense down 4096x12288", 8, 4096, 12288},
		{"4096x4096", 16, 4096, 4096},
		{"dense gate_up 24576x4096", 16, 24576, 4096},
		{"4096x4096", 32, 4096, 4096},
		{"dense gate_up 24576x4096", 32, 24576, 4096},
	} {
		wbytes := 2 * s.N * s.K
		copies := max(1, (256<<20+wbytes-1)/wbytes)
		ws := make([]*npu.Tensor, copies)
		for i := range ws {
			ws[i] = alloc(npu.BF16, s.N, s.K)
			b.Fill(ws[i], 0.02)
			b.MarkWeights(ws[i])
		}
		xm, om := alloc(npu.F32, s.M, s.K), alloc(npu.F32, s.M, s.N)
		b.Fill(xm, 0.01)
		for _, f := range []struct{ tc, early bool }{{true, false}, {true, true}, {false, false}} {
			tc := f.tc
			if f.early && s.M > gemvMaxM {
				continue
			}
			gemvTC, gemvEarly = tc, f.early
			// Above gemvMaxM MatMul takes cuBLASLt either way; the
			// gemvTC row calls k_gemv_tc16 itself (passes of 16 rows,
			// each pass reading the weights again, from L2 where they
			// stay), to show where the threshold belongs.
			direct := tc && s.M > gemvMaxM
			i := 0
			ms := g.timed(max(20, 4*copies), func() {
				if direct {
					b.gemvTC(b.ptr(om), b.ptr(xm), 0, b.ptr(ws[i%copies]), nil, s.M, s.N, s.K, false)
				} else {
					b.MatMul(om, xm, ws[i%copies])
				}
				i++
			})
			gbs := float64(wbytes) / ms / 1e6
			g.t.Logf("MatMul bf16 %-26s M=%-2d gemvTC=%-5v early=%-5v %8.3f ms  %6.0f GB/s of weights  %.2f of copy",
				s.name, s.M, tc, f.early, ms, gbs, gbs/copyGBs)
		}
		gemvEarly = false
		if s.M == 1 && s.N <= 4096 {
			// Warps per block other than gemvWarps' choice (the
			// 4096-column GEMVs reach the least of the copy rate).
			gemvTC = true
			for _, warps := range []int{4, 8, 16} {
				gemvWarpsOverride = warps
				i := 0
				ms := g.timed(max(20, 4*copies), func() {
					b.MatMul(om, xm, ws[i%copies])
					i++
				})
				gbs := float64(wbytes) / ms / 1e6
				g.t.Logf("MatMul bf16 %-26s M=%-2d warps=%-2d (gemvWarps %d) %8.3f ms  %6.0f GB/s  %.2f of copy",
					s.name, s.M, warps, gemvWarps(s.N, s.K), ms, gbs, gbs/copyGBs)
			}
			gemvWarpsOverride = 0
		}
		for _, w := range ws {
			b.Free(w)
		}
		b.Free(xm)
		b.Free(om)
	}
}

// copyRate measures cuMemcpyDtoD of 2 GiB: GB/s of bytes read plus
// written (the figure the decode floor in docs/performance.md uses).
func (g *gpuBench) copyRate() float64 {
	n := 1 << 29
	a, c := g.alloc(npu.F32, n), g.alloc(npu.F32, n)
	defer g.b.Free(a)
	defer g.b.Free(c)
	g.b.Fill(a, 1)
	ms := g.timed(5, func() { g.b.Copy(c, a) })
	return 2 * 4 * float64(n) / ms / 1e6
}

// gpuBench times ops with CUDA events for the throughput tests, which run
// only with NPUSERVE_CUDA_BENCH=1 (they are measurements, not checks).
type gpuBench struct {
	t        *testing.T
	b        *Backend
	ev0, ev1 uintptr
}

// newGPUBench skips unless NPUSERVE_CUDA_BENCH=1 and a GPU is usable.
func newGPUBench(t *testing.T) *gpuBench {
	if os.Getenv("NPUSERVE_CUDA_BENCH") != "1" {
		t.Skip("set NPUSERVE_CUDA_BENCH=1 to measure")
	}
	g := &gpuBench{t: t, b: gpu(t)}
	var err error
	if g.ev0, err = drvEventCreate(g.b.ctx); err != nil {
		t.Fatal(err)
	}
	if g.ev1, err = drvEventCreate(g.b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		drvEventDestroy(g.b.ctx, g.ev0)
		drvEventDestroy(g.b.ctx, g.ev1)
	})
	return g
}

// timed runs fn once to warm up, then reps times between two events, and
// returns the milliseconds per run.
func (g *gpuBench) timed(reps int, fn func()) float64 {
	fn()
	if err := g.b.Sync(); err != nil {
		g.t.Fatal(err)
	}
	_ = drvEventRecord(g.b.ctx, g.ev0, g.b.stream)
	for range reps {
		fn()
	}
	_ = drvEventRecord(g.b.ctx, g.ev1, g.b.stream)
	if err := g.b.Sync(); err != nil {
		g.t.Fatal(err)
	}
	ms, err := drvEventElapsed(g.b.ctx, g.ev0, g.ev1)
	if err != nil {
		g.t.Fatal(err)
	}
	return float64(ms) / float64(reps)
}

// alloc allocates a tensor for a measurement.
func (g *gpuBench) alloc(dt npu.DType, shape ...int) *npu.Tensor {
	return npu.Must(g.b.Alloc(dt, shape...))
}

// report logs one measurement: time, and GB/s and TFLOP/s where bytes or
// flops are given.
func (g *gpuBench) report(width int, name string, ms, bytes, flops float64) {
	line := fmt.Sprintf("%-*s %9.3f ms", width, name, ms)
	if bytes > 0 {
		line += fmt.Sprintf("  %7.0f GB/s", bytes/ms/1e6)
	}
	if flops > 0 {
		line += fmt.Sprintf("  %7.1f TFLOP/s", flops/ms/1e9)
	}
	g.t.Log(line)
}

// TestGPUDecodeHC measures HCPre and HCPost at a decode step's one token
// of the slice's geometry (4 streams of 4096), fused (k_hc_fused) and in
// two launches, with the Sinkhorn's 20 iterations and with none (its
// share of the launch), when NPUSERVE_CUDA_BENCH=1: each runs back to
// back, so the figures are per-launch latency, not a bandwidth.
func TestGPUDecodeHC(t *testing.T) {
	g := newGPUBench(t)
	b, alloc := g.b, g.alloc
	defer func() { hcFused = true }()
	const n, D = 4, 4096
	mix := (2 + n) * n
	x, fn := alloc(npu.F32, 1, n, D), alloc(npu.F32, mix, n*D)
	base, scale := alloc(npu.F32, mix), alloc(npu.F32, 3)
	collapsed, post, comb := alloc(npu.F32, 1, D), alloc(npu.F32, 1, n), alloc(npu.F32, 1, n, n)
	out := alloc(npu.F32, 1, n, D)
	b.Fill(x, 0.5)
	b.Fill(fn, 0.001)
	b.Fill(base, 0.1)
	b.Fill(scale, 1)
	for _, fused := range []bool{true, false} {
		for _, iters := range []int{20, 0} {
			hcFused = fused
			p := npu.HCParams{Streams: n, SinkhornIters: iters, Eps: 1e-6, RMSEps: 1e-6}
			ms := g.timed(200, func() { b.HCPre(collapsed, post, comb, x, fn, base, scale, p) })
			g.t.Logf("HCPre T=1 n=%d D=%d fused=%-5v sinkhorn=%-2d %8.2f µs", n, D, fused, iters, 1000*ms)
		}
	}
	ms := g.timed(200, func() { b.HCPost(out, collapsed, post, comb, x) })
	g.t.Logf("HCPost T=1 n=%d D=%d %8.2f µs", n, D, 1000*ms)
	for _, f := range []*npu.Tensor{x, fn, base, scale, collapsed, post, comb, out} {
		b.Free(f)
	}
}
