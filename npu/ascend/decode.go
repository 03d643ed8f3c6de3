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

// Decode forms: Conv1d, KDA, DSAIndex and SparseMLA for a pure decode
// batch (NumRows == NumSeqs: every sequence has exactly one row, which is
// the caller's promise, as for Conv1dUpdate; QueryStart is then 0..B and
// is not read). They take everything per step from the layout's device
// tensors (Pos, StateSlot, BlockTable): no host shadow, no staged copy, no
// read back, only host sizes (B, MaxBlocks, BlockSize) and constants the
// device makes itself (aclnnArange). So a captured decode step replays
// with whatever layout its fixed buffers hold, and these forms are what
// makes ReplayableOps nil. Prefill and mixed batches keep the per-sequence
// host plans (hostread.go, dsa.go, mla.go), which a capture refuses.
//
// Costs per call (B rows): Conv1d is Conv1dUpdate (5-6 operators); KDA 14
// operators over the batch (the state slots gathered, stepped for every
// head at once, written back); DSAIndex about 27 operators (+19 with Tail)
// plus TopK's 4 over V = MaxBlocks*BlockSize/KPool pools per row, every
// pool the block table can reach, masked by the row's position, where the
// host plan scores only the visible ones; SparseMLA about 18 operators per chunk
// of rows plus a token-row table of MaxBlocks*BlockSize words per row.

// decodeBatch reports whether seqs is a pure decode batch, the decode
// forms' case.
func decodeBatch(seqs *npu.SeqLayout) bool {
	return seqs != nil && seqs.NumSeqs > 0 && seqs.NumRows == seqs.NumSeqs
}

// oneRowEach checks, where QueryStart's upload shadow is at hand (not
// during a capture, whose buffers are uploaded later), that a decode
// batch really has one row per sequence (QueryStart = 0..B), and panics
// otherwise: the decode forms do not read QueryStart.
func (b *Backend) oneRowEach(op string, seqs *npu.SeqLayout) {
	if b.cap != nil || seqs.QueryStart == nil || seqs.QueryStart.Numel() < seqs.NumSeqs+1 {
		return
	}
	qs, ok := b.hostI32(seqs.QueryStart.Reshape(-1).Rows(0, seqs.NumSeqs+1))
	if !ok {
		return
	}
	for i, v := range qs {
		if int(v) != i {
			panic(fmt.Sprintf("ascend: %s: %d rows over %d sequences with QueryStart %v: a decode batch has one row per sequence", op, seqs.NumRows, seqs.NumSeqs, qs))
		}
	}
}

// hostPlanned fails a capture in progress with op's refusal: op is about
// to plan on the host from the layout (not a decode batch), which a
// graph would replay with its capture's layout. It reports whether it did.
func (b *Backend) hostPlanned(op string) bool {
	if b.cap == nil {
		return false
	}
	err := fmt.Errorf("ascend: %s of a batch that is not one row per sequence plans on the host, which a graph cannot replay: %w", op, npu.ErrCapturing)
	b.do(func() { b.fail(err) })
	return true
}

// fillDev enqueues dst = v (aclnnInplaceFillScalar; device thread).
func (b *Backend) fillDev(dst *npu.Tensor, v float32) {
	b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_fill_scalar(c.tensor(dst, flat(dst), nil), c.scalar(v), ws, ex)
	})
}

// arange is a scratch [n] tensor of dt holding start, start+step, ...
// (aclnnArange; device thread).
func (b *Backend) arange(dt npu.DType, start, step float32, n int) *npu.Tensor {
	t := b.scratch(dt, n)
	b.launch(C.NPU_OP_ARANGE, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_arange(c.scalar(start), c.scalar(start+step*float32(n)), c.scalar(step), c.tensor(t, nil, nil), ws, ex)
	})
	return t
}

