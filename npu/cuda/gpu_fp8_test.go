package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// GPU tests of FP8_BLOCK128 (fp8.go) against the CPU backend (skipped
// without a GPU, like gpu_test.go).

// fp8BlockQWeight makes a random FP8_BLOCK128 weight [N, K] (E == 0) or
// [E, N, K] on both backends: random E4M3 bytes (no NaNs) and F32 block
// scales [E, ceil(N/128), ceil(K/128)].
func (h *both) fp8BlockQWeight(E, N, K int) (g, c *npu.QuantWeight) {
	h.t.Helper()
	B := npu.FP8Block
	wshape, sshape := []int{N, K}, []int{(N + B - 1) / B, (K + B - 1) / B}
	if E > 0 {
		wshape, sshape = append([]int{E}, wshape...), append([]int{E}, sshape...)
	}
	wb := make([]byte, max(E, 1)*N*K)
	for i := range wb {
		wb[i] = byte(h.r.IntN(256))
		if wb[i]&0x7f == 0x7f {
			wb[i] = 0x7e // not NaN
		}
	}
	sv := make([]float32, max(E, 1)*sshape[len(sshape)-2]*sshape[len(sshape)-1])
	for i := range sv {
		sv[i] = 1e-3 + 9e-3*h.r.Float32()
	}
	w, s := h.raw(npu.F8E4M3, wb, wshape...), h.from(npu.F32, sv, sshape...)
	g = &npu.QuantWeight{Scheme: npu.QFP8Block, GroupSize: B, Weight: w.g, Scale: s.g}
	c = &npu.QuantWeight{Scheme: npu.QFP8Block, GroupSize: B, Weight: w.c, Scale: s.c}
	return g, c
}

// fp8Acts returns M rows of K activations with the cases the quantizer
// must get right: normal values (at several magnitudes when special:
// the GEMM tests keep one, so that every row counts against the
// output's RMS), an all-zero row
// (the 1e-12 scale floor), a row of tiny values (subnormal E4M3 codes
// under the floor), an outlier that saturates nothing but crushes its
// group, and, when special, an infinity and a NaN in groups of their own
// rows.
func (h *both) fp8Acts(M, K int, special bool) []float32 {
	x := make([]float32, M*K)
	for m := range M {
		scale := float32(1)
		if special {
			scale = float32(math.Pow(10, float64(h.r.IntN(9)-4)))
		}
		for c := range K {
			x[m*K+c] = float32(h.r.NormFloat64()) * scale
		}
	}
	if M > 1 {
		clear(x[K : 2*K])
	}
	if M > 2 {
		for c := range K {
			x[2*K+c] = float32(h.r.NormFloat64()) * 1e-13
		}
		x[2*K+K/2] = 1e4
	}
	if special && M > 3 {
		x[3*K] = float32(math.Inf(1))
		x[3*K+K-1] = float32(math.NaN())
	}
	return x
}

func TestGPUFP8ActQuant(t *testing.T) {
	h := newBoth(t, 31)
	for _, c := range []struct{ M, K int }{{1, 1}, {4, 77}, {5, 128}, {7, 300}, {70, 1000}, {3, 4096}} {
		name := fmt.Sprintf("FP8 act quant M=%d K=%d", c.M, c.K)
		xv := h.fp8Acts(c.M, c.K, true)
		x := h.from(npu.F32, xv, c.M, c.K)
		o := h.zeros(npu.F32, c.M, c.K)
		h.g.fp8Fake(h.g.ptr(o.g), h.g.ptr(x.g), c.M, c.K)
		h.sync()
		want := append([]float32(nil), xv...)
		for m := range c.M {
			quant.FP8ActFakeQuant(want[m*c.K:(m+1)*c.K], npu.FP8Block)
		}
		got, _ := h.floats(o)
		for i := range want {
			g, w := got[i], want[i]
			if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("%s: element %d (x %v): GPU %v (%#x), CPU %v (%#x)", name, i, xv[i], g, math.Float32bits(g), w, math.Float32bits(w))
			}
		}
		// In place, as MoEQ's down projection runs it.
		h.g.fp8Fake(h.g.ptr(x.g), h.g.ptr(x.g), c.M, c.K)
		h.sync()
		got, _ = h.floats(x)
		for i := range want {
			if g, w := got[i], want[i]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("%s in place: element %d: GPU %v, CPU %v", name, i, g, w)
			}
		}
		t.Logf("%s: %d values bit-identical", name, len(want))
		h.free(x, o)
	}
}

func TestGPUMatMulQFP8Block(t *testing.T) {
	h := newBoth(t, 32)
	for _, M := range []int{1, 3, 17, 70} {
		for _, N := range []int{77, 200} {
			for _, K := range []int{96, 300, 301} {
				name := fmt.Sprintf("MatMulQ FP8_BLOCK128 M=%d N=%d K=%d", M, N, K)
				wg, wc := h.fp8BlockQWeight(0, N, K)
				x := h.from(npu.F32, h.fp8Acts(M, K, false), M, K)
				o := h.zeros(npu.F32, M, N)
				h.g.PrepareQuant(wg)
				h.g.MatMulQ(o.g, x.g, wg)
				cpuBE.MatMulQ(o.c, x.c, wc)
				h.sync()
				// The same quantized activations and decoded weights:
				// only the fp32 summation order differs.
				h.close(name, o, 1e-5)
				h.free(x, o)
			}
		}
	}
}

