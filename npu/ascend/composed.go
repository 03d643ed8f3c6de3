//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// This file holds the ops made of one aclnn operator with a cast, or
// composed from several. Each composition says its cost: operators
// launched and passes over memory beyond the one the op needs.

// launch builds and enqueues one operator call (device thread): build
// makes the descriptors with c and runs phase 1, returning its status.
func (b *Backend) launch(op C.int, build func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int) {
	c := &call{b: b}
	var ws C.uint64_t
	var ex C.uintptr_t
	rc := build(c, &ws, &ex)
	c.run(op, rc, ws, ex)
}

// castView enqueues dst (shape) = src viewed with shape and strides, cast
// to dst's dtype (device thread).
func (b *Backend) castView(dst, src *npu.Tensor, shape, strides []int) {
	b.launch(C.NPU_OP_CAST, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_cast(c.tensor(src, shape, strides), aclDType(dst.DType()), c.tensor(dst, shape, nil), ws, ex)
	})
}

// SwiGLU writes out[M, I] = silu(min(gate, limit)) * clamp(up, -limit,
// limit) for gateUp [M, 2I] with aclnnSwiGlu (dim -1: silu of the first
// half times the second). A limit that is not positive (or is +Inf) means
// no clamping: one operator. With a limit, aclnnClampMax (gate) and
// aclnnClamp (up) first write a clamped copy of gateUp to scratch: two
// more operators and one more read and write of gateUp. (aclnnSwigluClamp
// would fuse it but is in CANN's experimental tree, ascend-api.md §4.4.)
func (b *Backend) SwiGLU(out, gateUp *npu.Tensor, limit float32) {
	if gateUp.Rank() == 0 || gateUp.Dim(-1)%2 != 0 || gateUp.DType() != npu.F32 || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: SwiGLU gateUp %v needs an even last dimension (F32)", gateUp))
	}
	I := gateUp.Dim(-1) / 2
	rows := gateUp.Numel() / max(1, 2*I)
	if out.Numel() != rows*I || (out.Rank() > 0 && out.Dim(-1) != I) {
		panic(fmt.Sprintf("ascend: SwiGLU out %v does not match gateUp %v", out, gateUp))
	}
	if rows*I == 0 {
		return
	}
	clampOn := limit > 0 && !math.IsInf(float64(limit), 1)
	b.do(func() {
		src := gateUp
		half, halfStrides := []int{rows, I}, []int{2 * I, 1}
		if clampOn {
			src = b.scratch(npu.F32, rows, 2*I)
			b.launch(C.NPU_OP_CLAMP_MAX, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_clamp_max(c.tensor(gateUp, half, halfStrides), c.scalar(limit), c.tensor(src, half, halfStrides), ws, ex)
			})
			b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_clamp(c.view(gateUp, I, half, halfStrides), c.scalar(-limit), c.scalar(limit), c.view(src, I, half, halfStrides), ws, ex)
			})
		}
		b.launch(C.NPU_OP_SWIGLU, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_swiglu(c.tensor(src, []int{rows, 2 * I}, nil), -1, c.tensor(out, half, nil), ws, ex)
		})
	})
}

// rowOperands checks a row copy between a table and a batch of
// len(idx) rows and returns the table's rows and the row size.
func rowOperands(op string, batch, table, idx *npu.Tensor) (rows, d int) {
	if idx.DType() != npu.I32 || table.Rank() == 0 {
		panic(fmt.Sprintf("ascend: %s indices %v (want I32) into %v", op, idx, table))
	}
	d = table.RowSize()
	if batch.Numel() != idx.Numel()*d || !npu.Convertible(batch.DType(), table.DType()) {
		panic(fmt.Sprintf("ascend: %s rows %v do not match %d indices into %v", op, batch, idx.Numel(), table))
	}
	return table.Dim(0), d
}

// Gather copies rows out[i] = src[idx[i]], converting src's dtype to
// out's: aclnnEmbedding over src viewed [N, d]; with a dtype change it
// writes a scratch copy in src's dtype (aclnnEmbedding keeps the weight's
// dtype) that aclnnCast converts: one more operator and one more pass
// over the M gathered rows. An index out of range fails the stream (Sync).
func (b *Backend) Gather(out, src, idx *npu.Tensor) { b.gather("Gather", out, src, idx) }

