package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// hcMaxStreams is HC_MAX_STREAMS of kernels/hc.cu.
const hcMaxStreams = 16

// hcFused selects k_hc_fused (k_hc_proj and k_hc_pre in one launch) where
// it applies; false keeps the two launches (tests compare them).
var hcFused = true

// The backend's zeroed counters (gemvCnt, cntWords int32s): the split-K
// GEMV's tile counts, then k_hc_fused's token counts (from hcCntOff), then
// k_router_fused's (from routerCntOff).
const (
	hcCntOff     = gemvSplitTiles
	routerCntOff = hcCntOff + hcProjMaxT
	cntWords     = routerCntOff + routerFusedMaxT
)

// hcProjMaxT is the most tokens whose HCPre projection runs as k_hc_proj
// (one block per output, a decode step's sizes); more go to MatMul.
const hcProjMaxT = 16

// HCPre is the mHC input side (see npu.Ops.HCPre): the mixing projection
// of all tokens as one MatMul (k_hc_proj with the sums of squares for a
// decode step's few tokens), then k_hc_pre per token for the RMS scale,
// pre/post, the Sinkhorn combination (in warp 0's registers for n <= 5)
// and the collapse (over hcPreSlices blocks when the sums came with the
// projection).
func (b *Backend) HCPre(collapsed, post, comb, x, fn, base, scale *npu.Tensor, p npu.HCParams) {
	n := p.Streams
	if n < 1 || x.Rank() != 3 || x.Dim(1) != n {
		panic(fmt.Sprintf("cuda: HCPre x %v with %d streams", x, n))
	}
	if n > hcMaxStreams {
		panic(fmt.Sprintf("cuda: HCPre supports up to %d streams, got %d", hcMaxStreams, n))
	}
	T, D := x.Dim(0), x.Dim(2)
	mix := (2 + n) * n
	if fn.Numel() != mix*n*D || fn.Dim(0) != mix || base.Numel() != mix || scale.Numel() != 3 {
		panic(fmt.Sprintf("cuda: HCPre fn %v base %v scale %v for %d streams of %d", fn, base, scale, n, D))
	}
	if collapsed.Numel() != T*D || post.Numel() != T*n || comb.Numel() != T*n*n {
		panic(fmt.Sprintf("cuda: HCPre outputs collapsed %v post %v comb %v for x %v", collapsed, post, comb, x))
	}
	wantF32("HCPre", collapsed, post, comb, x)
	wantFloat("HCPre", base)
	wantFloat("HCPre", scale)
	if T == 0 {
		return
	}
	nD := n * D
	ssOff := (4*T*mix + 7) &^ 7
	mbuf := b.temp(ssOff + 8*T)
	mt := npu.NewTensor(mbuf, 0, npu.F32, T, mix)
	ss, S := uint64(0), 1
	pc, px := b.ptr(collapsed), b.ptr(x)
	vec := vec4(D, pc, px)
	threads := max(vecThreads(nD, vec), (n*n+31)/32*32)
	if pf := b.ptr(fn); T <= hcProjMaxT && fn.DType() == npu.F32 && vec4(nD, px, pf) {
		// A decode step's few tokens: the sums of squares ride along with
		// the projection, so k_hc_pre's blocks only collapse their slice.
		ss = mbuf.ptr + uint64(ssOff)
		if hcFused && vec && n*n <= 32 {
			// One launch: the projection's last block per token finishes it.
			b.launch("k_hc_fused", d2(mix+1, T), d1(max(vecThreads(nD/4, true), 64)), 0,
				pc, b.ptr(post), b.ptr(comb), mbuf.ptr, px, pf,
				b.ptr(base), pI32(dtypeCode(base.DType())), b.ptr(scale), pI32(dtypeCode(scale.DType())),
				pI32(n), pI32(D), pI32(p.SinkhornIters), pF32(p.Eps), pF32(p.RMSEps), ss, b.gemvCnt+4*hcCntOff)
			b.freeBuf(mbuf)
			return
		}
		b.launch("k_hc_proj", d2(mix+1, T), d1(vecThreads(nD/4, true)), 0, mbuf.ptr, px, pf, pI32(nD), pI32(mix), ss)
		S = hcPreSlices(D, vec)
		threads = max(vecThreads((D+S-1)/S, vec), (n*n+31)/32*32) // the n x n part needs a thread per element
	} else {
		b.MatMul(mt, x.Reshape(T, nD), fn.Reshape(mix, nD))
	}
	b.launch("k_hc_pre", d2(T, S), d1(threads), 0,
		pc, b.ptr(post), b.ptr(comb), px, mbuf.ptr,
		b.ptr(base), pI32(dtypeCode(base.DType())), b.ptr(scale), pI32(dtypeCode(scale.DType())),
		pI32(n), pI32(D), pI32(p.SinkhornIters), pF32(p.Eps), pF32(p.RMSEps), pBool(vec), ss)
	b.freeBuf(mbuf)
}

// hcPreSlices is how many blocks share one token's collapse in k_hc_pre
// when its sums of squares come precomputed: slices of at least 256
// float4s (1024 floats), at most 8.
func hcPreSlices(D int, vec bool) int {
	per := 1024
	if !vec {
		per = 256
	}
	return min(max(D/per, 1), 8)
}

// HCPost writes out[t, j] = post[t, j]*y[t] + sum_i comb[t, i, j]*x[t, i].
func (b *Backend) HCPost(out, y, post, comb, x *npu.Tensor) {
	if x.Rank() != 3 {
		panic(fmt.Sprintf("cuda: HCPost x %v is not [T, n, D]", x))
	}
	T, n, D := x.Dim(0), x.Dim(1), x.Dim(2)
	if out.Numel() != T*n*D || y.Numel() != T*D || post.Numel() != T*n || comb.Numel() != T*n*n {
		panic(fmt.Sprintf("cuda: HCPost out %v y %v post %v comb %v for x %v", out, y, post, comb, x))
	}
	wantF32("HCPost", out, y, post, comb, x)
	total := int64(T) * int64(n) * int64(D)
	if total == 0 {
		return
	}
	b.launch("k_hc_post", b.gridFor(total, elemThreads), d1(elemThreads), 0,
		b.ptr(out), b.ptr(y), b.ptr(post), b.ptr(comb), b.ptr(x), pI64(T), pI32(n), pI32(D))
}

// HCMean writes out [T, D] = the mean of the n streams of x [T, n, D].
func (b *Backend) HCMean(out, x *npu.Tensor) {
	if x.Rank() != 3 {
		panic(fmt.Sprintf("cuda: HCMean x %v is not [T, n, D]", x))
	}
	T, n, D := x.Dim(0), x.Dim(1), x.Dim(2)
	if out.Numel() != T*D {
		panic(fmt.Sprintf("cuda: HCMean out %v for x %v", out, x))
	}
	wantF32("HCMean", out, x)
	if T*D == 0 || n == 0 {
		return
	}
	b.launch("k_hc_mean", b.gridFor(int64(T*D), elemThreads), d1(elemThreads), 0,
		b.ptr(out), b.ptr(x), pI64(T), pI32(n), pI32(D))
}
