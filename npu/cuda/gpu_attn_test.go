package cuda

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// attnLayout builds a batch of sequences with rows[b] new rows at pos[b],
// each sequence's blocks taken from a shuffled pool of cache blocks (so
// block tables are not contiguous), and returns it with the number of
// cache blocks.
func (h *both) attnLayout(rows, pos, slots []int, bs int) (*npu.BatchLayout, int) {
	l := &npu.BatchLayout{QueryStart: []int{0}, Pos: pos, StateSlot: slots, BlockSize: bs}
	need := 0
	for b, n := range rows {
		l.QueryStart = append(l.QueryStart, l.QueryStart[b]+n)
		need += (pos[b] + n + bs - 1) / bs
	}
	nblocks := need + 3
	perm := h.r.Perm(nblocks)
	for b, n := range rows {
		k := (pos[b] + n + bs - 1) / bs
		bt := make([]int32, k)
		for i := range bt {
			bt[i] = int32(perm[0])
			perm = perm[1:]
		}
		l.BlockTables = append(l.BlockTables, bt)
	}
	return l, nblocks
}

func TestGPUKDA(t *testing.T) {
	h := newBoth(t, 21)
	for _, c := range []struct {
		H, K   int
		rows   []int
		gate   string
		chunks []int
	}{
		{3, 33, []int{37, 1, 70, 0, 16}, "lb", []int{0, 7, 64}},
		{2, 16, []int{20, 50, 2}, "softplus", []int{0, 5, 64}},
		{2, 128, []int{100, 3, 1}, "lb", []int{0, 64}},
		{1, 40, []int{130}, "lb", []int{0, 128}},
		{2, 160, []int{40, 2}, "lb", []int{0}}, // K > kdaWarpMaxK: k_kda whatever the mode
	} {
		for ci, chunk := range c.chunks {
			// Every chunk setting on k_kda_w throughout (the decode
			// steps too); the last also on the default choice (k_kda_w
			// for the prefill, k_kda for decode) and on k_kda alone.
			modes := []string{"warp"}
			if ci == len(c.chunks)-1 {
				modes = append(modes, "", "rows")
			}
			for _, mode := range modes {
				kdaCase(h, c.H, c.K, c.rows, c.gate, chunk, mode)
			}
		}
	}
}

// kdaCase runs one TestGPUKDA case (prefill, then three decode steps)
// with kdaKernel = mode against the CPU backend.
func kdaCase(h *both, H, K int, rows []int, gate string, chunk int, mode string) {
	defer func(m string) { kdaKernel = m }(kdaKernel)
	kdaKernel = mode
	name := fmt.Sprintf("H=%d K=%d rows=%v %s chunk=%d kernel=%q", H, K, rows, gate, chunk, mode)
	B := len(rows)
	nslots := B + 2
	slots := h.r.Perm(nslots)[:B]
	pos := make([]int, B)
	for b := range pos {
		pos[b] = h.r.IntN(50)
	}
	l, _ := h.attnLayout(rows, pos, slots, 16)
	gs, cs := h.layout(l)
	T, HK := l.QueryStart[B], H*K
	qkv := h.rand(npu.F32, 1, T, 3*HK)
	g := h.from(npu.F32, kdaGates(h, T*HK, gate), T, HK)
	beta := h.from(npu.F32, sigmoids(h, T*H), T, H)
	state := h.rand(npu.F32, 0.3, nslots, H, K, K)
	out := h.zeros(npu.F32, T, H*K)
	h.g.KDA(out.g, qkv.g, g.g, beta.g, state.g, gs, H, K, chunk)
	cpuBE.KDA(out.c, qkv.c, g.c, beta.c, state.c, cs, H, K, chunk)
	h.close("KDA out "+name, out, 2e-5)
	h.close("KDA state "+name, state, 2e-5)
	// Decode: three steps of one row per sequence, continuing from the
	// state.
	drows := make([]int, B)
	dpos := make([]int, B)
	for b := range drows {
		drows[b], dpos[b] = 1, pos[b]+rows[b]
	}
	for step := 0; step < 3; step++ {
		dl, _ := h.attnLayout(drows, dpos, slots, 16)
		gd, cd := h.layout(dl)
		dq := h.rand(npu.F32, 1, B, 3*HK)
		dg := h.from(npu.F32, kdaGates(h, B*HK, gate), B, HK)
		db := h.from(npu.F32, sigmoids(h, B*H), B, H)
		do := h.zeros(npu.F32, B, H*K)
		h.g.KDA(do.g, dq.g, dg.g, db.g, state.g, gd, H, K, 0)
		cpuBE.KDA(do.c, dq.c, dg.c, db.c, state.c, cd, H, K, 0)
		h.close(fmt.Sprintf("KDA decode %d out %s", step, name), do, 2e-5)
		h.free(dq, dg, db, do)
		for b := range dpos {
			dpos[b]++
		}
	}
	h.close("KDA decode state "+name, state, 2e-5)
	h.free(qkv, g, beta, state, out)
}

