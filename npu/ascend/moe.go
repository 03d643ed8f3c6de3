//go:build cgo

package ascend

/*
#include "shim.h"
#include "quantshim.h"
*/
import "C"

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// The routed experts as grouped matmuls (aclnnGroupedMatmulV4, groupType
// 0 with single-tensor lists: x (M, K), weight (E, K, N), out (M, N), the
// rows of expert e the e-th group; ascend-api.md §4.4 and the operator's
// document, hicann ops-transformer gmm/grouped_matmul/docs/
// aclnnGroupedMatmulV4.md). The routing never leaves the device: the T*k
// assignments are put in expert order and counted by stock operators, and
// the group list the grouped matmul reads is that device tensor, so no op
// reads device data back and a captured graph replays any routing (only
// T, k, E and the sizes are baked in).
//
// The plan (moeRoute), for N = T*k assignments a = t*k + j:
//
//	aclnnSort(ids viewed [N], stable, ascending) → perm I64 [N]: the
//	  assignments in expert order (ties in assignment order, so each
//	  expert's rows are in token order, as the CPU backend's counting
//	  sort has them);
//	aclnnInplaceFillScalar(0) + aclnnScatter(reduce add, ones at ids)
//	  → the F32 row count of each expert; aclnnCast → groups I64 [E]
//	  (groupListType 1: counts; they sum to N by construction);
//	aclnnInplaceCopy(x viewed [T, 1, D] broadcast into [T, k, D]) (k > 1)
//	  + aclnnEmbedding(by perm) → xs [N, D], x's rows in expert order;
//	aclnnGather(weights viewed [N], perm) → ws [N], their routing weights.
//
// and the combine (moeCombine) of the expert outputs ys [N, D]:
//
//	aclnnMul(ys, ws viewed [N, 1]) in place; aclnnInplaceIndexCopy(dim 0,
//	  perm) → yk [N, D] in assignment order (perm is a permutation: no
//	  index repeats); aclnnReduceSum(yk viewed [T, k, D], dim 1) (k > 1)
//	  and aclnnAdd into out.
//
// Cost of the plan and combine: 9-11 operators independent of E, about
// four passes over [N, D] F32 (the broadcast copy, the gather, the index
// copy, the reduction) and a sort of N ids. The expert FLOPs are the
// routed ones: 2*N*D*3I for gate/up and down, where the dense form this
// replaces ran every expert over all T rows (E/k times as many).
// Scratch: about (4D + 3I) F32 per assignment (the copies of x's rows,
// gate/up, SwiGLU, the expert outputs, them in assignment order), k times
// the per-token intermediates of the dense form, freed at the next Sync;
// prefill chunks bound it.
// Summation differs from the CPU backend only in order: each token's k
// weighted outputs are summed in their routing order j, the CPU's in
// ascending expert order (fp32 rounding).

// moePlan is a routing put in expert order on the device.
type moePlan struct {
	T, k, N, D, E int
	perm          *npu.Tensor // I64 [N]: expert-ordered row i is assignment perm[i]
	groups        *npu.Tensor // I64 [E]: rows per expert
	xs            *npu.Tensor // F32 [N, D]: x's rows in expert order
	ws            *npu.Tensor // F32 [N]: their routing weights
}

// moeRoute enqueues the plan for x [T, D] routed by ids/weights [T, k]
// among E experts (device thread).
func (b *Backend) moeRoute(x, weights, ids *npu.Tensor, k, E int) *moePlan {
	T, D := x.Dim(0), x.Dim(1)
	N := T * k
	p := &moePlan{T: T, k: k, N: N, D: D, E: E}
	n := []int{N}
	sorted := b.scratch(npu.I32, N)
	p.perm = b.scratch(npu.I64, N)
	b.launch(C.NPU_OP_SORT, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_sort(c.tensor(ids, n, nil), 1, 0, 0, c.tensor(sorted, nil, nil), c.tensor(p.perm, nil, nil), ws, ex)
	})
	cnt := b.scratch(npu.F32, E)
	b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_fill_scalar(c.tensor(cnt, nil, nil), c.scalar(0), ws, ex)
	})
	ones := b.unitGamma(N)
	b.launch(C.NPU_OP_SCATTER, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_scatter(c.tensor(cnt, nil, nil), 0, c.tensor(ids, n, nil), c.tensor(ones, nil, nil), 1, c.tensor(cnt, nil, nil), ws, ex)
	})
	p.groups = b.scratch(npu.I64, E)
	b.cast(p.groups, cnt)
	src := x
	if k > 1 {
		src = b.scratch(npu.F32, T, k, D)
		b.launch(C.NPU_OP_INPLACE_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_inplace_copy(c.tensor(src, nil, nil), c.tensor(x, []int{T, 1, D}, nil), ws, ex)
		})
	}
	p.xs = b.scratch(npu.F32, N, D)
	b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_embedding(c.tensor(src, []int{N, D}, nil), c.tensor(p.perm, nil, nil), c.tensor(p.xs, nil, nil), ws, ex)
	})
	p.ws = b.scratch(npu.F32, N)
	b.launch(C.NPU_OP_GATHER, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_gather(c.tensor(weights, n, nil), 0, c.tensor(p.perm, nil, nil), c.tensor(p.ws, nil, nil), ws, ex)
	})
	return p
}

