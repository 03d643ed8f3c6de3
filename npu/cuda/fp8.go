package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// FP8_BLOCK128 (kernels/fp8.cu; npu/cpu/qmatmul.go's fp8block is the
// reference), emulated on fp32 FMAs: activations fake-quantized per row
// per 128 columns (E4M3 times an F32 scale, bit for bit the CPU's
// quant.FP8ActFakeQuant), weights decoded with their F32 128x128 block
// scales as the GEMMs load them. Results equal the CPU's up to fp32
// summation order.

// fp8Fake enqueues k_fp8_act's fake quantization of x [M, K] into o (o
// may be x).
func (b *Backend) fp8Fake(o, x uint64, M, K int) {
	blocks := M * ((K + npu.FP8Block - 1) / npu.FP8Block)
	b.launch("k_fp8_act", b.gridFor(int64(blocks)*32, 256), d1(256), 0, o, 0, 0, x, pI64(M), pI32(K))
}

// gemmFP8 enqueues C = A · W_e^T for an FP8_BLOCK128 weight p with
// fake-quantized fp32 A rows (row r reads A row tok[r] when tok != 0),
// grouped over rt or dense over M rows when rt is nil: the
// warp-per-column kernel for few rows (per expert), else the tiled one.
func (b *Backend) gemmFP8(c, a, tok uint64, p *qdev, rt *moeRoute, M int) {
	var off, tiles, ntiles uint64
	small, ys, ysSmall := M <= moeSmallRows, (M+moeBM-1)/moeBM, (M+moeBM-1)/moeBM
	if rt != nil {
		off, tiles, ntiles = rt.off, rt.tiles, rt.ntiles
		small, ys, ysSmall = rt.small, rt.maxTiles, min(rt.maxTiles, rt.n) // every tile holds a row
	}
	if small {
		vec := p.K%4 == 0 && a%16 == 0 && p.w%4 == 0
		b.launch("k_fp8b_gemv_f", d2((p.N+7)/8, ysSmall), d1(256), 0,
			c, a, tok, p.w, p.scale, tiles, ntiles, off, pI32(M), pI32(p.N), pI32(p.K), pBool(vec))
		return
	}
	b.launch("k_fp8b_gemm_f", d2((p.N+moeBN-1)/moeBN, ys), d1(256), 0,
		c, a, tok, p.w, p.scale, tiles, ntiles, off, pI32(M), pI32(p.N), pI32(p.K))
}

// EnvFP8TC, set to 0, keeps every FP8_BLOCK128 GEMM on the fp32-emulated
// kernels (the tensor-core path is otherwise taken where it applies).
const EnvFP8TC = "NPUSERVE_CUDA_FP8_TC"

// fp8TCMinRows is the fewest activation rows for which a dense
// FP8_BLOCK128 GEMM goes to the tensor cores: below it the warp-per-column
// kernels, which read each weight byte once, are bandwidth-bound anyway.
const fp8TCMinRows = 64

// useFP8TC says whether FP8_BLOCK128 GEMMs may run on e4m3 tensor cores:
// cuBLASLt's 128-element (activations) and 128x128 (weights) F32 block
// scaling, which cuBLAS 12.9 added for Hopper (sm_90) only.
func useFP8TC(major, minor, ltVer int, env string) bool {
	return major == 9 && minor == 0 && ltVer >= 120900 && env != "0"
}