// kdaGates are log-decays: the lower-bound gate's range [-5, 0], or the
// softplus gate's -exp(a)·softplus(x).
func kdaGates(h *both, n int, kind string) []float32 {
	v := make([]float32, n)
	for i := range v {
		x := h.r.NormFloat64()
		if kind == "lb" {
			v[i] = float32(-5 / (1 + math.Exp(-x-1)))
		} else {
			v[i] = float32(-0.5 * math.Log1p(math.Exp(x)))
		}
	}
	return v
}

func sigmoids(h *both, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(1 / (1 + math.Exp(-h.r.NormFloat64())))
	}
	return v
}

func TestGPUKPool(t *testing.T) {
	h := newBoth(t, 22)
	for _, c := range []struct{ P, kp, d int }{{7, 4, 129}, {1, 3, 5}, {300, 4, 128}, {0, 4, 8}} {
		for _, adt := range floatTypes {
			name := fmt.Sprintf("P=%d kp=%d d=%d ape=%v", c.P, c.kp, c.d, adt)
			keys := h.rand(npu.F32, 1, c.P*c.kp, c.d)
			gates := h.rand(npu.F32, 3, c.P*c.kp, c.d)
			ape := h.rand(adt, 1, c.kp, c.d)
			out := h.zeros(npu.F32, c.P, c.d)
			h.g.KPool(out.g, keys.g, gates.g, ape.g)
			cpuBE.KPool(out.c, keys.c, gates.c, ape.c)
			h.close("KPool "+name, out, 1e-6)
			h.free(keys, gates, ape, out)
		}
	}
}

// dsaCase is a DSAIndex input whose scores are well separated: every
// pooled key is c_i·u plus small noise with distinct c_i (1% apart at
// least) and the queries are near u with positive head weights, so every
// score is c_i times nearly the same positive factor and fp32 rounding
// cannot reorder two pools; a few pools repeat an earlier key exactly
// (bitwise equal scores: the tie goes to the lower pool on both sides).
func (h *both) dsaCase(dt npu.DType, rows, pos []int, kp, Hi, d int) (l *npu.BatchLayout, q, w, pooled pair) {
	l, nblocks := h.attnLayout(rows, pos, make([]int, len(rows)), 8)
	nslots := nblocks * 8 / kp
	u := make([]float64, d)
	for i := range u {
		u[i] = h.r.NormFloat64()
	}
	perm := h.r.Perm(nslots)
	pv := make([]float32, nslots*d)
	for s := 0; s < nslots; s++ {
		ci := 0.2 + 0.02*float64(perm[s])
		for i := range d {
			pv[s*d+i] = float32(ci*u[i] + 0.001*h.r.NormFloat64())
		}
	}
	for s := 3; s < nslots; s += 7 { // exact repeats of another slot's key
		o := h.r.IntN(nslots)
		copy(pv[s*d:(s+1)*d], pv[o*d:(o+1)*d])
	}
	T := l.QueryStart[len(rows)]
	qv := make([]float32, T*Hi*d)
	for i := range qv {
		qv[i] = float32(u[i%d] + 0.3*h.r.NormFloat64())
	}
	wv := make([]float32, T*Hi)
	for i := range wv {
		wv[i] = float32(0.1 + h.r.Float64())
	}
	return l, h.from(npu.F32, qv, T, Hi*d), h.from(npu.F32, wv, T, Hi), h.from(dt, pv, nslots, d)
}

