package cuda

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// GPU tests of k_gemv_tc, the decode MatMul and MoE GEMM for BF16
// weights, against the CPU backend at the configs/slice shapes and at
// odd ones (skipped without a GPU, like gpu_test.go). gemvTC = false runs
// the fp32 CUDA-core kernels it replaced on the same inputs.

func TestGPUGEMV(t *testing.T) {
	h := newBoth(t, 31)
	defer func(e bool) { gemvTC, gemvEarly = true, e }(gemvEarly)
	for _, c := range []struct {
		name    string
		M, N, K int
	}{
		{"lm_head", 1, 154880, 4096},
		{"q/kv 4096x4096", 1, 4096, 4096},
		{"q/kv 4096x4096", 3, 4096, 4096},
		{"q/kv 4096x4096", 8, 4096, 4096},
		{"q/kv 4096x4096 (k_gemv_tc16)", 16, 4096, 4096},
		{"dense gate_up (k_gemv_tc16)", 12, 24576, 4096},
		{"k_gemv_tc16, odd sizes", 9, 77, 136},
		{"q_a (16 warps per block)", 8, 1536, 4096},
		{"q_b (K of 48 blocks: ragged groups)", 8, 16384, 1536},
		{"o_proj", 3, 4096, 16384},
		{"dense gate_up", 1, 24576, 4096},
		{"dense down", 8, 4096, 12288},
		{"shared expert down", 5, 4096, 2048},
		{"partial column tile, K % 32 != 0", 5, 77, 136},
		{"one column, 4 warps", 2, 1, 72},
		{"K = 8", 8, 33, 8},
		{"K % 8 != 0: k_gemm_small", 3, 50, 129},
		{"K % 8 != 0, M > 4: split cuBLASLt", 8, 50, 131},
		{"split K: a gate's 128 columns", 1, 128, 4096},
		{"split K: 64 columns, 8 rows", 8, 64, 4096},
		{"split K (k_gemv_tc16), ragged slices", 13, 40, 3000},
		{"split K: 496 columns", 2, 496, 4096},
	} {
		x := h.rand(npu.F32, 1, c.M, c.K)
		w := h.rand(npu.BF16, 0.05, c.N, c.K)
		h.g.MarkWeights(w.g)
		o := h.zeros(npu.F32, c.M, c.N)
		cpuBE.MatMul(o.c, x.c, w.c)
		var late []float32
		for _, f := range []struct{ tc, early bool }{{true, false}, {true, true}, {false, false}} {
			gemvTC, gemvEarly = f.tc, f.early
			name := fmt.Sprintf("MatMul %s M=%d N=%d K=%d gemvTC=%v early=%v", c.name, c.M, c.N, c.K, f.tc, f.early)
			h.g.Fill(o.g, float32(math.NaN())) // every element must be written
			h.g.MatMul(o.g, x.g, w.g)
			h.sync()
			g, _ := h.floats(o)
			if slices.ContainsFunc(g, func(v float32) bool { return v != v }) {
				t.Errorf("%s: an element left unwritten (NaN)", name)
			}
			h.matmulErr(name, o, x, w, c.M, c.N, c.K, 2e-5)
			switch {
			case f.tc && !f.early:
				late = g
			case f.early && !slices.Equal(g, late):
				t.Errorf("%s: the early weight loads changed the result", name)
			}
		}
		h.free(x, w, o)
	}
}

// TestGPUGEMVNonFinite: an infinity in x stays one through the
// three-part split (its remainder is not NaN), a NaN stays a NaN, and
// the other rows are unaffected.
func TestGPUGEMVNonFinite(t *testing.T) {
	h := newBoth(t, 34)
	const M, N, K = 3, 40, 256
	xs := make([]float32, M*K)
	for i := range xs {
		xs[i] = float32(h.r.NormFloat64())
	}
	xs[5] = float32(math.Inf(1))
	xs[K+7] = float32(math.NaN())
	x := h.from(npu.F32, xs, M, K)
	w := h.rand(npu.BF16, 0.05, N, K)
	o := h.zeros(npu.F32, M, N)
	h.g.MatMul(o.g, x.g, w.g)
	cpuBE.MatMul(o.c, x.c, w.c)
	h.sync()
	h.close(fmt.Sprintf("MatMul M=%d N=%d K=%d with inf and NaN", M, N, K), o, 2e-5)
	h.free(x, w, o)
}