// Embedding looks up ids (I32 [M]) in table [V, D]: out [M, D], as Gather.
func (b *Backend) Embedding(out, table, ids *npu.Tensor) { b.gather("Embedding", out, table, ids) }

func (b *Backend) gather(op string, out, src, idx *npu.Tensor) {
	n, d := rowOperands(op, out, src, idx)
	b.wrote(out)
	m := idx.Numel()
	if m*d == 0 {
		return
	}
	b.do(func() {
		dst := out
		if out.DType() != src.DType() {
			dst = b.scratch(src.DType(), m, d)
		}
		b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_embedding(c.tensor(src, []int{n, d}, nil), c.tensor(idx, []int{m}, nil), c.tensor(dst, []int{m, d}, nil), ws, ex)
		})
		if dst != out {
			b.cast(out, dst)
		}
	})
}

// Scatter writes rows dst[idx[i]] = src[i], converting dtype, with
// aclnnInplaceIndexCopy (dim 0) over dst viewed [N, d]; a src of another
// dtype is first cast to a scratch copy in dst's (one more operator and
// pass over src). Repeated indices: aclnnInplaceIndexCopy does not say
// which row wins (the CPU backend keeps the last), so callers must not
// repeat one; the model's cache writes do not.
func (b *Backend) Scatter(dst, src, idx *npu.Tensor) {
	n, d := rowOperands("Scatter", src, dst, idx)
	b.wrote(dst)
	m := idx.Numel()
	if m*d == 0 {
		return
	}
	b.do(func() {
		s := src
		if src.DType() != dst.DType() {
			s = b.scratch(dst.DType(), m, d)
			b.cast(s, src)
		}
		b.launch(C.NPU_OP_INDEX_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_index_copy(c.tensor(dst, []int{n, d}, nil), 0, c.tensor(idx, []int{m}, nil), c.tensor(s, []int{m, d}, nil), ws, ex)
		})
	})
}

// TopK writes the k largest values of each row of x [M, N] (descending)
// and their column indices, ties to the lower index and NaN below every
// number. aclnnTopk documents neither its tie order nor a NaN order other
// than torch's (NaN largest), so it is composed: aclnnNanToNum maps NaN to
// -Inf, a stable descending aclnnSort orders the whole row (ties in index
// order), aclnnGather takes the first k values from x itself (a NaN stays
// NaN) and aclnnCast turns the INT64 indices into I32. Cost: 4 operators,
// a full sort (N log N) instead of a selection, and 16 bytes of scratch
// per element of x. Edge left: a NaN and a -Inf in one row rank among
// themselves by index, where the contract puts every -Inf first.
func (b *Backend) TopK(vals, idx, x *npu.Tensor, k int) {
	if x.Rank() == 0 || x.DType() != npu.F32 || vals.DType() != npu.F32 || idx.DType() != npu.I32 {
		panic(fmt.Sprintf("ascend: TopK %v into %v, %v", x, vals, idx))
	}
	n := x.Dim(-1)
	m := x.Numel() / max(1, n)
	if k < 0 || k > n || vals.Numel() != m*k || idx.Numel() != m*k {
		panic(fmt.Sprintf("ascend: TopK k=%d of rows of %d into %v, %v", k, n, vals, idx))
	}
	b.wrote(idx)
	if m*k == 0 {
		return
	}
	b.do(func() { b.topK(vals, idx, x, m, n, k) })
}

// topK is TopK of the m rows of n of x on the device thread.
func (b *Backend) topK(vals, idx, x *npu.Tensor, m, n, k int) {
	{
		shape, top, topStrides := []int{m, n}, []int{m, k}, []int{n, 1}
		y := b.scratch(npu.F32, m, n)
		b.launch(C.NPU_OP_NAN_TO_NUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			inf := C.float(math.Inf(1))
			return C.npu_nan_to_num(c.tensor(x, shape, nil), -inf, inf, -inf, c.tensor(y, shape, nil), ws, ex)
		})
		sv, si := b.scratch(npu.F32, m, n), b.scratch(npu.I64, m, n)
		b.launch(C.NPU_OP_SORT, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_sort(c.tensor(y, shape, nil), 1, -1, 1, c.tensor(sv, shape, nil), c.tensor(si, shape, nil), ws, ex)
		})
		b.launch(C.NPU_OP_GATHER, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_gather(c.tensor(x, shape, nil), 1, c.tensor(si, top, topStrides), c.tensor(vals, top, nil), ws, ex)
		})
		b.castView(idx, si, top, topStrides)
	}
}