// seqRows is the table [B, MaxBlocks*per] of the cache rows of seqs'
// block-table entries, per rows of each block: entry (b, j*per+o) is
// BlockTable[b][j]*per + o, clamped to [0, rows) (a -1 block gives row 0,
// which callers mask): per = BlockSize gives per-token rows, per =
// BlockSize/KPool pooled rows (device thread; 3 operators and an arange).
func (b *Backend) seqRows(seqs *npu.SeqLayout, per, rows int) *npu.Tensor {
	B, MB := seqs.NumSeqs, seqs.MaxBlocks
	scaled := b.scratch(npu.I32, B, MB)
	b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_muls(c.tensor(seqs.BlockTable, []int{B, MB}, nil), c.scalar(float32(per)), c.tensor(scaled, nil, nil), ws, ex)
	})
	ar := b.arange(npu.I32, 0, 1, per)
	t := b.scratch(npu.I32, B, MB*per)
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(scaled, []int{B, MB, 1}, nil), c.tensor(ar, nil, nil), c.scalar(1), c.tensor(t, []int{B, MB, per}, nil), ws, ex)
	})
	b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_clamp(c.tensor(t, nil, nil), c.scalar(0), c.scalar(float32(rows-1)), c.tensor(t, nil, nil), ws, ex)
	})
	return t
}

// checkDecodeLayout checks the sizes a decode form relies on.
func checkDecodeLayout(op string, seqs *npu.SeqLayout, blocks bool) {
	B := seqs.NumSeqs
	if seqs.Pos == nil || seqs.Pos.Numel() < B || seqs.Pos.DType() != npu.I32 || seqs.StateSlot == nil || seqs.StateSlot.Numel() < B || seqs.StateSlot.DType() != npu.I32 {
		panic(fmt.Sprintf("ascend: %s decode form needs I32 Pos and StateSlot of %d sequences; got %v, %v", op, B, seqs.Pos, seqs.StateSlot))
	}
	if !blocks {
		return
	}
	if seqs.BlockTable == nil || seqs.BlockTable.Numel() != B*seqs.MaxBlocks || seqs.BlockTable.DType() != npu.I32 || seqs.BlockSize < 1 || seqs.MaxBlocks < 1 {
		panic(fmt.Sprintf("ascend: %s needs a block table of %d sequences by %d blocks of %d; got %v", op, B, seqs.MaxBlocks, seqs.BlockSize, seqs.BlockTable))
	}
	if seqs.MaxBlocks*seqs.BlockSize >= maxExactPos {
		panic(fmt.Sprintf("ascend: %s block table reaches position %d; the decode form carries positions in fp32 (below %d)", op, seqs.MaxBlocks*seqs.BlockSize, maxExactPos))
	}
}

// kdaDecode is KDA's recurrence for one token per sequence, for the whole
// batch at once (device thread): the prelude of the host plan (q, k
// normalised, exp(g)), the state slots gathered (aclnnEmbedding by
// StateSlot), then for every (sequence, head) S = diag(exp(g)) S, kᵀS,
// δ = β (v − kᵀS), S += k δᵀ and o = qᵀS as batched operators over B*H
// heads, and the slots written back (aclnnInplaceIndexCopy). 14
// operators; scratch of two B*H*K*V states.
func (b *Backend) kdaDecode(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, H, K int) {
	B, HK, V := seqs.NumSeqs, H*K, K
	S, HKV := state.Dim(0), H*K*K
	qn, kn, eg := b.kdaPrelude(qkv, g, B, H, K)
	st := b.scratch(npu.F32, B*H, K, V)
	slots := func(c *call) C.uintptr_t { return c.tensor(seqs.StateSlot, []int{B}, nil) }
	b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_embedding(c.tensor(state, []int{S, HKV}, nil), slots(c), c.tensor(st, []int{B, HKV}, nil), ws, ex)
	})
	BH := B * H
	kS, delta, outer := b.scratch(npu.F32, BH, 1, V), b.scratch(npu.F32, BH, 1, V), b.scratch(npu.F32, BH, K, V)
	b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_mul(c.tensor(st, nil, nil), c.tensor(eg, []int{BH, K, 1}, nil), c.tensor(st, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_batch_matmul(c.tensor(kn, []int{BH, 1, K}, nil), c.tensor(st, nil, nil), c.tensor(kS, nil, nil), 0, ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.view(qkv, 2*HK, []int{B, H, 1, V}, []int{3 * HK, V, V, 1}), c.tensor(kS, []int{B, H, 1, V}, nil), c.scalar(-1),
			c.tensor(delta, []int{B, H, 1, V}, nil), ws, ex)
	})
	b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_mul(c.tensor(delta, nil, nil), c.tensor(beta, []int{BH, 1, 1}, nil), c.tensor(delta, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_batch_matmul(c.tensor(kn, []int{BH, K, 1}, nil), c.tensor(delta, nil, nil), c.tensor(outer, nil, nil), 0, ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(st, nil, nil), c.tensor(outer, nil, nil), c.scalar(1), c.tensor(st, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_batch_matmul(c.tensor(qn, []int{BH, 1, K}, nil), c.tensor(st, nil, nil), c.tensor(out, []int{BH, 1, V}, nil), 0, ws, ex)
	})
	b.launch(C.NPU_OP_INDEX_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_index_copy(c.tensor(state, []int{S, HKV}, nil), 0, slots(c), c.tensor(st, []int{B, HKV}, nil), ws, ex)
	})
}

