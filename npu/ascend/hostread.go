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

// The ops in this file plan on the host: Conv1d and KDA loop per
// sequence over the batch layout, read from the host shadow of its Upload
// (shadow.go), never from the device. None of them syncs the stream. (MoE
// needs no host plan: its routing is permuted on the device, moe.go.)

// Conv1d is the depthwise causal convolution over each sequence's rows
// (prefill), per sequence: QueryStart and StateSlot are read back (one
// sync), then for sequence b with L rows the window buffer u = [its W-1
// state rows; its L rows of x] is built in scratch (two aclnnInplaceCopy),
// out's rows are aclnnMul of the overlapping view u[t+i, c] ([L, W, C],
// strides {C, C, 1}, no copy) by w viewed [W, C] and aclnnReduceSum over
// the taps, and the state slot gets u's last W-1 rows (aclnnInplaceCopy);
// one aclnnSilu over out follows. Cost: 5 operators per sequence
// and a scratch product of L*W*C (about 2W passes over x's size).
func (b *Backend) Conv1d(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	if x.Rank() != 2 || w.Rank() != 2 || state.Rank() != 3 || x.DType() != npu.F32 || out.DType() != npu.F32 || state.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: Conv1d wants x [T, C], w [C, W], state [slots, W-1, C] (F32); got %v %v %v", x, w, state))
	}
	T, C, W := x.Dim(0), x.Dim(1), w.Dim(1)
	H, S := W-1, state.Dim(0)
	if w.Dim(0) != C || W < 1 || state.Dim(1) != H || state.Dim(2) != C || !npu.SameShape(out.Shape(), x.Shape()) {
		panic(fmt.Sprintf("ascend: Conv1d shapes out %v, x %v, w %v, state %v disagree", out, x, w, state))
	}
	if seqs == nil || seqs.NumRows != T {
		panic(fmt.Sprintf("ascend: Conv1d needs the layout of x %v's rows", x))
	}
	B := seqs.NumSeqs
	if B == 0 || T*C == 0 {
		return
	}
	if decodeBatch(seqs) {
		b.oneRowEach("Conv1d", seqs)
		b.Conv1dUpdate(out, x, state, w, seqs, silu)
		return
	}
	if b.hostPlanned("Conv1d") {
		return
	}
	L := b.layout("Conv1d", seqs, false)
	qs, slots := L.qs, L.slots
	if int(qs[0]) != 0 || int(qs[B]) != T {
		panic(fmt.Sprintf("ascend: Conv1d QueryStart %v does not cover x %v", qs, x))
	}
	for i, s := range slots {
		if s < 0 || int(s) >= S || qs[i+1] < qs[i] {
			panic(fmt.Sprintf("ascend: Conv1d sequence %d: slot %d of %d, rows [%d, %d)", i, s, S, qs[i], qs[i+1]))
		}
	}
	b.do(func() {
		wf := b.asF32(w)
		for i := range B {
			t0, L, slot := int(qs[i]), int(qs[i+1]-qs[i]), int(slots[i])
			if L == 0 {
				continue
			}
			u := b.scratch(npu.F32, H+L, C)
			if H > 0 {
				b.launch(C.NPU_OP_INPLACE_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_inplace_copy(c.view(u, 0, []int{H * C}, nil), c.view(state, slot*H*C, []int{H * C}, nil), ws, ex)
				})
			}
			b.launch(C.NPU_OP_INPLACE_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_inplace_copy(c.view(u, H*C, []int{L * C}, nil), c.view(x, t0*C, []int{L * C}, nil), ws, ex)
			})
			prod := b.scratch(npu.F32, L, W, C)
			b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_mul(c.tensor(u, []int{L, W, C}, []int{C, C, 1}), c.tensor(wf, []int{W, C}, []int{1, W}), c.tensor(prod, nil, nil), ws, ex)
			})
			b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_reduce_sum(c.tensor(prod, nil, nil), c.ints(1), 0, aclDType(npu.F32), c.view(out, t0*C, []int{L, C}, nil), ws, ex)
			})
			if H > 0 {
				b.launch(C.NPU_OP_INPLACE_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_inplace_copy(c.view(state, slot*H*C, []int{H * C}, nil), c.view(u, L*C, []int{H * C}, nil), ws, ex)
				})
			}
		}
		if silu {
			b.launch(C.NPU_OP_SILU, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_silu(c.tensor(out, flat(out), nil), c.tensor(out, flat(out), nil), ws, ex)
			})
		}
	})
}

// kdaPrelude returns q and k of T rows of qkv l2-normalised (q also
// scaled by K^-0.5) and exp(g), as scratch [T, H*K] (device thread; 5
// operators).
func (b *Backend) kdaPrelude(qkv, g *npu.Tensor, T, H, K int) (qn, kn, eg *npu.Tensor) {
	HK := H * K
	qn, kn, eg = b.scratch(npu.F32, T, HK), b.scratch(npu.F32, T, HK), b.scratch(npu.F32, T, HK)
	gamma, rstd := b.unitGamma(K), b.scratch(npu.F32, T*H, 1)
	for i, dst := range []*npu.Tensor{qn, kn} {
		scale := float32(1 / math.Sqrt(float64(K)))
		if i == 0 {
			scale = 1 / float32(K) // l2 norm's 1/sqrt(K) and q's K^-0.5
		}
		b.launch(C.NPU_OP_RMS_NORM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_rms_norm(c.view(qkv, i*HK, []int{T, H, K}, []int{3 * HK, K, 1}), c.tensor(gamma, nil, nil), C.double(1e-6/float64(K)),
				c.tensor(dst, []int{T, H, K}, nil), c.tensor(rstd, []int{T, H, 1}, nil), ws, ex)
		})
		b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_muls(c.tensor(dst, flat(dst), nil), c.scalar(scale), c.tensor(dst, flat(dst), nil), ws, ex)
		})
	}
	b.launch(C.NPU_OP_EXP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_exp(c.tensor(g, flat(g), nil), c.tensor(eg, flat(eg), nil), ws, ex)
	})
	return qn, kn, eg
}