// moeCombine enqueues out [T, D] += the routing-weighted sum of each
// token's expert outputs ys [N, D] (expert order; device thread).
func (b *Backend) moeCombine(p *moePlan, out, ys *npu.Tensor) {
	T, k, N, D := p.T, p.k, p.N, p.D
	nd := []int{N, D}
	b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_mul(c.tensor(ys, nd, nil), c.tensor(p.ws, []int{N, 1}, nil), c.tensor(ys, nd, nil), ws, ex)
	})
	yk := b.scratch(npu.F32, N, D)
	b.launch(C.NPU_OP_INDEX_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_index_copy(c.tensor(yk, nil, nil), 0, c.tensor(p.perm, nil, nil), c.tensor(ys, nd, nil), ws, ex)
	})
	yt := yk
	if k > 1 {
		yt = b.scratch(npu.F32, T, D)
		b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_reduce_sum(c.tensor(yk, []int{T, k, D}, nil), c.ints(1), 0, aclDType(npu.F32), c.tensor(yt, nil, nil), ws, ex)
		})
	}
	td := []int{T * D}
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(out, td, nil), c.tensor(yt, td, nil), c.scalar(1), c.tensor(out, td, nil), ws, ex)
	})
}

// groupedMatmul enqueues out (M, N) = the grouped product of x (M, K) and
// the E weights w, described by weight (an (E, K, N) view), with the rows
// of each expert counted by p.groups: aclnnGroupedMatmulV4, groupType 0,
// splitItem 3 (one output tensor), groupListType 1 (counts), actType 0.
// scale and perToken (0: none) are the per-channel (E, N) and per-token
// (M,) scales of the int8 form (device thread).
func (b *Backend) groupedMatmul(p *moePlan, xt, weight func(c *call) C.uintptr_t, scale, perToken func(c *call) C.uintptr_t, out *npu.Tensor, M, N int) {
	b.launch(C.NPU_OP_GROUPED_MATMUL_V4, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		var sl, pl C.uintptr_t
		if scale != nil {
			sl = c.list(scale(c))
		}
		if perToken != nil {
			pl = c.list(perToken(c))
		}
		return C.npu_grouped_matmul_v4(c.list(xt(c)), c.list(weight(c)), 0, sl, 0, 0, 0, pl, c.tensor(p.groups, nil, nil), 0, 0, 0,
			3, 0, 1, 0, c.list(c.tensor(out, []int{M, N}, nil)), 0, 0, ws, ex)
	})
}

