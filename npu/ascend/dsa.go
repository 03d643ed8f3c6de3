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

// maxExactPos bounds positions carried in F32 by the compositions below
// (every integer below 2^24 is exact in fp32).
const maxExactPos = 1 << 24

// DSAIndex is the k-pool indexer selection, composed per sequence from
// stock operators. aclnnLightningIndexer does not fit npu's contract: it
// wants head dim 128 and a [blocks, blockSize, 1, D] paged key cache of
// tokens, selects tokens rather than pools under its own causal mask
// (sparseMode 3), and documents neither ties nor NaN order
// (ascend-api.md §4.7); the candidate there (LI over a pooled cache with
// sparseCount = TopKPools, then an expansion) is untested.
//
// The host plan comes from the layout's shadow (no sync): per sequence of
// L rows with V pools visible to its last row, the V pool rows
// (npu.PoolRow through the block table) are staged and the pooled keys
// gathered (aclnnEmbedding, + aclnnCast for 16-bit pooled), scores
// q·pooledᵀ for all L*Hi query heads (aclnnMatmul, pooled as a transposed
// view), Scale and ReLU (aclnnMuls, aclnnClamp to [0, +Inf], which keeps
// a NaN), the weighted head sum (aclnnBatchMatMul of w [L, 1, Hi] by
// [L, Hi, V]), a staged bias of -Inf on the pools a row does not see yet
// (aclnnAdd), then TopK (its composition: stable sort, ties to the lower
// pool; an unseen pool ranks after every seen one, which has a lower
// index) of K = min(TopKPools, V). The expansion is arithmetic on fp32
// (positions below 2^24 are exact): sel*KPool (aclnnCast, aclnnMuls) plus
// 0..KPool-1 (aclnnAdd, broadcast), times a staged 0/1 mask of the
// entries a row really has (min(TopKPools, its visible pools)), added into
// a staged template holding the tail positions and -1 elsewhere, and
// aclnnCast to out. Cost: about 14 operators per sequence plus TopK's 4,
// a full sort of each row's V scores, scratch of Hi*V floats per row, and
// staged uploads of L*V (bias) and about 2*L*width (template, mask)
// floats per sequence: correct, and far from a fused indexer kernel.
func (b *Backend) DSAIndex(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	switch pooled.DType() {
	case npu.F32, npu.BF16, npu.F16:
	default:
		panic(fmt.Sprintf("ascend: DSAIndex pooled %v: want F32, BF16 or F16", pooled))
	}
	if seqs == nil {
		panic("ascend: DSAIndex needs a SeqLayout")
	}
	T := seqs.NumRows
	Hi, d, nslots, width, err := npu.DSAIndexDims(out, q, w, pooled, T, p)
	if err != nil {
		panic("ascend: " + err.Error())
	}
	if w.DType() != npu.F32 || q.DType() != npu.F32 || out.DType() != npu.I32 {
		panic(fmt.Sprintf("ascend: DSAIndex q %v, w %v, out %v: want F32, F32, I32", q, w, out))
	}
	b.wrote(out)
	if T == 0 || width == 0 {
		return
	}
	if decodeBatch(seqs) {
		b.oneRowEach("DSAIndex", seqs)
		checkDecodeLayout("DSAIndex", seqs, true)
		b.dsaDecode(out, q, w, pooled, seqs, Hi, d, nslots, width, p)
		return
	}
	if b.hostPlanned("DSAIndex") {
		return
	}
	L := b.layout("DSAIndex", seqs, true)
	for s := range seqs.NumSeqs {
		r0, r1 := int(L.qs[s]), int(L.qs[s+1])
		if r1 > r0 {
			b.dsaSequence(out, q, w, pooled, L, s, r0, r1, Hi, d, nslots, width, p)
		}
	}
}