func TestGPUMoEQFP8Block(t *testing.T) {
	h := newBoth(t, 33)
	cases := append([]moeCase{
		{3, 200, 5, 136, 2},  // warp-per-column, blocks across D and 2I
		{9, 301, 6, 77, 3},   // odd K: the scalar loads
		{70, 160, 4, 150, 2}, // tiled GEMMs, partial blocks
	}, moeCases...)
	for _, c := range cases {
		name := fmt.Sprintf("MoEQ FP8_BLOCK128 %+v", c)
		gg, gc := h.fp8BlockQWeight(c.E, 2*c.I, c.D)
		dg, dc := h.fp8BlockQWeight(c.E, c.D, c.I)
		x := h.rand(npu.F32, 1, c.T, c.D)
		w := h.rand(npu.F32, 0.5, c.T, c.k)
		ids := h.ints(h.moeIDs(c.T, c.k, c.E), c.T, c.k)
		out := h.rand(npu.F32, 1, c.T, c.D)
		h.g.MoEQ(out.g, x.g, gg, dg, w.g, ids.g, 7)
		cpuBE.MoEQ(out.c, x.c, gc, dc, w.c, ids.c, 7)
		h.sync()
		// SwiGLU's last-bit differences can move a requantized value by
		// one E4M3 step, hence the looser bound (as TestGPUMoEQ's).
		h.close(name, out, 5e-3)
		h.free(x, w, ids, out)
	}
}

// TestGPUMatMulQFP8BlockTensorCore checks the e4m3 tensor-core path
// (fp8TensorCore) against the CPU backend at prefill-sized row counts,
// including row counts that leave 1–3 rows to the emulated kernels, and
// fails when the path did not run on a GPU that should take it (Hopper,
// cuBLASLt 12.9 or later).
func TestGPUMatMulQFP8BlockTensorCore(t *testing.T) {
	h := newBoth(t, 34)
	for _, c := range []struct{ M, N, K int }{
		{64, 256, 512},
		{130, 384, 1024},  // 128 rows on tensor cores, 2 emulated
		{259, 136, 512},   // N not a multiple of 128: a partial scale block
		{256, 1024, 2048}, // several K blocks of scales per row
		// The 512-wide model's prefill shapes (96 rows): outputs narrower
		// than one scale block, and K not a multiple of 128.
		{96, 8, 512},
		{96, 24, 512},
		{96, 1536, 512},
		{96, 64, 496},
	} {
		name := fmt.Sprintf("MatMulQ FP8_BLOCK128 tensor cores M=%d N=%d K=%d", c.M, c.N, c.K)
		wg, wc := h.fp8BlockQWeight(0, c.N, c.K)
		x := h.from(npu.F32, h.fp8Acts(c.M, c.K, false), c.M, c.K)
		o := h.zeros(npu.F32, c.M, c.N)
		h.g.PrepareQuant(wg)
		runs := h.g.fp8TCRuns
		h.g.MatMulQ(o.g, x.g, wg)
		cpuBE.MatMulQ(o.c, x.c, wc)
		h.sync()
		if h.g.fp8TC && h.g.fp8TCRuns == runs {
			var why []string
			for k, err := range h.g.noPlan {
				if k.m == c.M&^3 && k.n == c.N && k.k == c.K {
					why = append(why, err.Error())
				}
			}
			t.Fatalf("%s: the tensor-core path did not run (cuBLASLt %d): %v", name, ltVersion(), why)
		}
		// Exact E4M3 products; the tensor cores' accumulation and order
		// differ from the CPU's fp32 sums.
		h.close(name, o, 2e-3)
		h.free(x, o)
	}
	if !h.g.fp8TC {
		t.Logf("the tensor-core path is off on this GPU (%s, cuBLASLt %d): the emulated kernels ran", h.g.arch, ltVersion())
	}
}

func TestUseFP8TC(t *testing.T) {
	for _, c := range []struct {
		major, minor, lt int
		env              string
		want             bool
	}{
		{9, 0, 130002, "", true},
		{9, 0, 120900, "1", true},
		{9, 0, 120804, "", false}, // before cuBLAS 12.9's block scaling
		{9, 0, 130002, "0", false},
		{8, 9, 130002, "", false},  // Ada: no block scaling
		{10, 0, 130002, "", false}, // Blackwell: other scale modes
	} {
		if got := useFP8TC(c.major, c.minor, c.lt, c.env); got != c.want {
			t.Errorf("useFP8TC(%d.%d, cuBLASLt %d, %q) = %v, want %v", c.major, c.minor, c.lt, c.env, got, c.want)
		}
	}
}