// normRows checks a grouped norm of x into out with groups of n and
// returns the number of groups.
func normRows(op string, out, x *npu.Tensor, n int) int {
	if n <= 0 || x.Numel()%n != 0 || out.Numel() != x.Numel() || x.DType() != npu.F32 || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: %s out %v, x %v, groups of %d", op, out, x, n))
	}
	return x.Numel() / n
}

// LayerNorm normalises groups of n = w.Numel() elements with
// aclnnLayerNorm (normalizedShape [n], biased variance, no mean/rstd
// outputs); a BF16/F16 weight or bias is cast to an F32 scratch copy
// first (one more operator each).
func (b *Backend) LayerNorm(out, x, w, bias *npu.Tensor, eps float32) {
	if w == nil || (bias != nil && bias.Numel() != w.Numel()) {
		panic(fmt.Sprintf("ascend: LayerNorm weight %v, bias %v", w, bias))
	}
	n := w.Numel()
	rows := normRows("LayerNorm", out, x, n)
	if rows == 0 {
		return
	}
	b.do(func() {
		wf := b.asF32(w)
		var bf *npu.Tensor
		if bias != nil {
			bf = b.asF32(bias)
		}
		b.launch(C.NPU_OP_LAYER_NORM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			shape := []int{rows, n}
			var bt C.uintptr_t
			if bf != nil {
				bt = c.tensor(bf, []int{n}, nil)
			}
			return C.npu_layer_norm(c.tensor(x, shape, nil), c.ints(n), c.tensor(wf, []int{n}, nil), bt, C.double(eps), c.tensor(out, shape, nil), 0, 0, ws, ex)
		})
	})
}

// RMSNormGated is RMSNorm (aclnnRmsNorm) times sigmoid(gate): composed
// as RMSNorm into out, aclnnSigmoid of gate into scratch, aclnnMul into
// out. Cost: 2 more operators, one more write and two more reads of x's
// size. out may alias x.
func (b *Backend) RMSNormGated(out, x, gate, w *npu.Tensor, eps float32) {
	if w == nil || gate.Numel() != x.Numel() || gate.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: RMSNormGated gate %v, w %v for x %v", gate, w, x))
	}
	if normRows("RMSNormGated", out, x, w.Numel()) == 0 {
		return
	}
	b.RMSNorm(out, x, w, eps)
	b.do(func() {
		sg := b.scratch(npu.F32, gate.Numel())
		b.launch(C.NPU_OP_SIGMOID, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_sigmoid(c.tensor(gate, flat(gate), nil), c.tensor(sg, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_mul(c.tensor(out, flat(out), nil), c.tensor(sg, nil, nil), c.tensor(out, flat(out), nil), ws, ex)
		})
	})
}

// L2Norm divides each group of n elements by sqrt(sum(x^2) + eps), as
// x * rsqrt(mean(x^2) + eps/n) / sqrt(n): aclnnRmsNorm with a unit gamma
// and eps/n, then aclnnMuls by 1/sqrt(n). Cost: one more operator and
// pass over x (and one rounding more than the direct form). out may
// alias x.
func (b *Backend) L2Norm(out, x *npu.Tensor, n int, eps float32) {
	rows := normRows("L2Norm", out, x, n)
	if rows == 0 {
		return
	}
	b.do(func() {
		g := b.unitGamma(n)
		rstd := b.scratch(npu.F32, rows, 1)
		shape := []int{rows, n}
		b.launch(C.NPU_OP_RMS_NORM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_rms_norm(c.tensor(x, shape, nil), c.tensor(g, nil, nil), C.double(eps/float32(n)), c.tensor(out, shape, nil), c.tensor(rstd, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_muls(c.tensor(out, flat(out), nil), c.scalar(float32(1/math.Sqrt(float64(n)))), c.tensor(out, flat(out), nil), ws, ex)
		})
	})
}

// hcDims checks x [T, n, D] of the mHC ops.
func hcDims(op string, x *npu.Tensor) (T, n, D int) {
	if x.Rank() != 3 || x.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: %s x %v is not F32 [T, n, D]", op, x))
	}
	return x.Dim(0), x.Dim(1), x.Dim(2)
}

