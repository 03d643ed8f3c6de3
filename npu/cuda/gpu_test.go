package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

var floatTypes = []npu.DType{npu.F32, npu.BF16, npu.F16}

func TestGPUCopy(t *testing.T) {
	h := newBoth(t, 1)
	special := []float32{0, float32(math.Copysign(0, -1)), 1.5, -2.5, 3.49, 65504, 70000, -1e9, 3e9, -3e9, 1e-8, 6e-5,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 123456.7, -0.5, 0.5, 2.5}
	for _, src := range []npu.DType{npu.F32, npu.BF16, npu.F16, npu.I32} {
		for _, dst := range []npu.DType{npu.F32, npu.BF16, npu.F16, npu.I32} {
			t.Run(fmt.Sprintf("%v-%v", src, dst), func(t *testing.T) {
				h.t = t
				n := 1001
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(h.r.NormFloat64() * 300)
					if src == npu.I32 {
						v[i] = float32(int32(h.r.Int32N(1<<26) - 1<<25))
					}
				}
				if src != npu.I32 {
					copy(v, special)
				}
				s := h.from(src, v, 7, 143)
				d := h.zeros(dst, n)
				h.g.Copy(d.g, s.g)
				cpuBE.Copy(d.c, s.c)
				h.exact("Copy", d)
				h.free(s, d)
			})
		}
	}
}

func TestGPUFill(t *testing.T) {
	h := newBoth(t, 2)
	for _, dt := range floatTypes {
		for _, v := range []float32{0, -1.25, 3.14159, 1e-3} {
			d := h.zeros(dt, 3, 333)
			h.g.Fill(d.g, v)
			cpuBE.Fill(d.c, v)
			h.exact(fmt.Sprintf("Fill %v %v", dt, v), d)
			h.free(d)
		}
	}
}

func TestGPUElementwise(t *testing.T) {
	h := newBoth(t, 3)
	shapes := [][]int{{1, 1}, {3, 17}, {129, 1031}}
	for _, sh := range shapes {
		for _, bdt := range floatTypes {
			for _, bcast := range []bool{false, true} {
				name := fmt.Sprintf("%v b=%v bcast=%v", sh, bdt, bcast)
				a := h.rand(npu.F32, 2, sh...)
				bsh := sh
				if bcast {
					bsh = sh[1:]
				}
				b := h.rand(bdt, 2, bsh...)
				o := h.zeros(npu.F32, sh...)
				h.g.Add(o.g, a.g, b.g)
				cpuBE.Add(o.c, a.c, b.c)
				h.exact("Add "+name, o)
				h.g.Mul(o.g, a.g, b.g)
				cpuBE.Mul(o.c, a.c, b.c)
				h.exact("Mul "+name, o)
				// out aliases a.
				h.g.Mul(a.g, a.g, b.g)
				cpuBE.Mul(a.c, a.c, b.c)
				h.exact("Mul in place "+name, a)
				h.free(a, b, o)
			}
		}
		x := h.rand(npu.F32, 6, sh...)
		o := h.zeros(npu.F32, sh...)
		h.g.Scale(o.g, x.g, -0.37)
		cpuBE.Scale(o.c, x.c, -0.37)
		h.exact(fmt.Sprintf("Scale %v", sh), o)
		h.g.Sigmoid(o.g, x.g)
		cpuBE.Sigmoid(o.c, x.c)
		h.close(fmt.Sprintf("Sigmoid %v", sh), o, 1e-6)
		h.g.SiLU(o.g, x.g)
		cpuBE.SiLU(o.c, x.c)
		h.close(fmt.Sprintf("SiLU %v", sh), o, 1e-6)
		h.g.SiLU(x.g, x.g)
		cpuBE.SiLU(x.c, x.c)
		h.close(fmt.Sprintf("SiLU in place %v", sh), x, 1e-6)
		h.free(x, o)
	}
}

func TestGPUSwiGLU(t *testing.T) {
	h := newBoth(t, 4)
	for _, limit := range []float32{0, 7, 1.5} {
		for _, sh := range [][]int{{1, 2}, {5, 34}, {67, 2 * 517}} {
			gu := h.rand(npu.F32, 4, sh...)
			o := h.zeros(npu.F32, sh[0], sh[1]/2)
			h.g.SwiGLU(o.g, gu.g, limit)
			cpuBE.SwiGLU(o.c, gu.c, limit)
			h.close(fmt.Sprintf("SwiGLU %v limit %v", sh, limit), o, 1e-6)
			h.free(gu, o)
		}
	}
}