// dsaDecode is DSAIndex for one row per sequence (see the file comment).
// Scores: the pooled rows of every pool the block table reaches (seqRows
// per BlockSize/KPool), gathered (aclnnEmbedding), q·pooledᵀ per head
// (aclnnBatchMatMul over rows), Scale and ReLU, the weighted head sum;
// visibility a = clamp(pos − (i*KPool + KPool−1), −1, 0), m = a + 1 (1
// for a complete pool at or before the row's position) and the bias a/m
// (0 or −Inf, aclnnDiv) added, then TopK of min(TopKPools, V). The
// output row is −1 + (the expanded selection + 1) times m of its rank +
// with Tail (the tail position + 1) on the entries [n*KPool, n*KPool +
// pos+1 − vis*KPool) with vis = Σm and n = min(TopKPools, vis), all in
// fp32 (exact below 2^24), cast to I32.
func (b *Backend) dsaDecode(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, Hi, d, nslots, width int, p npu.IndexParams) {
	B, kp, bs := seqs.NumSeqs, p.KPool, seqs.BlockSize
	if bs%kp != 0 {
		panic(fmt.Sprintf("ascend: DSAIndex blocks of %d tokens do not hold whole pools of %d", bs, kp))
	}
	V := seqs.MaxBlocks * (bs / kp)
	K := min(p.TopKPools, V)
	var posF, m, score, one *npu.Tensor
	b.do(func() {
		one = b.konst(1)
		posF = b.scratch(npu.F32, B)
		b.cast(posF, seqs.Pos.Reshape(-1).Rows(0, B))
		m = b.scratch(npu.F32, B, max(V, 1))
		if V == 0 {
			b.fillDev(m, 0)
			return
		}
		rows := b.seqRows(seqs, bs/kp, nslots)
		gp := b.scratch(pooled.DType(), B*V, d)
		b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_embedding(c.tensor(pooled, nil, nil), c.tensor(rows, []int{B * V}, nil), c.tensor(gp, nil, nil), ws, ex)
		})
		gp = b.asF32(gp)
		heads := b.scratch(npu.F32, B, Hi, V)
		b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_batch_matmul(c.tensor(q, []int{B, Hi, d}, nil), c.tensor(gp, []int{B, d, V}, []int{V * d, 1, d}), c.tensor(heads, nil, nil), 0, ws, ex)
		})
		b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_muls(c.tensor(heads, flat(heads), nil), c.scalar(p.Scale), c.tensor(heads, flat(heads), nil), ws, ex)
		})
		b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_clamp(c.tensor(heads, flat(heads), nil), c.scalar(0), c.scalar(float32(math.Inf(1))), c.tensor(heads, flat(heads), nil), ws, ex)
		})
		score = b.scratch(npu.F32, B, V)
		b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_batch_matmul(c.tensor(w, []int{B, 1, Hi}, nil), c.tensor(heads, nil, nil), c.tensor(score, []int{B, 1, V}, nil), 0, ws, ex)
		})
		last := b.arange(npu.F32, float32(kp-1), float32(kp), V)
		a := b.scratch(npu.F32, B, V)
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(posF, []int{B, 1}, nil), c.tensor(last, nil, nil), c.scalar(-1), c.tensor(a, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_clamp(c.tensor(a, nil, nil), c.scalar(-1), c.scalar(0), c.tensor(a, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(a, nil, nil), c.tensor(one, nil, nil), c.scalar(1), c.tensor(m, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_DIV, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_div(c.tensor(a, nil, nil), c.tensor(m, nil, nil), c.tensor(a, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(score, nil, nil), c.tensor(a, nil, nil), c.scalar(1), c.tensor(score, nil, nil), ws, ex)
		})
	})
	var sel *npu.Tensor
	if K > 0 {
		sel = b.alloc(npu.I32, B, K)
		b.TopK(b.alloc(npu.F32, B, K), sel, score, K)
	}
	b.do(func() {
		y := b.scratch(npu.F32, B, width)
		b.fillDev(y, 0)
		if K > 0 {
			e := b.scratch(npu.F32, B, K, kp)
			sf := b.scratch(npu.F32, B, K)
			b.cast(sf, sel)
			b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_muls(c.tensor(sf, flat(sf), nil), c.scalar(float32(kp)), c.tensor(sf, flat(sf), nil), ws, ex)
			})
			ar := b.arange(npu.F32, 1, 1, kp) // +1: the row is offset by one until the end
			b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_add(c.tensor(sf, []int{B, K, 1}, nil), c.tensor(ar, nil, nil), c.scalar(1), c.tensor(e, nil, nil), ws, ex)
			})
			b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_mul(c.tensor(e, nil, nil), c.tensor(m, []int{B, K, 1}, []int{V, 1, 1}), c.tensor(e, nil, nil), ws, ex)
			})
			b.launch(C.NPU_OP_INPLACE_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_inplace_copy(c.tensor(y, []int{B, K * kp}, []int{width, 1}), c.tensor(e, []int{B, K * kp}, nil), ws, ex)
			})
		}
		if p.Tail {
			b.dsaDecodeTail(y, posF, m, one, B, V, kp, width, p.TopKPools)
		}
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(y, nil, nil), c.tensor(one, nil, nil), c.scalar(-1), c.tensor(y, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_CAST, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_cast(c.tensor(y, flat(y), nil), aclDType(npu.I32), c.tensor(out, []int{B * width}, nil), ws, ex)
		})
	})
}