// fp8TensorCore enqueues out[:mt] = x[:mt] · W^T for a dense FP8_BLOCK128
// weight p on the e4m3 tensor cores and returns mt, the rows it did (a
// multiple of 4: the activations' scale tensor is M-major, and a multiple
// of 4 rows makes its leading dimension 16-byte aligned whatever
// cuBLASLt pads it to); 0 when the path does not apply, and the caller
// runs the emulated kernels on the rows left.
//
// The activations are quantized as the emulated path fake-quantizes them
// (the same E4M3 codes and F32 scales, k_fp8_act); cuBLASLt then
// takes in column-major terms A = W (E4M3 [N, K] rows: K x N, op T) with
// its F32 [ceil(N/128), ceil(K/128)] scales as BLK128x128 (the
// checkpoint's order, ceil(K/128) a multiple of 4), B = the quantized
// rows (K x mt) with their scales as VEC128 ([ceil(K/128), mt], rows
// fastest), and D = out (N x mt, fp32; bf16 converted where cuBLASLt has
// no fp32 output for this shape). Products of E4M3 pairs are exact; the
// sums differ from the emulated path's in order and in the tensor cores'
// accumulation.
func (b *Backend) fp8TensorCore(out, x uint64, p *qdev, M int) int {
	mt, N, K := M&^3, p.N, p.K
	kb := (K + npu.FP8Block - 1) / npu.FP8Block
	if !b.fp8TC || p.E != 1 || mt < fp8TCMinRows || K%16 != 0 || N%8 != 0 || kb%4 != 0 || p.w%16 != 0 || p.scale%16 != 0 || out%16 != 0 {
		return 0
	}
	if b.fp8NoPlan(mt, N, K, p.w, out) {
		return 0
	}
	qBytes := (mt*K + 255) &^ 255
	buf := b.temp(qBytes + 4*mt*kb)
	defer b.freeBuf(buf)
	q, sc := buf.ptr, buf.ptr+uint64(qBytes)
	for _, dt := range fp8DTypes {
		plan, err := b.fp8Plan(mt, N, K, dt, p.w, q, out, p.scale, sc)
		if err != nil {
			continue
		}
		b.launch("k_fp8_act", b.gridFor(int64(mt*kb)*32, 256), d1(256), 0, 0, q, sc, x, pI64(mt), pI32(K))
		d := out
		var dbuf *buffer
		if dt != cudaR32F {
			dbuf = b.temp(2 * mt * N)
			d = dbuf.ptr
		}
		end := func() {}
		if b.prof != nil {
			end = b.span("cublasLtMatmul fp8")
		}
		if err := ltPlanRun(b.ctx, b.lt, plan, 1, 0, p.w, q, d, p.scale, sc, b.ltWS, b.ltWSBytes, b.stream); err != nil {
			b.fail(fmt.Errorf("cuda: MatMulQ FP8_BLOCK128 [%d,%d]x[%d,%d]^T on tensor cores: %w", mt, K, N, K, err))
		}
		end()
		if dbuf != nil {
			n := mt * N
			b.convert(out, npu.F32, d, npu.BF16, n)
			b.freeBuf(dbuf)
		}
		b.fp8TCRuns++
		return mt
	}
	return 0
}

// fp8DTypes are the D types an FP8_BLOCK128 GEMM is planned with, in
// order of preference (bf16 is converted to fp32 afterwards).
var fp8DTypes = [...]int{cudaR32F, cudaR16BF}

// fp8Key is the plan key of an FP8_BLOCK128 GEMM with D of type dt.
func fp8Key(M, N, K, dt int, w, x, out uint64) planKey {
	return planKey{m: M, n: N, k: K, abType: cudaR8FE4M3, align: alignment(w, x, out), dType: dt, scaled: true}
}

// fp8NoPlan reports whether cuBLASLt has already answered that it has no
// FP8_BLOCK128 algorithm for this shape with either D type, so that
// fp8TensorCore falls back without allocating its scratch. The key
// assumes that scratch is 256-byte aligned (device allocations are);
// were it not, the check would miss and the plan lookup would answer.
func (b *Backend) fp8NoPlan(M, N, K int, w, out uint64) bool {
	for _, dt := range fp8DTypes {
		if _, ok := b.noPlan[fp8Key(M, N, K, dt, w, 0, out)]; !ok {
			return false
		}
	}
	return true
}

// fp8Plan is the cuBLASLt plan of an FP8_BLOCK128 GEMM with D of type dt
// (cached, as is cuBLASLt's answer that it has none).
func (b *Backend) fp8Plan(M, N, K, dt int, w, x, out, wScale, xScale uint64) (uintptr, error) {
	key := fp8Key(M, N, K, dt, w, x, out)
	return b.cachedPlan(key, func() (uintptr, error) {
		return ltPlanCreate(b.ctx, b.lt, true, false, N, M, K, cudaR8FE4M3, dt, K, K, N, key.align, b.ltWSBytes, scaleBlk128F32, scaleVec128F32, wScale, xScale)
	})
}