// HCMean writes out [T, D] = the mean of x's n streams: one aclnnMean over
// dim 1.
func (b *Backend) HCMean(out, x *npu.Tensor) {
	T, n, D := hcDims("HCMean", x)
	if out.Numel() != T*D || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: HCMean out %v for x %v", out, x))
	}
	if T*D == 0 || n == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_mean(c.tensor(x, nil, nil), c.ints(1), 0, aclDType(npu.F32), c.tensor(out, []int{T, D}, nil), &ws, &ex)
		c.run(C.NPU_OP_MEAN, rc, ws, ex)
	})
}

// HCPost writes out[t, j] = post[t, j]*y[t] + sum_i comb[t, i, j]*x[t, i]:
// aclnnBatchMatMul of comb[t]ᵀ (a transposed view, no copy) and x[t] into
// out, aclnnMul of post [T, n, 1] by y [T, 1, D] (broadcast) into scratch,
// aclnnAdd into out. Cost: 3 operators, one more write and read of out's
// size.
func (b *Backend) HCPost(out, y, post, comb, x *npu.Tensor) {
	T, n, D := hcDims("HCPost", x)
	if out.Numel() != T*n*D || y.Numel() != T*D || post.Numel() != T*n || comb.Numel() != T*n*n ||
		out.DType() != npu.F32 || y.DType() != npu.F32 || post.DType() != npu.F32 || comb.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: HCPost out %v y %v post %v comb %v for x %v", out, y, post, comb, x))
	}
	if T*n*D == 0 {
		return
	}
	b.do(func() {
		shape := []int{T, n, D}
		b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_batch_matmul(c.tensor(comb, []int{T, n, n}, []int{n * n, 1, n}), c.tensor(x, shape, nil), c.tensor(out, shape, nil), 0, ws, ex)
		})
		py := b.scratch(npu.F32, T, n, D)
		b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_mul(c.tensor(post, []int{T, n, 1}, nil), c.tensor(y, []int{T, 1, D}, nil), c.tensor(py, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(out, shape, nil), c.tensor(py, nil, nil), c.scalar(1), c.tensor(out, shape, nil), ws, ex)
		})
	})
}

// KDAGate turns f [T, H*K] into the log-decay g with dtBias [H*K] and
// aLog [H]: x = f + dtBias (aclnnAdd into scratch), a = exp(aLog)
// (aclnnExp, H elements), then with a lower bound
// g = LowerBound * sigmoid(a*x) (aclnnMul with a broadcast per head,
// aclnnSigmoid, aclnnMuls), else g = -a * softplus(x) (aclnnSoftplus with
// beta 1 and threshold 20, which is the contract's x > 20 cut, aclnnMuls
// of a by -1, aclnnMul). Cost: 5 operators (plus a cast per 16-bit
// parameter), about three passes over f's size instead of one. g may
// alias f.
func (b *Backend) KDAGate(g, f, dtBias, aLog *npu.Tensor, p npu.KDAGateParams) {
	K, H := p.HeadDim, aLog.Numel()
	if K <= 0 || H <= 0 {
		panic(fmt.Sprintf("ascend: KDAGate head dim %d, %d heads", K, H))
	}
	HK := H * K
	if f.Numel()%HK != 0 || g.Numel() != f.Numel() || f.RowSize() != HK || dtBias.Numel() != HK || f.DType() != npu.F32 || g.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: KDAGate f %v, g %v, dtBias %v for %d heads of %d", f, g, dtBias, H, K))
	}
	rows := f.Numel() / HK
	if rows == 0 {
		return
	}
	b.do(func() {
		dt, al := b.asF32(dtBias), b.asF32(aLog)
		x := b.scratch(npu.F32, rows, HK)
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(f, []int{rows, HK}, nil), c.tensor(dt, []int{HK}, nil), c.scalar(1), c.tensor(x, nil, nil), ws, ex)
		})
		a := b.scratch(npu.F32, H)
		b.launch(C.NPU_OP_EXP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_exp(c.tensor(al, []int{H}, nil), c.tensor(a, nil, nil), ws, ex)
		})
		heads, perHead := []int{rows, H, K}, []int{H, 1}
		if p.HasLowerBound {
			b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_mul(c.tensor(x, heads, nil), c.tensor(a, perHead, nil), c.tensor(x, heads, nil), ws, ex)
			})
			b.launch(C.NPU_OP_SIGMOID, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_sigmoid(c.tensor(x, flat(x), nil), c.tensor(x, flat(x), nil), ws, ex)
			})
			b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_muls(c.tensor(x, flat(x), nil), c.scalar(p.LowerBound), c.tensor(g, flat(g), nil), ws, ex)
			})
			return
		}
		b.launch(C.NPU_OP_SOFTPLUS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_softplus(c.tensor(x, flat(x), nil), c.scalar(1), c.scalar(20), c.tensor(x, flat(x), nil), ws, ex)
		})
		b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_muls(c.tensor(a, nil, nil), c.scalar(-1), c.tensor(a, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_mul(c.tensor(x, heads, nil), c.tensor(a, perHead, nil), c.tensor(g, heads, nil), ws, ex)
		})
	})
}

