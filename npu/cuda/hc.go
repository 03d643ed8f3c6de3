package cuda

import (
	"fmt"
	"os"
	"strings"

	"github.com/npuserve/npuserve/npu"
)

// hcMaxStreams is HC_MAX_STREAMS of kernels/hc.cu.
const hcMaxStreams = 16

// hcFused selects k_hc_fused (k_hc_proj and k_hc_pre in one launch) where
// it applies; false keeps the two launches (tests compare them).
var hcFused = true

// cntWords is the size of the backend's zeroed counters (gemvCnt): the
// split-K GEMV's tile counts, then k_hc_fused's token counts, then
// k_router_fused's.
const cntWords = gemvSplitTiles + hcProjMaxT + routerFusedMaxT

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
	b.hcPre(collapsed, post, comb, x, fn, base, scale, p, nil)
}

// EnvDecodeFusion picks the decode launch fusions, for measurements: "0"
// none, else a comma-separated list of "norm" (HCPreNorm's norm inside
// k_hc_fused), "postpre" (k_hc_postpre), "router" (k_router_fused) and
// "swiglu" (the SwiGLU inside the down GEMVs: MoE, MatMulSwiGLU); unset,
// defaultDecodeFusions. Every setting gives the same results (up to the
// last bit of HCPre's projection sums for postpre).
const EnvDecodeFusion = "NPUSERVE_CUDA_DECODE_FUSION"

// defaultDecodeFusions are the fusions on by default: "swiglu" is not
// (k_gemv_tc_sw measured slower than k_swiglu plus k_gemv_tc on the
// H200, docs/performance.md).
const defaultDecodeFusions = "norm,postpre,router"

// decodeFusions is EnvDecodeFusion's setting at start-up.
var decodeFusions = parseFusions(os.Getenv(EnvDecodeFusion))

// parseFusions reads EnvDecodeFusion's value (see there).
func parseFusions(v string) map[string]bool {
	if v == "" {
		v = defaultDecodeFusions
	}
	on := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		on[strings.TrimSpace(f)] = true
	}
	return on
}

// hcNormFused lets HCPreNorm end k_hc_fused with the norm; false keeps
// the RMSNorm launch.
var hcNormFused = decodeFusions["norm"]

// hcNorm is HCPreNorm's RMSNorm of the collapsed rows.
type hcNorm struct {
	out, w *npu.Tensor
	eps    float32
}

// HCPreNorm is HCPre followed by RMSNorm(normed, collapsed, w, eps) (see
// npu.HCPreNormer). Where k_hc_fused serves HCPre (a decode step) and its
// block is k_rmsnorm's for a row of D, the norm runs at the end of that
// launch, one launch fewer per sublayer with the same bits; elsewhere it
// is the two ops.
func (b *Backend) HCPreNorm(normed, collapsed, post, comb, x, fn, base, scale, w *npu.Tensor, p npu.HCParams, eps float32) {
	if w == nil || x.Rank() != 3 || w.Numel() != x.Dim(2) {
		panic(fmt.Sprintf("cuda: HCPreNorm weight %v for x %v (one weight per collapsed element)", w, x))
	}
	normGroups("HCPreNorm", normed, collapsed, w.Numel())
	wdt("HCPreNorm", w)
	var norm *hcNorm
	if hcNormFused {
		norm = &hcNorm{normed, w, eps}
	}
	if !b.hcPre(collapsed, post, comb, x, fn, base, scale, p, norm) {
		b.RMSNorm(normed, collapsed, w, eps)
	}
}

// hcPostPreFused selects k_hc_postpre for HCPostPreNorm where it applies;
// false runs HCPost then HCPreNorm (tests compare them).
var hcPostPreFused = decodeFusions["postpre"]