// dsaDecodeTail adds (tail position + 1) on each row's tail entries to y
// [B, width] (device thread; 19 operators).
func (b *Backend) dsaDecodeTail(y, posF, m, one *npu.Tensor, B, V, kp, width, topk int) {
	vec := func() *npu.Tensor { return b.scratch(npu.F32, B) }
	vis, n, lo, hi, sh := vec(), vec(), vec(), vec(), vec()
	b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_reduce_sum(c.tensor(m, nil, nil), c.ints(1), 0, aclDType(npu.F32), c.tensor(vis, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_CLAMP_MAX, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_clamp_max(c.tensor(vis, nil, nil), c.scalar(float32(topk)), c.tensor(n, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_muls(c.tensor(n, nil, nil), c.scalar(float32(kp)), c.tensor(lo, nil, nil), ws, ex)
	})
	// hi = lo + pos + 1 - vis*kp; sh = (vis - n)*kp + 1 (the value offset, +1).
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(posF, nil, nil), c.tensor(vis, nil, nil), c.scalar(float32(-kp)), c.tensor(hi, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(hi, nil, nil), c.tensor(lo, nil, nil), c.scalar(1), c.tensor(hi, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(hi, nil, nil), c.tensor(one, nil, nil), c.scalar(1), c.tensor(hi, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(vis, nil, nil), c.tensor(n, nil, nil), c.scalar(-1), c.tensor(sh, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_muls(c.tensor(sh, nil, nil), c.scalar(float32(kp)), c.tensor(sh, nil, nil), ws, ex)
	})
	j := b.arange(npu.F32, 0, 1, width)
	ind, ind2, val := b.scratch(npu.F32, B, width), b.scratch(npu.F32, B, width), b.scratch(npu.F32, B, width)
	// ind = clamp(j - lo + 1, 0, 1) * clamp(hi - j, 0, 1): lo <= j < hi.
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(j, nil, nil), c.tensor(lo, []int{B, 1}, nil), c.scalar(-1), c.tensor(ind, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_clamp(c.tensor(ind, nil, nil), c.scalar(-1), c.scalar(0), c.tensor(ind, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(ind, nil, nil), c.tensor(one, nil, nil), c.scalar(1), c.tensor(ind, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(hi, []int{B, 1}, nil), c.tensor(j, nil, nil), c.scalar(-1), c.tensor(ind2, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_clamp(c.tensor(ind2, nil, nil), c.scalar(0), c.scalar(1), c.tensor(ind2, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_mul(c.tensor(ind, nil, nil), c.tensor(ind2, nil, nil), c.tensor(ind, nil, nil), ws, ex)
	})
	// val = j + sh + 1, masked, added to y.
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(j, nil, nil), c.tensor(sh, []int{B, 1}, nil), c.scalar(1), c.tensor(val, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(val, nil, nil), c.tensor(one, nil, nil), c.scalar(1), c.tensor(val, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_mul(c.tensor(val, nil, nil), c.tensor(ind, nil, nil), c.tensor(val, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(y, nil, nil), c.tensor(val, nil, nil), c.scalar(1), c.tensor(y, nil, nil), ws, ex)
	})
}

// mlaDecode is SparseMLA for one row per sequence (device thread): the
// token-row table of every position the block table reaches (seqRows per
// BlockSize), the rows of sel's positions taken from it (aclnnGather
// along dim 1 of sel clamped to the table, -1 entries reading row 0),
// the mask from sel (aclnnAdd of 1, aclnnCast, aclnnClamp to [0, 1]),
// the latents gathered and mlaAttend, per chunk of rows.
func (b *Backend) mlaDecode(out, q, latents, kv, sel *npu.Tensor, seqs *npu.SeqLayout, one *npu.Tensor, H, dk, dv, R, W, nslots int, scale float32) {
	B, bs := seqs.NumSeqs, seqs.BlockSize
	P := seqs.MaxBlocks * bs
	tok := b.seqRows(seqs, bs, nslots)
	chunk := max(1, min(B, mlaChunkFloats/max(1, W*R)))
	for t0 := 0; t0 < B; t0 += chunk {
		n := min(chunk, B-t0)
		ent := []int{n, W}
		ci := b.scratch(npu.I32, n, W)
		b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_clamp(c.view(sel, t0*W, ent, nil), c.scalar(0), c.scalar(float32(P-1)), c.tensor(ci, nil, nil), ws, ex)
		})
		rowsIdx := b.scratch(npu.I32, n, W)
		b.launch(C.NPU_OP_GATHER, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_gather(c.view(tok, t0*P, []int{n, P}, nil), 1, c.tensor(ci, nil, nil), c.tensor(rowsIdx, nil, nil), ws, ex)
		})
		_, mask := b.selMask(sel, one, t0, n, W)
		lat := b.scratch(latents.DType(), n*W, R)
		b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_embedding(c.tensor(latents, nil, nil), c.tensor(rowsIdx, []int{n * W}, nil), c.tensor(lat, nil, nil), ws, ex)
		})
		b.mlaAttend(out, q, kv, b.asF32(lat), mask, t0, n, H, dk, dv, R, W, scale)
	}
}