// Conv1dUpdate is the depthwise causal conv for one new row per sequence
// (decode), composed: the window u [B, W, C] is built in scratch from the
// W-1 state rows of each sequence's slot (aclnnEmbedding over state viewed
// [slots, (W-1)*C], by StateSlot) and the new row (aclnnInplaceCopy), then
// out = sum over the W taps of u * wᵀ (aclnnMul with w viewed [W, C], no
// copy; aclnnReduceSum over dim 1), aclnnSilu, and the state slots get the
// last W-1 rows of u back (aclnnInplaceIndexCopy). Cost: 5-6 operators and
// two scratch tensors of B*W*C (about 2W passes over x's size where a
// fused kernel needs one). That QueryStart is one row per sequence is the
// caller's promise: it lives on the device and is not read back here.
func (b *Backend) Conv1dUpdate(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	if x.Rank() != 2 || w.Rank() != 2 || state.Rank() != 3 || x.DType() != npu.F32 || out.DType() != npu.F32 || state.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: Conv1dUpdate wants x [B, C], w [C, W], state [slots, W-1, C] (F32); got %v %v %v", x, w, state))
	}
	B, C, W := x.Dim(0), x.Dim(1), w.Dim(1)
	H, S := W-1, state.Dim(0)
	if w.Dim(0) != C || W < 1 || state.Dim(1) != H || state.Dim(2) != C || !npu.SameShape(out.Shape(), x.Shape()) {
		panic(fmt.Sprintf("ascend: Conv1dUpdate shapes out %v, x %v, w %v, state %v disagree", out, x, w, state))
	}
	if seqs == nil || seqs.NumSeqs != B || seqs.StateSlot == nil || seqs.StateSlot.Numel() < B || seqs.StateSlot.DType() != npu.I32 {
		panic(fmt.Sprintf("ascend: Conv1dUpdate needs one row per sequence and I32 state slots for x %v", x))
	}
	if B*C == 0 {
		return
	}
	b.do(func() {
		u := b.scratch(npu.F32, B, W, C)
		rowStrides := []int{W * C, 1}
		if H > 0 {
			b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_embedding(c.tensor(state, []int{S, H * C}, nil), c.tensor(seqs.StateSlot, []int{B}, nil), c.tensor(u, []int{B, H * C}, rowStrides), ws, ex)
			})
		}
		b.launch(C.NPU_OP_INPLACE_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_inplace_copy(c.view(u, H*C, []int{B, C}, rowStrides), c.tensor(x, []int{B, C}, nil), ws, ex)
		})
		wf := b.asF32(w)
		prod := b.scratch(npu.F32, B, W, C)
		b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_mul(c.tensor(u, nil, nil), c.tensor(wf, []int{W, C}, []int{1, W}), c.tensor(prod, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_reduce_sum(c.tensor(prod, nil, nil), c.ints(1), 0, aclDType(npu.F32), c.tensor(out, []int{B, C}, nil), ws, ex)
		})
		if silu {
			b.launch(C.NPU_OP_SILU, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_silu(c.tensor(out, flat(out), nil), c.tensor(out, flat(out), nil), ws, ex)
			})
		}
		if H > 0 {
			b.launch(C.NPU_OP_INDEX_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_index_copy(c.tensor(state, []int{S, H * C}, nil), 0, c.tensor(seqs.StateSlot, []int{B}, nil), c.view(u, C, []int{B, H * C}, rowStrides), ws, ex)
			})
		}
	})
}