func TestGPUDSAIndex(t *testing.T) {
	h := newBoth(t, 23)
	defer func(v int) { dsaSortMax = v }(dsaSortMax)
	for _, c := range []struct {
		rows, pos []int
		kp, topk  int
	}{
		// Prefill from 0 and from inside a pool, decode, an empty sequence.
		{[]int{13, 1, 0, 6, 1}, []int{0, 37, 5, 21, 100}, 4, 3},
		{[]int{13, 1, 0, 6, 1}, []int{0, 37, 5, 21, 100}, 4, 40},
		// Long decode rows: 750 and 1200 visible pools, top 512.
		{[]int{1, 2}, []int{2999, 4798}, 4, 512},
		{[]int{9, 1}, []int{3, 17}, 1, 5},
	} {
		for _, dt := range []npu.DType{npu.F32, npu.BF16} {
			for _, tail := range []bool{false, true} {
				for _, sortMax := range []int{4096, 1} {
					dsaSortMax = sortMax
					name := fmt.Sprintf("rows=%v pos=%v kp=%d top=%d %v tail=%v sortMax=%d", c.rows, c.pos, c.kp, c.topk, dt, tail, sortMax)
					l, q, w, pooled := h.dsaCase(dt, c.rows, c.pos, c.kp, 9, 67)
					gs, cs := h.layout(l)
					p := npu.IndexParams{TopKPools: c.topk, KPool: c.kp, Tail: tail, Scale: 0.125}
					width := c.topk * c.kp
					if tail {
						width += c.kp - 1
					}
					out := h.zeros(npu.I32, l.QueryStart[len(c.rows)], width)
					h.g.DSAIndex(out.g, q.g, w.g, pooled.g, gs, p)
					cpuBE.DSAIndex(out.c, q.c, w.c, pooled.c, cs, p)
					h.exact("DSAIndex "+name, out)
					h.free(q, w, pooled, out)
				}
			}
		}
	}
}

