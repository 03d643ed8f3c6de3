//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// mlaChunkFloats bounds the gathered latents SparseMLA holds at once
// (rows*width*R floats, 256 MiB); longer batches run in chunks of rows.
const mlaChunkFloats = 1 << 26

// mlaMasked is the score bias of an unused sel entry: finite, so a row with
// no selected position stays finite through the softmax (its weights are
// then zeroed by the mask), and far below any real score, so exp of it
// underflows to exactly 0 next to one.
const mlaMasked = -1e30

// SparseMLA is NoPE multi-head latent attention over the positions sel
// lists, composed in the absorbed form from stock operators over the
// whole batch (no per-sequence loop on the device side).
// aclnnSparseFlashAttention (attentionMode 0, D = R) would need q already
// absorbed, a paged [blocks, blockSize, 1, R] cache and sparse indices of
// cache blocks, and documents no all-masked-row behaviour (ascend-api.md
// §4.7); it is the path to try on a real NPU.
//
// The host plan comes from the layout's shadow (no sync): for every
// sequence a table [1 + its positions] maps position p to its latent row
// through the block table, entry 0 a sentinel (row 0) for the -1 entries;
// the tables of all sequences are staged as one I32 tensor with the index
// of each row's sentinel (staged [T, 1]). On the device: idx = sel + 1 +
// that index (two aclnnAdd on INT32), the selected latents C [T*width, R]
// gathered (aclnnEmbedding, + aclnnCast for 16-bit latents), a 0/1 mask
// of the used entries (aclnnCast, aclnnClamp of sel+1 to [0, 1]) and its
// bias 0/mlaMasked (aclnnMuls, aclnnAdd); per head q̃ = W_UKᵀ q
// (aclnnBatchMatMul over heads, strided views of q and kvB), scores
// q̃·C (aclnnBatchMatMul over rows), aclnnMuls by scale, aclnnAdd of the
// bias, aclnnSoftmax, aclnnMul by the mask (a row with nothing selected
// becomes zeros), z = p·C (aclnnBatchMatMul) and out = W_UV z
// (aclnnBatchMatMul over heads into a strided view of out). Cost: about 17
// operators per chunk of rows, a gather of width*R latents per row (where
// a fused kernel streams them), the whole kvB cast to F32 when it is
// 16-bit, and a staged table of 4 bytes per cached position of the
// batch's sequences per call (device-side FloorDivide/Remainder over the
// block table would remove it). A position listed twice in a row counts
// twice (DSAIndex never lists one twice); a position beyond its
// sequence is not detected on the device (it reads another sequence's
// table entry, or fails the stream past the last).
func (b *Backend) SparseMLA(out, q, latents, kvB, sel *npu.Tensor, seqs *npu.SeqLayout, heads, dk, dv int, scale float32) {
	H := heads
	if seqs == nil {
		panic("ascend: SparseMLA without a layout")
	}
	T := seqs.NumRows
	R, nslots, W, err := npu.SparseMLADims(out, q, latents, kvB, sel, T, heads, dk, dv)
	if err != nil {
		panic("ascend: " + err.Error())
	}
	for _, t := range []*npu.Tensor{latents, kvB} {
		switch t.DType() {
		case npu.F32, npu.BF16, npu.F16:
		default:
			panic(fmt.Sprintf("ascend: SparseMLA %v: want F32, BF16 or F16", t))
		}
	}
	switch {
	case q.DType() != npu.F32 || out.DType() != npu.F32:
		panic(fmt.Sprintf("ascend: SparseMLA q %v, out %v: want F32", q, out))
	case sel.DType() != npu.I32:
		panic(fmt.Sprintf("ascend: SparseMLA sel %v: want I32", sel))
	}
	if T == 0 {
		return
	}
	if W == 0 {
		b.Fill(out, 0)
		return
	}
	if decodeBatch(seqs) {
		b.oneRowEach("SparseMLA", seqs)
		checkDecodeLayout("SparseMLA", seqs, true)
		b.do(func() {
			one := b.scratch(npu.I32, 1)
			b.fillDev(one, 1)
			kv := b.asF32(kvB)
			b.mlaDecode(out, q, latents, kv, sel, seqs, one, H, dk, dv, R, W, nslots, scale)
			b.recycle(kv, kvB)
		})
		return
	}
	if b.hostPlanned("SparseMLA") {
		return
	}
	L := b.layout("SparseMLA", seqs, true)
	var table []int32
	off := make([]int32, T)
	for s := range seqs.NumSeqs {
		r0, r1 := int(L.qs[s]), int(L.qs[s+1])
		if r1 == r0 {
			continue
		}
		base := len(table)
		table = append(table, 0)
		for p := range int(L.pos[s]) + r1 - r0 {
			table = append(table, L.tokenRow("SparseMLA", s, p, nslots))
		}
		for t := r0; t < r1; t++ {
			off[t] = int32(base)
		}
	}
	if len(table) >= maxExactPos {
		panic(fmt.Sprintf("ascend: SparseMLA batch of %d cached positions; the stand-in's INT32 aclnnAdd is exact below %d", len(table), maxExactPos))
	}
	chunk := max(1, min(T, mlaChunkFloats/max(1, W*R)))
	b.do(func() {
		tab := stageI32(b, table, len(table))
		offs := stageI32(b, off, T, 1)
		one := b.scratch(npu.I32, 1)
		b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_fill_scalar(c.tensor(one, nil, nil), c.scalar(1), ws, ex)
		})
		kv := b.asF32(kvB)
		for t0 := 0; t0 < T; t0 += chunk {
			b.mlaChunk(out, q, latents, kv, sel, tab, offs, one, t0, min(t0+chunk, T), H, dk, dv, R, W, scale)
		}
		b.recycle(kv, kvB)
	})
}