// dsaSequence is DSAIndex for rows [r0, r1) of sequence s.
func (b *Backend) dsaSequence(out, q, w, pooled *npu.Tensor, L *hostLayout, s, r0, r1, Hi, d, nslots, width int, p npu.IndexParams) {
	kp, rows := p.KPool, r1-r0
	pos0 := int(L.pos[s])
	if pos0+rows >= maxExactPos {
		panic(fmt.Sprintf("ascend: DSAIndex sequence %d reaches position %d; the composition carries positions in fp32 (below %d)", s, pos0+rows, maxExactPos))
	}
	V := (pos0 + rows) / kp // pools visible to the last row
	K := min(p.TopKPools, V)
	// Host plan: the template (tail positions, -1), the mask of selected
	// entries and the visibility bias.
	tmpl := make([]float32, rows*width)
	mask := make([]float32, rows*K*kp)
	bias := make([]float32, rows*V)
	for r := range rows {
		pos := pos0 + r
		vis := (pos + 1) / kp
		n := min(p.TopKPools, vis)
		row := tmpl[r*width : (r+1)*width]
		for j := range row {
			row[j] = -1
		}
		for j := range n * kp {
			row[j] = 0
			mask[r*K*kp+j] = 1
		}
		if p.Tail {
			for i, t := n*kp, vis*kp; t <= pos; i, t = i+1, t+1 {
				row[i] = float32(t)
			}
		}
		for i := vis; i < V; i++ {
			bias[r*V+i] = float32(math.Inf(-1))
		}
	}
	var sel *npu.Tensor
	if K > 0 {
		pidx := make([]int32, V)
		for i := range pidx {
			pidx[i] = L.poolRow("DSAIndex", s, i, kp, nslots)
		}
		score := b.alloc(npu.F32, rows, 1, V)
		b.do(func() {
			pi := stageI32(b, pidx, V)
			g := b.scratch(pooled.DType(), V, d)
			b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_embedding(c.tensor(pooled, nil, nil), c.tensor(pi, nil, nil), c.tensor(g, nil, nil), ws, ex)
			})
			g = b.asF32(g)
			heads := b.scratch(npu.F32, rows*Hi, V)
			b.launch(C.NPU_OP_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_matmul(c.view(q, r0*Hi*d, []int{rows * Hi, d}, nil), c.tensor(g, []int{d, V}, []int{1, d}), c.tensor(heads, nil, nil), 0, ws, ex)
			})
			b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_muls(c.tensor(heads, flat(heads), nil), c.scalar(p.Scale), c.tensor(heads, flat(heads), nil), ws, ex)
			})
			b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_clamp(c.tensor(heads, flat(heads), nil), c.scalar(0), c.scalar(float32(math.Inf(1))), c.tensor(heads, flat(heads), nil), ws, ex)
			})
			b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_batch_matmul(c.view(w, r0*Hi, []int{rows, 1, Hi}, nil), c.tensor(heads, []int{rows, Hi, V}, nil), c.tensor(score, nil, nil), 0, ws, ex)
			})
			bt := stageF32(b, bias, rows, V)
			b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_add(c.tensor(score, []int{rows, V}, nil), c.tensor(bt, nil, nil), c.scalar(1), c.tensor(score, []int{rows, V}, nil), ws, ex)
			})
		})
		sel = b.alloc(npu.I32, rows, K)
		b.TopK(b.alloc(npu.F32, rows, K), sel, score.Reshape(rows, V), K)
	}
	b.do(func() {
		y := b.stage(npu.F32, npu.EncodeFloats(tmpl, npu.F32), rows, width)
		if K > 0 {
			e := b.scratch(npu.F32, rows, K, kp)
			sf := b.scratch(npu.F32, rows, K)
			b.cast(sf, sel)
			b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_muls(c.tensor(sf, flat(sf), nil), c.scalar(float32(kp)), c.tensor(sf, flat(sf), nil), ws, ex)
			})
			ar := make([]float32, kp)
			for j := range ar {
				ar[j] = float32(j)
			}
			at := stageF32(b, ar, kp)
			b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_add(c.tensor(sf, []int{rows, K, 1}, nil), c.tensor(at, nil, nil), c.scalar(1), c.tensor(e, nil, nil), ws, ex)
			})
			mt := stageF32(b, mask, rows, K*kp)
			b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_mul(c.tensor(e, []int{rows, K * kp}, nil), c.tensor(mt, nil, nil), c.tensor(e, []int{rows, K * kp}, nil), ws, ex)
			})
			sub, subStrides := []int{rows, K * kp}, []int{width, 1}
			b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_add(c.tensor(y, sub, subStrides), c.tensor(e, sub, nil), c.scalar(1), c.tensor(y, sub, subStrides), ws, ex)
			})
		}
		b.launch(C.NPU_OP_CAST, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_cast(c.tensor(y, []int{rows * width}, nil), aclDType(npu.I32), c.view(out, r0*width, []int{rows * width}, nil), ws, ex)
		})
	})
}