func TestGPUSparseMLA(t *testing.T) {
	h := newBoth(t, 24)
	for _, c := range []struct {
		H, dk, dv, R int
		rows, pos    []int
		width        int
	}{
		{3, 5, 7, 37, []int{9, 1, 0, 4}, []int{0, 40, 3, 11}, 21},
		{17, 16, 8, 300, []int{1, 1, 1}, []int{70, 5, 129}, 80},
		{2, 32, 32, 64, []int{30}, []int{100}, 45},
		{8, 16, 16, 64, []int{1, 1}, []int{600, 450}, 500},   // decode: the latents split across blocks
		{5, 19, 8, 40, []int{1, 1}, []int{30, 7}, 20},        // decode, BF16 kvB: k_mla_qlat_bf16, one dk row per slice
		{64, 256, 256, 512, []int{1}, []int{1000}, 300},      // decode at the slice's head shapes
		{20, 16, 24, 128, []int{70, 5}, []int{50, 200}, 70},  // k_mla_attn_tc, k_gemm_tc_strided: prefill rows, a group of 4 heads
		{64, 256, 256, 512, []int{24}, []int{400}, 300},      // k_mla_attn_tc: prefill at the slice's head shapes
		{16, 32, 32, 256, []int{1, 1}, []int{900, 300}, 700}, // k_mla_attn_tc: decode, latents split across blocks
		{6, 8, 13, 72, []int{1}, []int{90}, 40},              // k_mla_out's one-row form: a warp's last columns past dv
		{4, 8, 16, 64, []int{9}, []int{20}, 16},              // a one-row tile (rows 8) after a full one
		{6, 24, 8, 72, []int{66}, []int{80}, 40},             // k_gemm_tc_strided_t: a partial row tile and column tile
	} {
		for _, ldt := range []npu.DType{npu.F32, npu.BF16} {
			for _, wdt := range floatTypes {
				name := fmt.Sprintf("H=%d dk=%d dv=%d R=%d rows=%v latents=%v kvB=%v", c.H, c.dk, c.dv, c.R, c.rows, ldt, wdt)
				l, nblocks := h.attnLayout(c.rows, c.pos, make([]int, len(c.rows)), 16)
				gs, cs := h.layout(l)
				B, T := len(c.rows), l.QueryStart[len(c.rows)]
				// Selections: random positions of the row's sequence
				// (some repeated), -1 padding, and one row with nothing.
				sel := make([]int32, T*c.width)
				for b := range B {
					for t := l.QueryStart[b]; t < l.QueryStart[b+1]; t++ {
						n := c.pos[b] + t - l.QueryStart[b] + 1
						row := sel[t*c.width : (t+1)*c.width]
						k := h.r.IntN(c.width + 1)
						if t == 1 {
							k = 0
						}
						for i := range row {
							row[i] = -1
							if i < k {
								row[i] = int32(h.r.IntN(n))
							}
						}
						h.r.Shuffle(len(row), func(i, j int) { row[i], row[j] = row[j], row[i] })
					}
				}
				sp := h.ints(sel, T, c.width)
				q := h.rand(npu.F32, 1, T, c.H*c.dk)
				lat := h.rand(ldt, 1, nblocks*16, c.R)
				kvB := h.rand(wdt, 0.2, c.H*(c.dk+c.dv), c.R)
				out := h.zeros(npu.F32, T, c.H*c.dv)
				scale := float32(1 / math.Sqrt(float64(c.dk)))
				// The sort (k_mla_select) first, into out's GPU side, then the
				// bitmap form: the same selection, so the same bits.
				mlaSelectBitmap = false
				h.g.SparseMLA(out.g, q.g, lat.g, kvB.g, sp.g, gs, c.H, c.dk, c.dv, scale)
				sorted := make([]byte, out.g.Bytes())
				if err := h.g.Download(sorted, out.g); err != nil {
					t.Fatal(err)
				}
				mlaSelectBitmap = true
				h.g.SparseMLA(out.g, q.g, lat.g, kvB.g, sp.g, gs, c.H, c.dk, c.dv, scale)
				bm := make([]byte, out.g.Bytes())
				if err := h.g.Download(bm, out.g); err != nil {
					t.Fatal(err)
				}
				if string(bm) != string(sorted) {
					t.Errorf("SparseMLA %s: k_mla_select_bm and k_mla_select select differently", name)
				}
				cpuBE.SparseMLA(out.c, q.c, lat.c, kvB.c, sp.c, cs, c.H, c.dk, c.dv, scale)
				tol := 2e-5
				if c.dk*c.R > 1<<16 {
					// The slice's shapes: sums of dk = 256 and R = 512
					// products over 300 latents; the CUDA kernels' fp32
					// summation order differs from the CPU's (2.24e-5 seen
					// with F16 kvB on the H200).
					tol = 1e-4
				}
				h.close("SparseMLA "+name, out, tol)
				if ldt == npu.BF16 && c.R%128 == 0 || wdt == npu.BF16 && T >= mlaOutTCRows {
					// The tensor-core kernels (k_mla_attn_tc,
					// k_gemm_tc_strided, k_gemm_tc_strided_t) served the
					// runs above; the CUDA-core k_mla_attn, k_mla_qlat and
					// k_mla_out agree with the CPU too.
					g, _ := h.floats(out)
					mlaAttnTC, mlaOutTC, mlaQlatTC = false, false, false
					h.g.SparseMLA(out.g, q.g, lat.g, kvB.g, sp.g, gs, c.H, c.dk, c.dv, scale)
					mlaAttnTC, mlaOutTC, mlaQlatTC = true, true, true
					h.close("SparseMLA (CUDA cores) "+name, out, tol)
					f, _ := h.floats(out)
					e, _ := maxRelErr(g, f, rms(f))
					h.t.Logf("SparseMLA %s: tensor cores vs CUDA cores max rel err %.3g", name, e)
				}
				if T > 1 {
					g, _ := h.floats(out)
					for i, v := range g[c.H*c.dv : 2*c.H*c.dv] {
						if v != 0 {
							h.t.Errorf("SparseMLA %s: row 1 selects nothing but element %d is %v", name, i, v)
							break
						}
					}
				}
				h.free(sp, q, lat, kvB, out)
			}
		}
	}
}