// MoE adds the routed experts to out [T, D] with two grouped matmuls over
// x's rows in expert order (the plan above): gate/up over xs with gateUp
// [E, 2I, D] passed as its (E, D, 2I) transpose (a strided view; the
// grouped matmul takes transposed weights), the clamped SwiGLU (SwiGLU,
// with its limit semantics), the down projection with down [E, D, I] as
// (E, I, D), then the weighted combine into out. FLOAT32 throughout (the
// document allows FLOAT32 x, weight and out in the single-tensor case):
// a BF16/F16 weight is cast to an F32 scratch copy of all E experts per
// call (one pass over the expert weights, as MatMul does per weight:
// twice one layer's expert bytes of scratch, recycled in stream order for
// the next layer's casts rather than held until Sync; a BF16 grouped
// matmul would avoid the pass but misses the fp32 conformance tolerance).
// Cost: the plan's and the combine's 9-11 operators, 2 grouped matmuls,
// 1-3 for SwiGLU and up to 2 weight casts: about 15 operators whatever E,
// and the routed FLOPs (see above).
func (b *Backend) MoE(out, x, gateUp, down, weights, ids *npu.Tensor, limit float32) {
	if x.Rank() != 2 || gateUp.Rank() != 3 || down.Rank() != 3 {
		panic(fmt.Sprintf("ascend: MoE x %v gateUp %v down %v", x, gateUp, down))
	}
	T, D := x.Dim(0), x.Dim(1)
	E, I := gateUp.Dim(0), gateUp.Dim(1)/2
	if gateUp.Dim(1) != 2*I || gateUp.Dim(2) != D || down.Dim(0) != E || down.Dim(1) != D || down.Dim(2) != I {
		panic(fmt.Sprintf("ascend: MoE gateUp %v down %v for x %v", gateUp, down, x))
	}
	if out.Numel() != T*D || x.DType() != npu.F32 || out.DType() != npu.F32 || weights.DType() != npu.F32 || ids.DType() != npu.I32 ||
		weights.Numel() != ids.Numel() || (T > 0 && ids.Numel()%T != 0) {
		panic(fmt.Sprintf("ascend: MoE out %v weights %v ids %v for x %v", out, weights, ids, x))
	}
	if T == 0 || ids.Numel() == 0 || D == 0 {
		return
	}
	k := ids.Numel() / T
	N := T * k
	var p *moePlan
	h, a := b.alloc(npu.F32, N, 2*I), b.alloc(npu.F32, N, I)
	b.do(func() {
		p = b.moeRoute(x, weights, ids, k, E)
		gw := b.asF32(gateUp)
		b.groupedMatmul(p, func(c *call) C.uintptr_t { return c.tensor(p.xs, nil, nil) },
			func(c *call) C.uintptr_t { return c.tensor(gw, []int{E, D, 2 * I}, []int{2 * I * D, 1, D}) }, nil, nil, h, N, 2*I)
		b.recycle(gw, gateUp)
	})
	b.SwiGLU(a, h, limit)
	b.do(func() {
		dw := b.asF32(down)
		ys := b.scratch(npu.F32, N, D)
		b.groupedMatmul(p, func(c *call) C.uintptr_t { return c.tensor(a, nil, nil) },
			func(c *call) C.uintptr_t { return c.tensor(dw, []int{E, I, D}, []int{D * I, 1, I}) }, nil, nil, ys, N, D)
		b.recycle(dw, down)
		b.moeCombine(p, out, ys)
	})
}

// moeQGrouped is MoEQ for W8A8_DYNAMIC experts, the way vllm-ascend's
// W8A8 MoE takes it (ascend-api.md §4.4, VA moe_mlp.py): the plan above,
// then for gate/up and for down the per-token int8 quantization of the
// expert-ordered rows (rowQuant, F32, row-local, so the rows quantize as
// they would unpermuted) and aclnnGroupedMatmulV4 with INT8 x, the INT8
// ND weight stack (E, K, N) that PrepareQuant made, the checkpoint's
// per-channel scales (E, N) FLOAT32 and the per-token scales (M,) FLOAT32
// into FLOAT16 (the documented INT8 + FLOAT32-scale combination; A2/A3
// write no FLOAT32 here), cast to F32; the clamped SwiGLU between; the
// combine into out. Cost: the plan's and combine's 9-11 operators, per
// projection 7 (rowQuant) + 1 + 1 (cast), SwiGLU's 1-3: about 30 operators
// whatever E, and the routed FLOPs. The F16 gate/up output requantized for
// down is the known deviation quant.go describes; vllm-ascend's INT32-out
// + aclnnDequantSwigluQuantV2 path would avoid it and is not built.
func (b *Backend) moeQGrouped(out, x *npu.Tensor, pg, pd *qprep, weights, ids *npu.Tensor, k int, limit float32) {
	T, D := x.Dim(0), x.Dim(1)
	N, I := T*k, pg.N/2
	var p *moePlan
	h, a := b.alloc(npu.F32, N, 2*I), b.alloc(npu.F32, N, I)
	b.do(func() {
		p = b.moeRoute(x, weights, ids, k, pg.E)
		b.groupedMatmulQ(p, pg, p.xs, h)
	})
	b.SwiGLU(a, h, limit)
	b.do(func() {
		ys := b.scratch(npu.F32, N, D)
		b.groupedMatmulQ(p, pd, a, ys)
		b.moeCombine(p, out, ys)
	})
}

