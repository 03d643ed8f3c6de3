package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// TestGPUMoEThroughput measures MoE and MoEQ at GLM-5.3-Flash's expert
// shapes (hidden 4096, moe_intermediate_size 2048, top-8 of 64 experts,
// the configs/slice expert count), and SampleReduce, SampleHist and
// SampleBinMembers at the real vocabulary, when NPUSERVE_CUDA_BENCH=1:
// time, GB/s of expert weights (the experts the routing touches, each
// once) or logits read, and TFLOP/s. Not a correctness test.
func TestGPUMoEThroughput(t *testing.T) {
	g := newGPUBench(t)
	b, timed, alloc := g.b, g.timed, g.alloc
	report := func(name string, ms, bytes, flops float64) { g.report(52, name, ms, bytes, flops) }

	const D, I, E, k = 4096, 2048, 64, 8
	r := rand.New(rand.NewPCG(1, 2))
	gu16, dn16 := alloc(npu.BF16, E, 2*I, D), alloc(npu.BF16, E, D, I)
	b.Fill(gu16, 0.01)
	b.Fill(dn16, 0.01)
	gu8 := &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: alloc(npu.I8, E, 2*I, D), Scale: alloc(npu.F32, E, 2*I)}
	dn8 := &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: alloc(npu.I8, E, D, I), Scale: alloc(npu.F32, E, D)}
	b.PrepareQuant(gu8)
	b.PrepareQuant(dn8)
	defer func() { gemvTC = true }()
	copyGBs := g.copyRate()
	t.Logf("device copy rate %.0f GB/s (read + write)", copyGBs)
	for _, T := range []int{1, 8, 32, 128, 4096} {
		ids := make([]int32, T*k)
		touched := map[int32]bool{}
		for tok := range T {
			perm := r.Perm(E)
			for j := range k {
				ids[tok*k+j] = int32(perm[j])
				touched[int32(perm[j])] = true
			}
		}
		idt := npu.Must(b.FromHost(npu.I32, npu.EncodeInt32s(ids), T, k))
		w, x, out := alloc(npu.F32, T, k), alloc(npu.F32, T, D), alloc(npu.F32, T, D)
		b.Fill(w, 0.125)
		b.Fill(x, 0.5)
		reps := 20
		if T >= 4096 {
			reps = 2
		}
		flops := 2 * float64(T*k) * 3 * D * I
		perExpert := float64(3 * D * I)
		for _, tc := range []bool{true, false} {
			if !tc && T > 32 {
				continue // the tiled GEMMs: gemvTC does not apply
			}
			gemvTC = tc
			// The tiled GEMM's forms: k_moe_gemm_pipe, k_moe_gemm_tc2
			// (two parts), k_moe_gemm_tc (three), k_moe_gemm_pipe1 (one:
			// EnvBF16Activations).
			type form struct {
				parts int
				pipe  bool
			}
			forms := []form{{2, true}}
			if T > 32 {
				forms = append(forms, form{2, false}, form{3, false}, form{1, true})
			}
			for _, f := range forms {
				moeTCParts, moePipe = f.parts, f.pipe
				ms := timed(reps, func() { b.MoE(out, x, gu16, dn16, w, idt, 7) })
				wb := 2 * perExpert * float64(len(touched))
				report(fmt.Sprintf("MoE bf16 T=%d E=%d top-%d D=%d I=%d gemvTC=%v parts=%d pipe=%v", T, E, k, D, I, tc, f.parts, f.pipe), ms, wb, flops)
				t.Logf("  %d experts touched: %.2f of copy", len(touched), wb/ms/1e6/copyGBs)
			}
			moeTCParts, moePipe = 2, true
		}
		gemvTC = true
		ms := timed(reps, func() { b.MoEQ(out, x, gu8, dn8, w, idt, 7) })
		report(fmt.Sprintf("MoEQ W8A8_DYNAMIC T=%d E=%d top-%d", T, E, k), ms, perExpert*float64(len(touched)), flops)
		for _, tt := range []*npu.Tensor{idt, w, x, out} {
			b.Free(tt)
		}
	}
	for _, tt := range []*npu.Tensor{gu16, dn16, gu8.Weight, gu8.Scale, dn8.Weight, dn8.Scale} {
		b.Free(tt)
	}

	const R, V = 32, 154880
	logits := alloc(npu.F32, R, V)
	lv := make([]float32, R*V)
	for i := range lv {
		lv[i] = float32(r.NormFloat64())
	}
	if err := b.Upload(logits, npu.EncodeFloats(lv, npu.F32)); err != nil {
		t.Fatal(err)
	}
	stats := alloc(npu.I32, R, 2)
	for _, kk := range []int{1, 50, 256} {
		vals, idx := alloc(npu.F32, R, kk), alloc(npu.I32, R, kk)
		ms := timed(20, func() { b.SampleReduce(vals, idx, stats, logits, kk) })
		report(fmt.Sprintf("SampleReduce R=%d V=%d k=%d", R, V, kk), ms, 4*R*V, 0)
		b.Free(vals)
		b.Free(idx)
	}
	b.Free(stats)

	// Sampling histograms: a raw and a processed query per row, and the
	// members of one bin each.
	const Q = 2 * R
	rows, bins, params := make([]int32, Q), make([]int32, Q), make([]byte, 0, 16*Q)
	for j := range Q {
		rows[j], bins[j] = int32(j/2), 40
		for _, w := range npu.SampleHistParams(5, 1/(0.7+0.3*float64(j%2))) {
			params = binary.LittleEndian.AppendUint64(params, uint64(w))
		}
	}
	rt := npu.Must(b.FromHost(npu.I32, npu.EncodeInt32s(rows), Q))
	bt := npu.Must(b.FromHost(npu.I32, npu.EncodeInt32s(bins), Q))
	pt := npu.Must(b.FromHost(npu.I64, params, Q, 2))
	hist, counts := alloc(npu.I64, Q, npu.SampleHistBins), alloc(npu.I32, Q, 2)
	vals, idx := alloc(npu.F32, Q, 64), alloc(npu.I32, Q, 64)
	ms := timed(20, func() { b.SampleHist(hist, logits, rt, pt) })
	report(fmt.Sprintf("SampleHist Q=%d V=%d", Q, V), ms, 4*Q*V, 0)
	ms = timed(20, func() { b.SampleBinMembers(vals, idx, counts, logits, rt, pt, bt) })
	report(fmt.Sprintf("SampleBinMembers Q=%d V=%d C=64", Q, V), ms, 4*Q*V, 0)
	for _, tt := range []*npu.Tensor{rt, bt, pt, hist, counts, vals, idx} {
		b.Free(tt)
	}
	b.Free(logits)
}