// TestGPUSparseMLAFromIndex runs the indexer and the attention together,
// the way the model does, on a bf16 cache.
func TestGPUSparseMLAFromIndex(t *testing.T) {
	h := newBoth(t, 25)
	rows, pos := []int{12, 1, 1}, []int{0, 64, 203}
	l, qi, w, pooled := h.dsaCase(npu.BF16, rows, pos, 4, 8, 32)
	gs, cs := h.layout(l)
	p := npu.IndexParams{TopKPools: 6, KPool: 4, Tail: true, Scale: 0.2}
	T, width := l.QueryStart[len(rows)], 6*4+3
	sel := h.zeros(npu.I32, T, width)
	h.g.DSAIndex(sel.g, qi.g, w.g, pooled.g, gs, p)
	cpuBE.DSAIndex(sel.c, qi.c, w.c, pooled.c, cs, p)
	h.exact("DSAIndex", sel)
	const H, dk, dv, R = 5, 24, 24, 96
	nblocks := pooled.c.Dim(0) * 4 / 8
	q := h.rand(npu.F32, 1, T, H*dk)
	lat := h.rand(npu.BF16, 1, nblocks*8, R)
	kvB := h.rand(npu.BF16, 0.2, H*(dk+dv), R)
	out := h.zeros(npu.F32, T, H*dv)
	h.g.SparseMLA(out.g, q.g, lat.g, kvB.g, sel.g, gs, H, dk, dv, 0.2)
	cpuBE.SparseMLA(out.c, q.c, lat.c, kvB.c, sel.c, cs, H, dk, dv, 0.2)
	h.close("SparseMLA after DSAIndex", out, 2e-5)
	h.free(qi, w, pooled, sel, q, lat, kvB, out)
}

// TestGPUAttnDeviceErrors checks that bad slots, positions and blocks in
// device data come back from Sync as DeviceErrors naming the op.
func TestGPUAttnDeviceErrors(t *testing.T) {
	h := newBoth(t, 26)
	want := func(name string, code int, op string) {
		h.t.Helper()
		err := h.g.Sync()
		var de *DeviceError
		if !errors.As(err, &de) || de.Code != code || de.Op != op {
			h.t.Errorf("%s: Sync returned %v, want a %s DeviceError with code %d", name, err, op, code)
		}
		if err := h.g.Sync(); err != nil {
			h.t.Errorf("%s: the error was reported twice: %v", name, err)
		}
	}
	// KDA: a state slot outside state, then two sequences in one slot.
	const H, K = 2, 8
	for _, c := range []struct {
		slots []int
		code  int
	}{{[]int{0, 5}, devErrSlot}, {[]int{1, 1}, devErrSharedSlot}} {
		l, _ := h.attnLayout([]int{2, 3}, []int{0, 4}, c.slots, 16)
		gs, _ := h.layout(l)
		qkv := h.rand(npu.F32, 1, 5, 3*H*K)
		g := h.from(npu.F32, kdaGates(h, 5*H*K, "lb"), 5, H*K)
		beta := h.from(npu.F32, sigmoids(h, 5*H), 5, H)
		state := h.zeros(npu.F32, 3, H, K, K)
		out := h.zeros(npu.F32, 5, H*K)
		h.g.KDA(out.g, qkv.g, g.g, beta.g, state.g, gs, H, K, 0)
		want(fmt.Sprintf("KDA slots %v", c.slots), c.code, "KDA")
		h.free(qkv, g, beta, state, out)
	}
	// DSAIndex: a pool in a block beyond the pooled cache.
	l, q, w, pooled := h.dsaCase(npu.F32, []int{1}, []int{30}, 4, 4, 16)
	l.BlockTables[0][1] = int32(pooled.g.Dim(0)) // block 1 (pools 2, 3) past the cache
	gs, _ := h.layout(l)
	out := h.zeros(npu.I32, 1, 2*4)
	h.g.DSAIndex(out.g, q.g, w.g, pooled.g, gs, npu.IndexParams{TopKPools: 2, KPool: 4, Scale: 0.1})
	want("DSAIndex block", devErrPosition, "DSAIndex")
	// SparseMLA: a position beyond the sequence.
	sel := h.ints([]int32{3, 31, -1}, 1, 3)
	lat := h.rand(npu.F32, 1, 64, 16)
	kvB := h.rand(npu.F32, 1, 2*(4+4), 16)
	qm := h.rand(npu.F32, 1, 1, 2*4)
	om := h.zeros(npu.F32, 1, 2*4)
	h.g.SparseMLA(om.g, qm.g, lat.g, kvB.g, sel.g, gs, 2, 4, 4, 0.5)
	want("SparseMLA position", devErrPosition, "SparseMLA")
	h.free(q, w, pooled, out, sel, lat, kvB, qm, om)
}
