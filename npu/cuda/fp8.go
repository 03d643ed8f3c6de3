package cuda

import "github.com/npuserve/npuserve/npu"

// FP8_BLOCK128 (kernels/fp8.cu; npu/cpu/qmatmul.go's fp8block is the
// reference), emulated on fp32 FMAs: activations fake-quantized per row
// per 128 columns (E4M3 times an F32 scale, bit for bit the CPU's
// quant.FP8ActFakeQuant), weights decoded with their F32 128x128 block
// scales as the GEMMs load them. Results equal the CPU's up to fp32
// summation order.

// fp8Fake enqueues k_fp8_act_fake over x [M, K] into o (o may be x).
func (b *Backend) fp8Fake(o, x uint64, M, K int) {
	blocks := M * ((K + npu.FP8Block - 1) / npu.FP8Block)
	b.launch("k_fp8_act_fake", b.gridFor(int64(blocks)*32, 256), d1(256), 0, o, x, pI64(M), pI32(K))
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