// moeQGroupedMX is MoEQ for W8A8_MXFP8 experts on the 950, the way
// vllm-ascend's MXFP8 MoE takes it (npu_grouped_matmul with
// scale_dtype = per_token_scale_dtype = float8_e8m0fnu, ascend-api.md
// §4.4): the plan above, then for gate/up and for down
// aclnnDynamicMxQuant of the expert-ordered rows (row-local, so they
// quantize as they would unpermuted) and aclnnGroupedMatmulV4 in its MX
// mode (aclnnGroupedMatmulV4.md, 910_95 "mx量化" table: gsM = gsN = 1,
// gsK = 32) with FLOAT8_E4M3FN x, the E4M3FN ND weight stack (E, K, N)
// PrepareQuant made, its FLOAT8_E8M0 scales (E, ceil(K/64), N, 2) as
// scale and the rows' E8M0 scales (M, ceil(K/64), 2) as perTokenScale,
// into FLOAT32 (the MX mode writes it, so no cast); the clamped SwiGLU
// between; the combine into out. Cost: the plan's and combine's 9-11
// operators, 2 per projection, SwiGLU's 1-3: about 15 operators whatever
// E, and the routed FLOPs (the dense form ran E/k times them).
func (b *Backend) moeQGroupedMX(out, x *npu.Tensor, pg, pd *qprep, weights, ids *npu.Tensor, k int, limit float32) {
	T, D := x.Dim(0), x.Dim(1)
	N, I := T*k, pg.N/2
	var p *moePlan
	h, a := b.alloc(npu.F32, N, 2*I), b.alloc(npu.F32, N, I)
	b.do(func() {
		p = b.moeRoute(x, weights, ids, k, pg.E)
		b.groupedMatmulMX(p, pg, p.xs, h)
	})
	b.SwiGLU(a, h, limit)
	b.do(func() {
		ys := b.scratch(npu.F32, N, D)
		b.groupedMatmulMX(p, pd, a, ys)
		b.moeCombine(p, out, ys)
	})
}

// groupedMatmulMX enqueues out F32 (M, w.N) = the MXFP8 grouped product
// of x F32 (M, w.K) in expert order with w's experts (device thread).
func (b *Backend) groupedMatmulMX(p *moePlan, w *qprep, x, out *npu.Tensor) {
	M, K, N := x.Dim(0), w.K, w.N
	mk := []int{M, K}
	xq, xs := b.scratch(npu.F8E4M3, M, K), b.scratch(npu.U8, M, w.nbe)
	alg := C.int64_t(w.alg)
	b.qlaunch(C.NPU_Q_DYNAMIC_MX_QUANT, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_q_dynamic_mx_quant(c.tensor(x, mk, nil), -1, aclF8E4M3, 32, alg, c.qtensor(xq, aclF8E4M3, 0, mk, nil),
			c.qtensor(xs, aclF8E8M0, 0, []int{M, w.nbe}, nil), ws, ex)
	})
	b.groupedMatmul(p, func(c *call) C.uintptr_t { return c.qtensor(xq, aclF8E4M3, 0, mk, nil) },
		func(c *call) C.uintptr_t { return c.qtensor(w.w, aclF8E4M3, 0, []int{w.E, K, N}, nil) },
		func(c *call) C.uintptr_t { return c.qtensor(w.mxScale, aclF8E8M0, 0, []int{w.E, w.nbe / 2, N, 2}, nil) },
		func(c *call) C.uintptr_t { return c.qtensor(xs, aclF8E8M0, 0, []int{M, w.nbe / 2, 2}, nil) }, out, M, N)
}

// groupedMatmulQ enqueues out F32 (M, w.N) = the W8A8_DYNAMIC grouped
// product of x F32 (M, w.K) in expert order with w's experts (device
// thread).
func (b *Backend) groupedMatmulQ(p *moePlan, w *qprep, x, out *npu.Tensor) {
	M, K, N := x.Dim(0), w.K, w.N
	xq, x1s := b.scratch(npu.I8, M, K), b.scratch(npu.F32, M)
	b.rowQuant(xq, x1s, x, M, K)
	oh := b.scratch(npu.F16, M, N)
	b.groupedMatmul(p, func(c *call) C.uintptr_t { return c.tensor(xq, nil, nil) },
		func(c *call) C.uintptr_t { return c.tensor(w.w, []int{w.E, K, N}, nil) },
		func(c *call) C.uintptr_t { return c.tensor(w.scale, []int{w.E, N}, nil) },
		func(c *call) C.uintptr_t { return c.tensor(x1s, []int{M}, nil) }, oh, M, N)
	b.castView(out, oh, []int{M, N}, nil)
}