func TestGPUSoftmax(t *testing.T) {
	h := newBoth(t, 5)
	for _, d := range []int{1, 7, 33, 1000, 5003} {
		rows := 9
		v := make([]float32, rows*d)
		for i := range v {
			v[i] = float32(h.r.NormFloat64() * 5)
		}
		for c := 0; c < d; c++ {
			v[d+c] = float32(math.Inf(-1)) // a fully masked row
		}
		v[2*d+d/2] = float32(math.NaN())
		v[3*d] = float32(math.Inf(-1))
		x := h.from(npu.F32, v, rows, d)
		o := h.zeros(npu.F32, rows, d)
		h.g.Softmax(o.g, x.g)
		cpuBE.Softmax(o.c, x.c)
		g, c := h.floats(o)
		h.closeVals(fmt.Sprintf("Softmax d=%d", d), g, c, 1e-5, 1e-30)
		h.g.Softmax(x.g, x.g)
		cpuBE.Softmax(x.c, x.c)
		h.close(fmt.Sprintf("Softmax in place d=%d", d), x, 1e-5)
		h.free(x, o)
	}
}

func TestGPUNorms(t *testing.T) {
	h := newBoth(t, 6)
	for _, n := range []int{1, 31, 128, 1000, 1536, 4096, 6144 + 3} {
		groups := 5
		x := h.rand(npu.F32, 3, groups, n)
		gate := h.rand(npu.F32, 2, groups, n)
		o := h.zeros(npu.F32, groups, n)
		h.g.RMSNorm(o.g, x.g, nil, 1e-6)
		cpuBE.RMSNorm(o.c, x.c, nil, 1e-6)
		h.close(fmt.Sprintf("RMSNorm n=%d unweighted", n), o, 1e-5)
		h.g.L2Norm(o.g, x.g, n, 1e-6)
		cpuBE.L2Norm(o.c, x.c, n, 1e-6)
		h.close(fmt.Sprintf("L2Norm n=%d", n), o, 1e-5)
		for _, wdt := range floatTypes {
			w := h.rand(wdt, 1, n)
			bias := h.rand(wdt, 1, n)
			h.g.RMSNorm(o.g, x.g, w.g, 1e-5)
			cpuBE.RMSNorm(o.c, x.c, w.c, 1e-5)
			h.close(fmt.Sprintf("RMSNorm n=%d w=%v", n, wdt), o, 1e-5)
			h.g.RMSNormGated(o.g, x.g, gate.g, w.g, 1e-5)
			cpuBE.RMSNormGated(o.c, x.c, gate.c, w.c, 1e-5)
			h.close(fmt.Sprintf("RMSNormGated n=%d w=%v", n, wdt), o, 1e-5)
			h.g.LayerNorm(o.g, x.g, w.g, bias.g, 1e-5)
			cpuBE.LayerNorm(o.c, x.c, w.c, bias.c, 1e-5)
			h.close(fmt.Sprintf("LayerNorm n=%d w=%v", n, wdt), o, 1e-5)
			h.g.LayerNorm(o.g, x.g, w.g, nil, 1e-5)
			cpuBE.LayerNorm(o.c, x.c, w.c, nil, 1e-5)
			h.close(fmt.Sprintf("LayerNorm n=%d w=%v no bias", n, wdt), o, 1e-5)
			h.free(w, bias)
		}
		// In place.
		h.g.RMSNorm(x.g, x.g, nil, 1e-6)
		cpuBE.RMSNorm(x.c, x.c, nil, 1e-6)
		h.close(fmt.Sprintf("RMSNorm n=%d in place", n), x, 1e-5)
		h.free(x, gate, o)
	}
}