// mlaChunk is SparseMLA for rows [t0, t1) (device thread).
func (b *Backend) mlaChunk(out, q, latents, kv, sel, tab, offs, one *npu.Tensor, t0, t1, H, dk, dv, R, W int, scale float32) {
	n := t1 - t0
	// idx = sel + 1 + offset of the row's table.
	idx, mask := b.selMask(sel, one, t0, n, W)
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(idx, nil, nil), c.view(offs, t0, []int{n, 1}, nil), c.scalar(1), c.tensor(idx, nil, nil), ws, ex)
	})
	rowsIdx := b.scratch(npu.I32, n*W)
	b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_embedding(c.tensor(tab, []int{tab.Numel(), 1}, nil), c.tensor(idx, []int{n * W}, nil), c.tensor(rowsIdx, []int{n * W, 1}, nil), ws, ex)
	})
	lat := b.scratch(latents.DType(), n*W, R)
	b.launch(C.NPU_OP_EMBEDDING, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_embedding(c.tensor(latents, nil, nil), c.tensor(rowsIdx, nil, nil), c.tensor(lat, nil, nil), ws, ex)
	})
	b.mlaAttend(out, q, kv, b.asF32(lat), mask, t0, n, H, dk, dv, R, W, scale)
}

// mlaAttend is the attention of SparseMLA's rows [t0, t0+n) over their
// gathered latents lat F32 [n*W, R] with mask F32 [n, W] (1 used, 0 not;
// device thread): 11 operators.
func (b *Backend) mlaAttend(out, q, kv, lat, mask *npu.Tensor, t0, n, H, dk, dv, R, W int, scale float32) {
	// bias = mask*(-mlaMasked) + mlaMasked: 0 where used, mlaMasked where not.
	bias := b.scratch(npu.F32, n, W)
	b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_muls(c.tensor(mask, nil, nil), c.scalar(-mlaMasked), c.tensor(bias, nil, nil), ws, ex)
	})
	floor := b.scratch(npu.F32, 1)
	b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_fill_scalar(c.tensor(floor, nil, nil), c.scalar(mlaMasked), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(bias, nil, nil), c.tensor(floor, nil, nil), c.scalar(1), c.tensor(bias, nil, nil), ws, ex)
	})
	// q̃[h, t] = W_UK[h]ᵀ q[t, h]: [H, n, dk] @ [H, dk, R].
	qt := b.scratch(npu.F32, H, n, R)
	hs := (dk + dv) * R
	b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_batch_matmul(c.view(q, t0*H*dk, []int{H, n, dk}, []int{dk, H * dk, 1}), c.tensor(kv, []int{H, dk, R}, []int{hs, R, 1}),
			c.tensor(qt, nil, nil), 0, ws, ex)
	})
	// Scores [n, H, W] = q̃[t] (as [n, H, R]) @ C[t]ᵀ ([n, R, W]).
	sc := b.scratch(npu.F32, n, H, W)
	b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_batch_matmul(c.tensor(qt, []int{n, H, R}, []int{R, n * R, 1}), c.tensor(lat, []int{n, R, W}, []int{W * R, 1, R}),
			c.tensor(sc, nil, nil), 0, ws, ex)
	})
	b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_muls(c.tensor(sc, flat(sc), nil), c.scalar(scale), c.tensor(sc, flat(sc), nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(sc, nil, nil), c.tensor(bias, []int{n, 1, W}, nil), c.scalar(1), c.tensor(sc, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_SOFTMAX, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_softmax(c.tensor(sc, nil, nil), -1, c.tensor(sc, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_mul(c.tensor(sc, nil, nil), c.tensor(mask, []int{n, 1, W}, nil), c.tensor(sc, nil, nil), ws, ex)
	})
	// z [n, H, R] = p @ C; out[t, h] = W_UV[h] z[t, h]: [H, n, R] @ [H, R, dv].
	z := b.scratch(npu.F32, n, H, R)
	b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_batch_matmul(c.tensor(sc, nil, nil), c.tensor(lat, []int{n, W, R}, nil), c.tensor(z, nil, nil), 0, ws, ex)
	})
	b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_batch_matmul(c.tensor(z, []int{H, n, R}, []int{R, H * R, 1}), c.view(kv, dk*R, []int{H, R, dv}, []int{hs, 1, R}),
			c.view(out, t0*H*dv, []int{H, n, dv}, []int{dv, H * dv, 1}), 0, ws, ex)
	})
}

// selMask returns idx = sel + 1 for rows [t0, t0+n) of sel [*, W] and the
// F32 mask clamp(idx, 0, 1): 1 where a position was selected, 0 for -1.
func (b *Backend) selMask(sel, one *npu.Tensor, t0, n, W int) (idx, mask *npu.Tensor) {
	ent := []int{n, W}
	idx = b.scratch(npu.I32, n, W)
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.view(sel, t0*W, ent, nil), c.tensor(one, nil, nil), c.scalar(1), c.tensor(idx, nil, nil), ws, ex)
	})
	mask = b.scratch(npu.F32, n, W)
	b.cast(mask, idx)
	b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_clamp(c.tensor(mask, nil, nil), c.scalar(0), c.scalar(1), c.tensor(mask, nil, nil), ws, ex)
	})
	return idx, mask
}
