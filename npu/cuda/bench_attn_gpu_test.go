package cuda

import (
	"fmt"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// TestGPUThroughputAttn measures KDA, KPool, DSAIndex and SparseMLA at
// GLM-5.3-Flash's real shapes (KDA 64 heads of 128; indexer 32 heads of
// 128, pools of 4, top 2048 tokens; MLA 64 heads, latent rank 512,
// qk_nope = v = 256) when NPUSERVE_CUDA_BENCH=1: decode at batch 1 and 32
// with 8K tokens of context, and a 4K-token prefill (after 4K cached
// tokens for the attention ops). Not a correctness test.
func TestGPUThroughputAttn(t *testing.T) {
	g := newGPUBench(t)
	b, timed, alloc := g.b, g.timed, g.alloc
	fill := func(ts ...*npu.Tensor) {
		for i, x := range ts {
			b.Fill(x, 0.01*float32(i+1))
		}
	}
	report := func(name string, ms, bytes, flops float64) { g.report(52, name, ms, bytes, flops) }
	const bs = 64
	// layout: B sequences of rows new rows after ctx cached tokens each,
	// contiguous blocks, one state slot each.
	layout := func(B, rows, ctx int) *npu.SeqLayout {
		l := &npu.BatchLayout{QueryStart: []int{0}, BlockSize: bs}
		next := int32(0)
		for s := 0; s < B; s++ {
			l.QueryStart = append(l.QueryStart, l.QueryStart[s]+rows)
			l.Pos = append(l.Pos, ctx)
			l.StateSlot = append(l.StateSlot, s)
			n := (ctx + rows + bs - 1) / bs
			bt := make([]int32, n)
			for i := range bt {
				bt[i] = next
				next++
			}
			l.BlockTables = append(l.BlockTables, bt)
		}
		s, _, err := l.Upload(b)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	type shape struct {
		name     string
		B, rows  int
		ctx      int // cached tokens before the rows (attention ops)
		reps     int
		kdaChunk int
	}
	shapes := []shape{
		{"decode B=1 ctx=8K", 1, 1, 8191, 20, 0},
		{"decode B=32 ctx=8K", 32, 1, 8191, 20, 0},
		{"prefill 4K (after 4K)", 1, 4096, 4096, 3, 64},
	}

	// KDA: 64 heads of 128, fp32 state.
	const kH, kK = 64, 128
	for _, s := range shapes {
		T := s.B * s.rows
		L := layout(s.B, s.rows, 0)
		qkv, g, beta := alloc(npu.F32, T, 3*kH*kK), alloc(npu.F32, T, kH*kK), alloc(npu.F32, T, kH)
		state, out := alloc(npu.F32, s.B, kH, kK, kK), alloc(npu.F32, T, kH*kK)
		fill(qkv, beta, state)
		b.Fill(g, -0.05)
		bytes := float64(2*state.Bytes() + qkv.Bytes() + g.Bytes() + beta.Bytes() + out.Bytes())
		for _, k := range []string{"rows", "warp"} { // k_kda, k_kda_w
			kdaKernel = k
			ms := timed(s.reps, func() { b.KDA(out, qkv, g, beta, state, L, kH, kK, s.kdaChunk) })
			report("KDA H=64 K=128 "+s.name+" "+k, ms, bytes, 6*float64(T)*kH*kK*kK)
		}
		kdaKernel = ""
		for _, x := range []*npu.Tensor{qkv, g, beta, state, out} {
			b.Free(x)
		}
	}

	// KPool: the pools a step completes (one per sequence at decode).
	const kp, id, iH, topk = 4, 128, 32, 2048 / 4
	for _, P := range []int{1, 32, 1024} {
		keys, gates, ape, out := alloc(npu.F32, P*kp, id), alloc(npu.F32, P*kp, id), alloc(npu.BF16, kp, id), alloc(npu.F32, P, id)
		fill(keys, gates, ape)
		ms := timed(20, func() { b.KPool(out, keys, gates, ape) })
		report(fmt.Sprintf("KPool d=128 kp=4 P=%d", P), ms, float64(keys.Bytes()+gates.Bytes()+out.Bytes()), 0)
		for _, x := range []*npu.Tensor{keys, gates, ape, out} {
			b.Free(x)
		}
	}

	// DSAIndex: 32 heads of 128, bf16 pooled cache, top 512 pools + tail.
	for _, s := range shapes {
		T := s.B * s.rows
		L := layout(s.B, s.rows, s.ctx)
		poolSlots := L.NumSeqs * L.MaxBlocks * bs / kp
		q, w, pooled := alloc(npu.F32, T, iH*id), alloc(npu.F32, T, iH), alloc(npu.BF16, poolSlots, id)
		width := topk*kp + kp - 1
		out := alloc(npu.I32, T, width)
		fill(q, w, pooled)
		p := npu.IndexParams{TopKPools: topk, KPool: kp, Tail: true, Scale: 1 / float32(11.3137)}
		ms := timed(s.reps, func() { b.DSAIndex(out, q, w, pooled, L, p) })
		// Pools scored: each row sees (pos+1)/kp.
		pools := 0.0
		for r := 0; r < s.rows; r++ {
			pools += float64((s.ctx + r + 1) / kp)
		}
		pools *= float64(s.B)
		report("DSAIndex Hi=32 d=128 top=2048 "+s.name, ms, pools*id*2+float64(q.Bytes()), 2*pools*iH*id)
		for _, x := range []*npu.Tensor{q, w, pooled, out} {
			b.Free(x)
		}
	}

	// SparseMLA: 64 heads, rank 512, dk = dv = 256, bf16 latents and
	// kvB, 2051 selected positions per row (the indexer's width).
	const mH, R, dk, dv = 64, 512, 256, 256
	const width = topk*kp + kp - 1
	kvB := alloc(npu.BF16, mH*(dk+dv), R)
	fill(kvB)
	for _, s := range shapes {
		T := s.B * s.rows
		L := layout(s.B, s.rows, s.ctx)
		slots := L.NumSeqs * L.MaxBlocks * bs
		q, lat, out := alloc(npu.F32, T, mH*dk), alloc(npu.BF16, slots, R), alloc(npu.F32, T, mH*dv)
		fill(q, lat)
		sel := make([]int32, T*width)
		n := 0
		for seq := 0; seq < s.B; seq++ {
			for r := 0; r < s.rows; r++ {
				p := s.ctx + r
				row := sel[(seq*s.rows+r)*width:][:width]
				for i := range row {
					row[i] = int32(p - i)
					if p-i < 0 {
						row[i] = -1
					} else {
						n++
					}
				}
			}
		}
		st := alloc(npu.I32, T, width)
		if err := b.Upload(st, npu.EncodeInt32s(sel)); err != nil {
			t.Fatal(err)
		}
		flops := 2*float64(T)*mH*R*(dk+dv) + 4*float64(n)*mH*R
		bytes := float64(n)*R*2 + float64(kvB.Bytes()+q.Bytes()+out.Bytes())
		for _, tc := range []bool{true, false} { // tensor cores (k_mla_attn_tc, k_gemm_tc_strided), then CUDA cores
			mlaAttnTC, mlaOutTC = tc, tc
			ms := timed(s.reps, func() { b.SparseMLA(out, q, lat, kvB, st, L, mH, dk, dv, 1.0/16) })
			report(fmt.Sprintf("SparseMLA H=64 R=512 sel=2051 tc=%v %s", tc, s.name), ms, bytes, flops)
		}
		mlaAttnTC, mlaOutTC = true, true
		for _, x := range []*npu.Tensor{q, lat, out, st} {
			b.Free(x)
		}
	}
	b.Free(kvB)
}