func TestGPUGatherScatter(t *testing.T) {
	h := newBoth(t, 7)
	rows, d := 97, 129
	for _, sdt := range floatTypes {
		for _, odt := range []npu.DType{npu.F32, sdt} {
			tab := h.rand(sdt, 1, rows, d)
			ids := []int32{5, 0, 96, 5, 33, 17, 17, 2}
			idx := h.ints(ids, len(ids))
			o := h.zeros(odt, len(ids), d)
			h.g.Gather(o.g, tab.g, idx.g)
			cpuBE.Gather(o.c, tab.c, idx.c)
			h.exact(fmt.Sprintf("Gather %v->%v", sdt, odt), o)
			h.g.Embedding(o.g, tab.g, idx.g)
			cpuBE.Embedding(o.c, tab.c, idx.c)
			h.exact(fmt.Sprintf("Embedding %v->%v", sdt, odt), o)
			// Scatter back with repeated indices: the last row wins.
			src := h.rand(odt, 1, len(ids), d)
			h.g.Scatter(tab.g, src.g, idx.g)
			cpuBE.Scatter(tab.c, src.c, idx.c)
			h.exact(fmt.Sprintf("Scatter %v->%v", odt, sdt), tab)
			h.free(tab, idx, o, src)
		}
	}
	// An index outside the table is reported once by the next Sync.
	tab := h.rand(npu.F32, 1, rows, d)
	idx := h.ints([]int32{3, int32(rows), 1}, 3)
	o := h.zeros(npu.F32, 3, d)
	h.g.Gather(o.g, tab.g, idx.g)
	err := h.g.Sync()
	var de *DeviceError
	if !errors.As(err, &de) || de.Op != "Gather" || de.Value != rows {
		t.Fatalf("Gather with index %d: Sync returned %v, want a DeviceError naming Gather and the index", rows, err)
	}
	t.Logf("bad index reported: %v", err)
	if err := h.g.Sync(); err != nil {
		t.Fatalf("second Sync after the report: %v", err)
	}
	h.free(tab, idx, o)
}

func TestGPUTopK(t *testing.T) {
	h := newBoth(t, 8)
	for _, c := range []struct{ m, n, k int }{{3, 1, 1}, {5, 256, 8}, {4, 300, 40}, {2, 4096, 600}, {3, 5000, 20}, {2, 9000, 100}} {
		v := make([]float32, c.m*c.n)
		for i := range v {
			v[i] = float32(h.r.IntN(50)) / 4 // many ties
		}
		v[0] = float32(math.NaN())
		if c.n > 2 {
			v[1] = float32(math.Copysign(0, -1))
			v[2] = 0
		}
		x := h.from(npu.F32, v, c.m, c.n)
		vals := h.zeros(npu.F32, c.m, c.k)
		idx := h.zeros(npu.I32, c.m, c.k)
		h.g.TopK(vals.g, idx.g, x.g, c.k)
		cpuBE.TopK(vals.c, idx.c, x.c, c.k)
		h.exact(fmt.Sprintf("TopK %v vals", c), vals)
		h.exact(fmt.Sprintf("TopK %v idx", c), idx)
		h.free(x, vals, idx)
	}
}

// matmulErr compares out = x·wᵀ on both sides relative to
// sum_k |x[m,k]| |w[n,k]| (the natural scale of a dot product's rounding).
func (h *both) matmulErr(name string, o, x, w pair, M, N, K int, tol float64) {
	h.t.Helper()
	g, c := h.floats(o)
	_, xs := h.floats(x)
	_, ws := h.floats(w)
	worst, at := 0.0, 0
	for m := 0; m < M; m++ {
		for n := 0; n < N; n++ {
			var s float64
			for k := 0; k < K; k++ {
				s += math.Abs(float64(xs[m*K+k]) * float64(ws[n*K+k]))
			}
			e := math.Abs(float64(g[m*N+n])-float64(c[m*N+n])) / math.Max(s, 1e-30)
			if e > worst {
				worst, at = e, m*N+n
			}
		}
	}
	h.t.Logf("%s: max err %.3g of sum|x||w| (tol %.3g)", name, worst, tol)
	if worst > tol || math.IsNaN(worst) {
		h.t.Errorf("%s: element %d: GPU %v, CPU %v: err %.3g > %.3g", name, at, g[at], c[at], worst, tol)
	}
}