// TestGPUGEMVDeterministic: a row's result from k_gemv_tc and
// k_gemv_tc16 does not depend on how many rows run with it (1, 8 or 16),
// and a rerun gives the same bits.
func TestGPUGEMVDeterministic(t *testing.T) {
	h := newBoth(t, 32)
	for _, N := range []int{1000, 128} { // 128: split K (gemvSplitK)
		const K = 4096
		x := h.rand(npu.F32, 1, 16, K)
		w := h.rand(npu.BF16, 0.05, N, K)
		var first []byte
		for _, M := range []int{16, 16, 8, 1, 1} {
			o := h.zeros(npu.F32, M, N)
			h.g.MatMul(o.g, x.g.Rows(0, M), w.g)
			h.sync()
			got, _ := h.bytes(o)
			if first == nil {
				first = got
			} else if !bytes.Equal(got, first[:len(got)]) {
				t.Errorf("MatMul N=%d K=%d: the first %d rows differ from theirs in a run of 16", N, K, M)
			}
			h.free(o)
		}
		h.free(x, w)
	}
}

// TestGPUMoEDecode runs MoE at the slice's expert shapes (hidden 4096,
// intermediate 2048, top-8; 16 experts rather than 64 to bound the CPU
// reference's memory) at decode batches, and an expert with more rows
// than one routing tile, through k_gemv_tc and through k_moe_gemv_f, and
// MoEQ (W8A8_DYNAMIC, k_gemv_i8) on the same routings.
func TestGPUMoEDecode(t *testing.T) {
	h := newBoth(t, 33)
	defer func() { gemvTC = true }()
	// Expert 0 takes all but one assignment of each token (repeats, as
	// the CPU allows), so it has (k-1)T rows: more than a 64-row tile.
	crowd := func(T, k int) []int32 {
		ids := make([]int32, T*k)
		for i := range ids {
			if i%k == k-1 {
				ids[i] = int32(1 + (i/k)%15)
			}
		}
		return ids
	}
	for _, c := range []struct {
		name          string
		T, D, E, I, k int
		ids           func(T, k int) []int32
	}{
		{"slice batch 1", 1, 4096, 16, 2048, 8, nil},
		{"slice batch 8", 8, 4096, 16, 2048, 8, nil},
		{"odd, K % 32 != 0", 3, 136, 7, 40, 3, nil},
		{"expert 0 with 80 rows (two tiles)", 40, 264, 16, 96, 3, crowd},
	} {
		gu := h.rand(npu.BF16, 0.05, c.E, 2*c.I, c.D)
		dn := h.rand(npu.BF16, 0.05, c.E, c.D, c.I)
		var ids pair
		if c.ids != nil {
			ids = h.ints(c.ids(c.T, c.k), c.T, c.k)
		} else {
			v := make([]int32, c.T*c.k)
			for tok := range c.T {
				for j, e := range h.r.Perm(c.E)[:c.k] {
					v[tok*c.k+j] = int32(e)
				}
			}
			ids = h.ints(v, c.T, c.k)
		}
		x := h.rand(npu.F32, 1, c.T, c.D)
		w := h.rand(npu.F32, 0.5, c.T, c.k)
		for _, tc := range []bool{true, false} {
			gemvTC = tc
			name := fmt.Sprintf("MoE %s T=%d D=%d E=%d I=%d top-%d gemvTC=%v", c.name, c.T, c.D, c.E, c.I, c.k, tc)
			out := h.rand(npu.F32, 1, c.T, c.D)
			h.g.MoE(out.g, x.g, gu.g, dn.g, w.g, ids.g, 7)
			cpuBE.MoE(out.c, x.c, gu.c, dn.c, w.c, ids.c, 7)
			h.sync()
			h.close(name, out, 2e-5)
			h.free(out)
		}
		// The int8 decode GEMV (k_gemv_i8) on the same routing.
		name := fmt.Sprintf("MoEQ W8A8_DYNAMIC %s T=%d D=%d E=%d I=%d top-%d", c.name, c.T, c.D, c.E, c.I, c.k)
		gg, gc := h.qweight(npu.QW8A8Dynamic, c.E, 2*c.I, c.D, 0)
		dg, dc := h.qweight(npu.QW8A8Dynamic, c.E, c.D, c.I, 0)
		out := h.rand(npu.F32, 1, c.T, c.D)
		h.g.MoEQ(out.g, x.g, gg, dg, w.g, ids.g, 7)
		cpuBE.MoEQ(out.c, x.c, gc, dc, w.c, ids.c, 7)
		h.sync()
		h.close(name, out, 5e-3) // as TestGPUMoEQ: requantized SwiGLU rows
		h.free(out, gu, dn, ids, x, w)
		for _, q := range [][2]*npu.QuantWeight{{gg, gc}, {dg, dc}} {
			h.free(pair{q[0].Weight, q[1].Weight}, pair{q[0].Scale, q[1].Scale})
		}
	}
}