// alloc makes a scratch tensor on the device thread, for compositions
// built from the public ops (each of which runs its own device call).
func (b *Backend) alloc(dt npu.DType, shape ...int) *npu.Tensor {
	var t *npu.Tensor
	b.do(func() { t = b.scratch(dt, shape...) })
	return t
}

// KPool compresses complete pools: out [P, d] = sum_j softmax_j(gate[j] +
// ape[j]) * key[j] per channel, composed as aclnnAdd of ape [kp, d]
// broadcast over gates [P, kp, d] into scratch, aclnnSoftmax over dim 1
// in place, aclnnMul by keys and aclnnReduceSum over dim 1 into out.
// Cost: 4 operators (plus a cast of a 16-bit ape) and about three passes
// over keys' size; the softmax is fp32 where the CPU backend uses float64.
func (b *Backend) KPool(out, keys, gates, ape *npu.Tensor) {
	if ape.Rank() != 2 {
		panic(fmt.Sprintf("ascend: KPool ape %v, want [kp, d]", ape))
	}
	kp, d := ape.Dim(0), ape.Dim(1)
	if kp <= 0 || d <= 0 || keys.Numel()%(kp*d) != 0 || keys.Dim(-1) != d || keys.DType() != npu.F32 || gates.DType() != npu.F32 || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: KPool keys %v with ape %v", keys, ape))
	}
	P := keys.Numel() / (kp * d)
	if !npu.SameShape(gates.Shape(), keys.Shape()) || out.Numel() != P*d || (P > 0 && out.Dim(-1) != d) {
		panic(fmt.Sprintf("ascend: KPool out %v, keys %v, gates %v", out, keys, gates))
	}
	if P == 0 {
		return
	}
	b.do(func() {
		shape := []int{P, kp, d}
		af := b.asF32(ape)
		l := b.scratch(npu.F32, P, kp, d)
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(gates, shape, nil), c.tensor(af, []int{kp, d}, nil), c.scalar(1), c.tensor(l, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_SOFTMAX, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_softmax(c.tensor(l, nil, nil), 1, c.tensor(l, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_mul(c.tensor(l, nil, nil), c.tensor(keys, shape, nil), c.tensor(l, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_reduce_sum(c.tensor(l, nil, nil), c.ints(1), 0, aclDType(npu.F32), c.tensor(out, []int{P, d}, nil), ws, ex)
		})
	})
}

// Router computes noaux_tc routing for x [T, D] with gate [E, D] and bias
// [E], composed: MatMul (aclnnMatmul) to logits, Sigmoid to scores s,
// aclnnAdd of the bias to sb. Group-limited (NGroup > 1, TopKGroup <
// NGroup): each group's score is the sum of its two best sb (TopK over sb
// viewed [T*G, E/G], aclnnReduceSum), TopK picks TopKGroup groups, and a
// penalty [T, G] filled with -Inf gets zeros at the picked groups
// (aclnnScatter), added to sb per group (aclnnAdd, broadcast): the others
// become exactly -Inf, as on the CPU backend. TopK on sb gives ids (ties
// to the lower expert), aclnnGather takes the unbiased weights from s;
// Normalize divides by their sum (aclnnReduceSum, + 1e-20, aclnnDiv); then
// aclnnMuls by Scale. Cost: about 12 operators (three TopK compositions of
// 4 each when grouped), a full sort of each row's E scores, scratch of
// about 40 bytes per score; logits are fp32 dot products where the CPU
// backend accumulates in float64 (near-ties may select differently).
func (b *Backend) Router(weights, ids, x, gate, bias *npu.Tensor, p npu.RouterParams) {
	if x.Rank() != 2 || gate.Rank() != 2 || gate.Dim(1) != x.Dim(1) || x.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: Router x %v gate %v", x, gate))
	}
	T, E, k := x.Dim(0), gate.Dim(0), p.TopK
	ng := max(p.NGroup, 1)
	if k < 1 || k > E || bias.Numel() != E || E%ng != 0 || (ng > 1 && (p.TopKGroup < 1 || p.TopKGroup > ng)) {
		panic(fmt.Sprintf("ascend: Router %d experts, bias %v, params %+v", E, bias, p))
	}
	if weights.DType() != npu.F32 || ids.DType() != npu.I32 || weights.Numel() != T*k || ids.Numel() != T*k {
		panic(fmt.Sprintf("ascend: Router outputs weights %v ids %v for %d tokens top-%d", weights, ids, T, k))
	}
	if T == 0 {
		return
	}
	s, sb := b.alloc(npu.F32, T, E), b.alloc(npu.F32, T, E)
	b.MatMul(s, x, gate)
	b.Sigmoid(s, s)
	var bf *npu.Tensor
	b.do(func() { bf = b.asF32(bias) })
	b.Add(sb, s, bf)
	if per := E / ng; ng > 1 && p.TopKGroup < ng {
		k2 := min(2, per)
		top2, top2i := b.alloc(npu.F32, T*ng, k2), b.alloc(npu.I32, T*ng, k2)
		b.TopK(top2, top2i, sb.Reshape(T*ng, per), k2)
		gs := b.alloc(npu.F32, T, ng)
		gv, gi := b.alloc(npu.F32, T, p.TopKGroup), b.alloc(npu.I32, T, p.TopKGroup)
		b.do(func() {
			b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_reduce_sum(c.tensor(top2, []int{T, ng, k2}, nil), c.ints(2), 0, aclDType(npu.F32), c.tensor(gs, nil, nil), ws, ex)
			})
		})
		b.TopK(gv, gi, gs, p.TopKGroup)
		pen, zero := b.alloc(npu.F32, T, ng), b.alloc(npu.F32, T, p.TopKGroup)
		b.Fill(pen, float32(math.Inf(-1)))
		b.Fill(zero, 0)
		b.do(func() {
			b.launch(C.NPU_OP_SCATTER, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_scatter(c.tensor(pen, nil, nil), 1, c.tensor(gi, nil, nil), c.tensor(zero, nil, nil), 0, c.tensor(pen, nil, nil), ws, ex)
			})
			groups := []int{T, ng, per}
			b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_add(c.tensor(sb, groups, nil), c.tensor(pen, []int{T, ng, 1}, nil), c.scalar(1), c.tensor(sb, groups, nil), ws, ex)
			})
		})
	}
	sv := b.alloc(npu.F32, T, k)
	b.TopK(sv, ids, sb, k)
	b.do(func() {
		shape := []int{T, k}
		b.launch(C.NPU_OP_GATHER, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_gather(c.tensor(s, nil, nil), 1, c.tensor(ids, shape, nil), c.tensor(weights, shape, nil), ws, ex)
		})
		if p.Normalize {
			sum := b.scratch(npu.F32, T, 1)
			b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_reduce_sum(c.tensor(weights, shape, nil), c.ints(1), 1, aclDType(npu.F32), c.tensor(sum, nil, nil), ws, ex)
			})
			tiny := b.scratch(npu.F32, 1)
			b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_fill_scalar(c.tensor(tiny, nil, nil), c.scalar(1e-20), ws, ex)
			})
			b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_add(c.tensor(sum, nil, nil), c.tensor(tiny, nil, nil), c.scalar(1), c.tensor(sum, nil, nil), ws, ex)
			})
			b.launch(C.NPU_OP_DIV, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_div(c.tensor(weights, shape, nil), c.tensor(sum, nil, nil), c.tensor(weights, shape, nil), ws, ex)
			})
		}
		b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_muls(c.tensor(weights, flat(weights), nil), c.scalar(p.Scale), c.tensor(weights, flat(weights), nil), ws, ex)
		})
	})
}