func TestGPUMatMul(t *testing.T) {
	h := newBoth(t, 9)
	for _, c := range []struct {
		wdt     npu.DType
		M, N, K int
		split   bool
		tol     float64
	}{
		{npu.F32, 1, 77, 129, true, 1e-5},
		{npu.F32, 5, 300, 1000, true, 1e-5},
		{npu.F32, 37, 515, 257, true, 1e-5},
		{npu.BF16, 1, 77, 129, true, 1e-5},   // k_gemm_small, scalar loads (K % 8 != 0)
		{npu.BF16, 3, 300, 1032, true, 1e-5}, // k_gemv_tc (gpu_gemv_test.go has more)
		{npu.BF16, 4, 129, 4096, true, 1e-5},
		{npu.BF16, 5, 300, 1024, true, 2e-5},   // k_gemv_tc
		{npu.BF16, 17, 300, 1024, true, 2e-5},  // split bf16 tensor cores
		{npu.BF16, 67, 515, 2048, true, 2e-5},  // split bf16 tensor cores
		{npu.BF16, 67, 515, 2048, false, 1e-5}, // widened fp32
		{npu.BF16, 33, 100, 131, true, 2e-5},   // odd K, unaligned rows
		{npu.F16, 2, 300, 1000, true, 1e-5},
		{npu.F16, 40, 300, 1000, true, 1e-5},
	} {
		name := fmt.Sprintf("MatMul %v M=%d N=%d K=%d split=%v", c.wdt, c.M, c.N, c.K, c.split)
		SplitBF16 = c.split
		x := h.rand(npu.F32, 1, c.M, c.K)
		w := h.rand(c.wdt, 0.05, c.N, c.K)
		o := h.zeros(npu.F32, c.M, c.N)
		h.g.MatMul(o.g, x.g, w.g)
		cpuBE.MatMul(o.c, x.c, w.c)
		h.sync()
		h.matmulErr(name, o, x, w, c.M, c.N, c.K, c.tol)
		h.free(x, w, o)
	}
	SplitBF16 = true
}

// TestGPUMatMulBF16Activations: with EnvBF16Activations the split
// GEMM's one pass is the product of x rounded to bf16, to fp32
// accumulation (the CPU multiplies the rounded x).
func TestGPUMatMulBF16Activations(t *testing.T) {
	h := newBoth(t, 19)
	defer func(on bool) { bf16Act = on }(bf16Act)
	bf16Act = true
	for _, c := range []struct{ M, N, K int }{{17, 300, 1024}, {67, 515, 2048}, {33, 100, 136}} {
		name := fmt.Sprintf("MatMul bf16 activations M=%d N=%d K=%d", c.M, c.N, c.K)
		x := h.rand(npu.F32, 1, c.M, c.K)
		_, xs := h.floats(x)
		for i, v := range xs {
			xs[i] = npu.BF16ToF32(npu.F32ToBF16(v))
		}
		xr := h.from(npu.F32, xs, c.M, c.K)
		w := h.rand(npu.BF16, 0.05, c.N, c.K)
		o := h.zeros(npu.F32, c.M, c.N)
		h.g.MatMul(o.g, x.g, w.g)
		cpuBE.MatMul(o.c, xr.c, w.c)
		h.sync()
		h.matmulErr(name, o, xr, w, c.M, c.N, c.K, 2e-5)
		h.free(x, xr, w, o)
	}
}