// HCPostPreNorm is HCPost(xn, y, post0, comb0, x) then HCPreNorm(normed,
// collapsed, post, comb, xn, fn, base, scale, w, p, eps) (see
// npu.HCPostPreNormer). For a decode step's few tokens (4 streams or so,
// float4 rows, F32 fn) it is one launch, k_hc_postpre: G blocks per token
// form the new streams and partial sums of the projection, the last one
// finishes the token. Elsewhere it is the two ops.
func (b *Backend) HCPostPreNorm(xn, y, post0, comb0, x, normed, collapsed, post, comb, fn, base, scale, w *npu.Tensor, p npu.HCParams, eps float32) {
	n := p.Streams
	if x.Rank() != 3 || xn.Rank() != 3 || xn.Dim(0) != x.Dim(0) || xn.Dim(1) != x.Dim(1) || xn.Dim(2) != x.Dim(2) {
		panic(fmt.Sprintf("cuda: HCPostPreNorm xn %v for x %v", xn, x))
	}
	T, D := x.Dim(0), x.Dim(2)
	mix := (2 + n) * n
	fits := hcPostPreFused && T > 0 && T <= hcProjMaxT && n >= 1 && n*n <= 32 && x.Dim(1) == n && D%4 == 0 &&
		fn.DType() == npu.F32 && fn.Numel() == mix*n*D && w != nil && w.Numel() == D &&
		vec4(D, b.ptr(xn), b.ptr(x), b.ptr(y), b.ptr(collapsed), b.ptr(normed), b.ptr(fn))
	if !fits {
		b.HCPost(xn, y, post0, comb0, x)
		b.HCPreNorm(normed, collapsed, post, comb, xn, fn, base, scale, w, p, eps)
		return
	}
	// The ops' checks, before anything is enqueued.
	if y.Numel() != T*D || post0.Numel() != T*n || comb0.Numel() != T*n*n || post.Numel() != T*n || comb.Numel() != T*n*n ||
		collapsed.Numel() != T*D || base.Numel() != mix || scale.Numel() != 3 {
		panic(fmt.Sprintf("cuda: HCPostPreNorm y %v post %v/%v comb %v/%v collapsed %v base %v scale %v for x %v",
			y, post0, post, comb0, comb, collapsed, base, scale, x))
	}
	if b.ptr(post) == b.ptr(post0) || b.ptr(comb) == b.ptr(comb0) {
		panic("cuda: HCPostPreNorm post and comb alias post0 and comb0")
	}
	wantF32("HCPostPreNorm", xn, y, post0, comb0, x, collapsed, post, comb)
	wantFloat("HCPostPreNorm", base)
	wantFloat("HCPostPreNorm", scale)
	normGroups("HCPostPreNorm", normed, collapsed, D)
	wdt("HCPostPreNorm", w)
	G := hcPostPreBlocks(n * D)
	part := b.temp(8 * T * G * (mix + 1))
	b.launch("k_hc_postpre", d2(G, T), d1(hcPostPreThreads), 0,
		b.ptr(xn), b.ptr(y), b.ptr(post0), b.ptr(comb0), b.ptr(x), b.ptr(collapsed), b.ptr(post), b.ptr(comb), b.ptr(fn),
		b.ptr(base), pI32(dtypeCode(base.DType())), b.ptr(scale), pI32(dtypeCode(scale.DType())),
		pI32(n), pI32(D), pI32(p.SinkhornIters), pF32(p.Eps), pF32(p.RMSEps), part.ptr, b.gemvCnt+4*gemvSplitTiles,
		b.ptr(normed), b.ptr(w), pI32(dtypeCode(w.DType())), pF32(eps))
	b.freeBuf(part)
}

// hcPostPreThreads is k_hc_postpre's block size.
const hcPostPreThreads = 256

// hcPostPreBlocks is k_hc_postpre's blocks per token for nD stream
// elements: one element per thread, from 8 to 128 blocks (the slice's 4
// streams of 4096: 64, each reading 1/64 of the projection's weights).
func hcPostPreBlocks(nD int) int {
	return min(max((nD+hcPostPreThreads-1)/hcPostPreThreads, 8), 128)
}

// hcPre enqueues HCPre and, when norm is not nil and k_hc_fused can end
// with it, the norm too: it reports whether it did.
func (b *Backend) hcPre(collapsed, post, comb, x, fn, base, scale *npu.Tensor, p npu.HCParams, norm *hcNorm) bool {
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
		return norm != nil
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
			// One launch: the projection's last block per token finishes it
			// (and norms the row when its block is k_rmsnorm's for D).
			threads := max(vecThreads(nD/4, true), 64)
			var po, pw uint64
			var nwdt int
			var neps float32
			fused := norm != nil && threads == vecThreads(D, true) && vec4(D, b.ptr(norm.out))
			if fused {
				po, pw, nwdt, neps = b.ptr(norm.out), b.ptr(norm.w), dtypeCode(norm.w.DType()), norm.eps
			}
			b.launch("k_hc_fused", d2(mix+1, T), d1(threads), 0,
				pc, b.ptr(post), b.ptr(comb), mbuf.ptr, px, pf,
				b.ptr(base), pI32(dtypeCode(base.DType())), b.ptr(scale), pI32(dtypeCode(scale.DType())),
				pI32(n), pI32(D), pI32(p.SinkhornIters), pF32(p.Eps), pF32(p.RMSEps), ss, b.gemvCnt+4*gemvSplitTiles,
				po, pw, pI32(nwdt), pF32(neps))
			b.freeBuf(mbuf)
			return fused
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
	return false
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
