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
	defer func() { gemvTC = true }()
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
	} {
		x := h.rand(npu.F32, 1, c.M, c.K)
		w := h.rand(npu.BF16, 0.05, c.N, c.K)
		o := h.zeros(npu.F32, c.M, c.N)
		cpuBE.MatMul(o.c, x.c, w.c)
		for _, tc := range []bool{true, false} {
			gemvTC = tc
			name := fmt.Sprintf("MatMul %s M=%d N=%d K=%d gemvTC=%v", c.name, c.M, c.N, c.K, tc)
			h.g.Fill(o.g, float32(math.NaN())) // every element must be written
			h.g.MatMul(o.g, x.g, w.g)
			h.sync()
			if g, _ := h.floats(o); slices.ContainsFunc(g, func(v float32) bool { return v != v }) {
				t.Errorf("%s: an element left unwritten (NaN)", name)
			}
			h.matmulErr(name, o, x, w, c.M, c.N, c.K, 2e-5)
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
	const N, K = 1000, 4096
	x := h.rand(npu.F32, 1, 16, K)
	w := h.rand(npu.BF16, 0.05, N, K)
	var first []byte
	for _, M := range []int{16, 16, 8, 1} {
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