func TestGPUHC(t *testing.T) {
	h := newBoth(t, 10)
	for _, c := range []struct{ T, n, D, iters int }{{1, 4, 64, 20}, {7, 4, 257, 20}, {3, 2, 1024, 1}, {5, 3, 96, 0}, {1, 4, 4096, 20}, {20, 4, 256, 20}, {8, 4, 4096, 20}, {2, 6, 128, 20}, {3, 4, 4095, 20}} {
		mix := (2 + c.n) * c.n
		x := h.rand(npu.F32, 1, c.T, c.n, c.D)
		fn := h.rand(npu.F32, 0.02, mix, c.n*c.D)
		base := h.rand(npu.F32, 0.5, mix)
		scale := h.from(npu.F32, []float32{0.7, 1.1, 0.9}, 3)
		col := h.zeros(npu.F32, c.T, c.D)
		post := h.zeros(npu.F32, c.T, c.n)
		comb := h.zeros(npu.F32, c.T, c.n, c.n)
		p := npu.HCParams{Streams: c.n, SinkhornIters: c.iters, Eps: 1e-6, RMSEps: 1e-6}
		h.g.HCPre(col.g, post.g, comb.g, x.g, fn.g, base.g, scale.g, p)
		cpuBE.HCPre(col.c, post.c, comb.c, x.c, fn.c, base.c, scale.c, p)
		name := fmt.Sprintf("T=%d n=%d D=%d iters=%d", c.T, c.n, c.D, c.iters)
		h.close("HCPre collapsed "+name, col, 1e-5)
		h.close("HCPre post "+name, post, 1e-5)
		h.close("HCPre comb "+name, comb, 1e-5)
		// k_hc_fused (where it applies) against the two launches it
		// replaces: the same bits, twice over (its counters wrap to 0).
		for range 2 {
			var outs [2][3]*npu.Tensor
			for i, fused := range []bool{false, true} {
				outs[i] = [3]*npu.Tensor{npu.Must(h.g.Alloc(npu.F32, c.T, c.D)), npu.Must(h.g.Alloc(npu.F32, c.T, c.n)), npu.Must(h.g.Alloc(npu.F32, c.T, c.n, c.n))}
				hcFused = fused
				h.g.HCPre(outs[i][0], outs[i][1], outs[i][2], x.g, fn.g, base.g, scale.g, p)
			}
			hcFused = true
			for k, what := range []string{"collapsed", "post", "comb"} {
				two, one := make([]byte, outs[0][k].Bytes()), make([]byte, outs[1][k].Bytes())
				if err := h.g.Download(two, outs[0][k]); err != nil {
					t.Fatal(err)
				}
				if err := h.g.Download(one, outs[1][k]); err != nil {
					t.Fatal(err)
				}
				if string(one) != string(two) {
					t.Errorf("HCPre %s %s: k_hc_fused differs from k_hc_proj + k_hc_pre", what, name)
				}
				h.g.Free(outs[0][k])
				h.g.Free(outs[1][k])
			}
		}
		y := h.rand(npu.F32, 1, c.T, c.D)
		out := h.zeros(npu.F32, c.T, c.n, c.D)
		h.g.HCPost(out.g, y.g, post.g, comb.g, x.g)
		cpuBE.HCPost(out.c, y.c, post.c, comb.c, x.c)
		h.close("HCPost "+name, out, 1e-5)
		h.g.HCMean(col.g, x.g)
		cpuBE.HCMean(col.c, x.c)
		h.close("HCMean "+name, col, 1e-6)
		h.free(x, fn, base, scale, col, post, comb, y, out)
	}
}

func TestGPUConv1d(t *testing.T) {
	h := newBoth(t, 11)
	C := 133
	for _, W := range []int{1, 4} {
		for _, wdt := range []npu.DType{npu.F32, npu.BF16} {
			for _, silu := range []bool{false, true} {
				name := fmt.Sprintf("W=%d w=%v silu=%v", W, wdt, silu)
				// Prefill: sequences of 5, 1, 0 and 11 rows in slots 3, 0, 2, 1.
				l := &npu.BatchLayout{QueryStart: []int{0, 5, 6, 6, 17}, Pos: []int{0, 3, 0, 8}, StateSlot: []int{3, 0, 2, 1}, BlockSize: 16,
					BlockTables: [][]int32{{0}, {1}, {2}, {3, 4}}}
				gs, cs := h.layout(l)
				x := h.rand(npu.F32, 1, 17, C)
				w := h.rand(wdt, 0.5, C, W)
				state := h.rand(npu.F32, 1, 5, W-1, C)
				o := h.zeros(npu.F32, 17, C)
				h.g.Conv1d(o.g, x.g, state.g, w.g, gs, silu)
				cpuBE.Conv1d(o.c, x.c, state.c, w.c, cs, silu)
				h.close("Conv1d out "+name, o, 1e-5)
				h.close("Conv1d state "+name, state, 0)
				// Decode: one row per sequence (W > 1: the CPU reference's
				// Conv1dUpdate indexes an empty state when W == 1).
				if W > 1 {
					ld := &npu.BatchLayout{QueryStart: []int{0, 1, 2, 3}, Pos: []int{5, 4, 19}, StateSlot: []int{3, 0, 1}, BlockSize: 16,
						BlockTables: [][]int32{{0}, {1}, {3, 4}}}
					gd, cd := h.layout(ld)
					xd := h.rand(npu.F32, 1, 3, C)
					od := h.zeros(npu.F32, 3, C)
					for step := 0; step < 3; step++ {
						h.g.Conv1dUpdate(od.g, xd.g, state.g, w.g, gd, silu)
						cpuBE.Conv1dUpdate(od.c, xd.c, state.c, w.c, cd, silu)
					}
					h.close("Conv1dUpdate out "+name, od, 1e-5)
					h.close("Conv1dUpdate state "+name, state, 0)
					h.free(xd, od)
				}
				h.free(x, w, state, o)
			}
		}
	}
}