// KDA runs Kimi Delta Attention by its token recurrence, composed (no
// stock CANN operator has KDA's per-channel decay, ascend-api.md §4.8):
// once for the batch, q and k are l2-normalised (aclnnRmsNorm with eps/K
// on strided views of qkv, then aclnnMuls by K^-0.5 for k and K^-1 for q,
// which folds q's K^-0.5 scale) and the decays exp(g) taken (aclnnExp);
// QueryStart and StateSlot come from the layout's host shadow (no sync);
// then per token, on
// the state slot in place, S = diag(exp(g_t)) S (aclnnMul), kᵀS
// (aclnnBatchMatMul over heads), δ = β_t (v_t − kᵀS) (aclnnAdd with alpha
// −1, aclnnMul), S += k δᵀ (aclnnBatchMatMul into scratch, aclnnAdd) and
// o_t = qᵀS (aclnnBatchMatMul into out). Cost: 7 operators per
// token and about 4 passes over the H*K*V state per token: correct, and
// far too slow for long prefills. chunk > 0 is accepted and runs the same
// recurrence (the chunked form is equal to it up to rounding); a chunked
// composition (or an AscendC kernel) is what a real NPU needs.
func (b *Backend) KDA(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, heads, headDim, chunk int) {
	H, K := heads, headDim
	V := K
	if H <= 0 || K <= 0 || chunk < 0 || seqs == nil || seqs.QueryStart == nil || seqs.StateSlot == nil {
		panic(fmt.Sprintf("ascend: KDA heads %d, head dim %d, chunk %d, layout %v", H, K, chunk, seqs))
	}
	T, B, HK := seqs.NumRows, seqs.NumSeqs, H*K
	if err := npu.KDADims(out, qkv, g, beta, state, T, heads, headDim, chunk); err != nil {
		panic("ascend: " + err.Error())
	}
	for _, t := range []*npu.Tensor{qkv, g, beta, out, state} {
		if t.DType() != npu.F32 {
			panic(fmt.Sprintf("ascend: KDA %v: want F32", t))
		}
	}
	if T == 0 || B == 0 {
		return
	}
	if decodeBatch(seqs) {
		b.oneRowEach("KDA", seqs)
		if seqs.StateSlot.Numel() < B || seqs.StateSlot.DType() != npu.I32 {
			panic(fmt.Sprintf("ascend: KDA decode form needs I32 state slots for %d sequences; got %v", B, seqs.StateSlot))
		}
		b.do(func() { b.kdaDecode(out, qkv, g, beta, state, seqs, H, K) })
		return
	}
	if b.hostPlanned("KDA") {
		return
	}
	L := b.layout("KDA", seqs, false)
	qs, slots := L.qs, L.slots
	if int(qs[0]) != 0 || int(qs[B]) != T {
		panic(fmt.Sprintf("ascend: KDA QueryStart %v does not cover %d rows", qs, T))
	}
	for i, s := range slots {
		if s < 0 || int(s) >= state.Dim(0) || qs[i+1] < qs[i] {
			panic(fmt.Sprintf("ascend: KDA sequence %d: slot %d of %d, rows [%d, %d)", i, s, state.Dim(0), qs[i], qs[i+1]))
		}
	}
	b.do(func() {
		qn, kn, eg := b.kdaPrelude(qkv, g, T, H, K)
		kS, delta, outer := b.scratch(npu.F32, H, 1, V), b.scratch(npu.F32, H, 1, V), b.scratch(npu.F32, H, K, V)
		sv := []int{H, K, V}
		for i := range B {
			so := int(slots[i]) * H * K * V
			for t := int(qs[i]); t < int(qs[i+1]); t++ {
				b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_mul(c.view(state, so, sv, nil), c.view(eg, t*HK, []int{H, K, 1}, nil), c.view(state, so, sv, nil), ws, ex)
				})
				b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_batch_matmul(c.view(kn, t*HK, []int{H, 1, K}, nil), c.view(state, so, sv, nil), c.tensor(kS, nil, nil), 0, ws, ex)
				})
				b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_add(c.view(qkv, t*3*HK+2*HK, []int{H, 1, V}, nil), c.tensor(kS, nil, nil), c.scalar(-1), c.tensor(delta, nil, nil), ws, ex)
				})
				b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_mul(c.tensor(delta, nil, nil), c.view(beta, t*H, []int{H, 1, 1}, nil), c.tensor(delta, nil, nil), ws, ex)
				})
				b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_batch_matmul(c.view(kn, t*HK, []int{H, K, 1}, nil), c.tensor(delta, nil, nil), c.tensor(outer, nil, nil), 0, ws, ex)
				})
				b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_add(c.view(state, so, sv, nil), c.tensor(outer, nil, nil), c.scalar(1), c.view(state, so, sv, nil), ws, ex)
				})
				b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
					return C.npu_batch_matmul(c.view(qn, t*HK, []int{H, 1, K}, nil), c.view(state, so, sv, nil), c.view(out, t*H*V, []int{H, 1, V}, nil), 0, ws, ex)
				})
			}
		}
	})
}