func TestGPUKDAGate(t *testing.T) {
	h := newBoth(t, 12)
	H, K, T := 5, 33, 7
	f := h.rand(npu.F32, 8, T, H*K)
	for _, dt := range []npu.DType{npu.F32, npu.BF16} {
		bias := h.rand(dt, 1, H*K)
		alog := h.rand(dt, 1, H)
		g := h.zeros(npu.F32, T, H*K)
		for _, p := range []npu.KDAGateParams{{HeadDim: K}, {HeadDim: K, HasLowerBound: true, LowerBound: -5}} {
			h.g.KDAGate(g.g, f.g, bias.g, alog.g, p)
			cpuBE.KDAGate(g.c, f.c, bias.c, alog.c, p)
			h.close(fmt.Sprintf("KDAGate %v %+v", dt, p), g, 1e-5)
		}
		h.free(bias, alog, g)
	}
	h.free(f)
}

func TestGPURouter(t *testing.T) {
	h := newBoth(t, 13)
	for _, c := range []struct {
		T, D, E int
		p       npu.RouterParams
		gdt     npu.DType
	}{
		{5, 129, 64, npu.RouterParams{TopK: 6, NGroup: 1, Normalize: true, Scale: 2.5}, npu.F32},
		{9, 256, 256, npu.RouterParams{TopK: 8, NGroup: 8, TopKGroup: 4, Normalize: true, Scale: 2.5}, npu.BF16},
		{3, 64, 16, npu.RouterParams{TopK: 4, NGroup: 16, TopKGroup: 3, Scale: 1}, npu.F32},
		{1, 4096, 64, npu.RouterParams{TopK: 8, NGroup: 1, Normalize: true, Scale: 2.5}, npu.F32}, // the slice's decode
		{8, 4096, 64, npu.RouterParams{TopK: 8, NGroup: 1, Normalize: true, Scale: 2.5}, npu.BF16},
		{20, 200, 32, npu.RouterParams{TopK: 4, NGroup: 4, TopKGroup: 2, Normalize: true, Scale: 1}, npu.F32}, // above routerFusedMaxT
	} {
		x := h.rand(npu.F32, 1, c.T, c.D)
		gate := h.rand(c.gdt, 0.2, c.E, c.D)
		bias := h.rand(npu.F32, 0.05, c.E)
		w := h.zeros(npu.F32, c.T, c.p.TopK)
		ids := h.zeros(npu.I32, c.T, c.p.TopK)
		name := fmt.Sprintf("Router T=%d E=%d %+v", c.T, c.E, c.p)
		cpuBE.Router(w.c, ids.c, x.c, gate.c, bias.c, c.p)
		// k_router_fused (up to routerFusedMaxT tokens) twice (its
		// counters wrap to 0), then the two launches: each against the
		// CPU, and the same bits.
		var first []byte
		for i, fused := range []bool{true, true, false} {
			routerFused = fused
			h.g.Fill(w.g, 0)
			h.g.Router(w.g, ids.g, x.g, gate.g, bias.g, c.p)
			h.exact(fmt.Sprintf("%s fused=%v ids", name, fused), ids)
			h.close(fmt.Sprintf("%s fused=%v weights", name, fused), w, 1e-5)
			got, _ := h.bytes(w)
			if i == 0 {
				first = got
			} else if !bytes.Equal(got, first) {
				t.Errorf("%s: weights differ between k_router_fused and k_router_scores + k_router (or a rerun)", name)
			}
		}
		routerFused = true
		h.free(x, gate, bias, w, ids)
	}
}
