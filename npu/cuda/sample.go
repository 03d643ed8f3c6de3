package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

var _ npu.SampleReducer = (*Backend)(nil)

// SampleReduce limits (kernels/sample.cu).
const (
	sampleSeg = 4096 // keys per segment block (SAMPLE_SEG)
	// sampleSegMaxK is the largest k the segment passes serve (each pass
	// keeps k of every 4096 keys, so a row shrinks at least fourfold per
	// pass); a larger k sorts whole rows in global memory instead.
	sampleSegMaxK = sampleSeg / 4
)

// SampleReduce writes, for each row of logits [R, V] (F32), its k best
// entries in TopK's order (vals F32 [R, k], ids I32 [R, k]) and its NaN
// and +Inf counts (stats I32 [R, 2]). See npu.SampleReducer.
//
// Each entry is a 64-bit key that orders as the CPU ranks (value, then
// lower id); blocks of 4096 keys keep their k best (k selection rounds
// for k <= 16, a shared-memory bitonic sort otherwise) and the survivors
// of a row are reduced the same way until one block holds them all, which
// copies the winners' values from the logits by id: exact, and a 151k
// vocabulary takes two or three passes. The counts are integer atomics
// (exact whatever the order). Nothing is read back to the host.
func (b *Backend) SampleReduce(vals, ids, stats, logits *npu.Tensor, k int) {
	if logits == nil || logits.Rank() == 0 || stats == nil {
		panic(fmt.Sprintf("cuda: SampleReduce of logits %v, stats %v", logits, stats))
	}
	V := logits.Dim(-1)
	R := logits.Numel() / max(1, V)
	if k < 0 || k > V {
		panic(fmt.Sprintf("cuda: SampleReduce k=%d of rows of %d", k, V))
	}
	if stats.Numel() != 2*R || stats.DType() != npu.I32 {
		panic(fmt.Sprintf("cuda: SampleReduce stats %v do not hold %dx2 I32", stats, R))
	}
	wantF32("SampleReduce", logits)
	if k > 0 {
		if vals == nil || ids == nil || vals.Numel() != R*k || ids.Numel() != R*k {
			panic(fmt.Sprintf("cuda: SampleReduce outputs %v, %v do not hold %dx%d", vals, ids, R, k))
		}
		wantF32("SampleReduce", vals)
		if ids.DType() != npu.I32 {
			panic(fmt.Sprintf("cuda: SampleReduce ids %v: want I32", ids))
		}
	}
	if R == 0 {
		return
	}
	pst, pl := b.ptr(stats), b.ptr(logits)
	if err := drvMemsetD8(b.ctx, pst, 0, 8*R, b.stream); err != nil {
		b.fail(fmt.Errorf("cuda: SampleReduce: %w", err))
		return
	}
	if V == 0 {
		return
	}
	pv, pi := b.ptr(vals), b.ptr(ids)
	if k > sampleSegMaxK {
		b.sampleSortRows(pv, pi, pst, pl, R, V, k)
		return
	}
	// Pass 1 reads the logits (and counts); each later pass the keys the
	// one before kept.
	var in *buffer
	n, st := V, pst
	for {
		parts := (n + sampleSeg - 1) / sampleSeg
		keys := uint64(0)
		if in != nil {
			keys = in.ptr
		}
		if parts == 1 || k == 0 {
			sortn := 1
			for sortn < min(n, sampleSeg) {
				sortn <<= 1
			}
			if k == 0 {
				sortn = sampleSeg
			}
			b.launch("k_sample_seg", d2(parts, R), d1(512), 8*sortn,
				0, pv, pi, st, pl, keys, pI32(V), pI32(n), pI32(k), pI32(k), pI32(sortn))
			break
		}
		next := b.temp(8 * R * parts * k)
		b.launch("k_sample_seg", d2(parts, R), d1(512), 8*sampleSeg,
			next.ptr, 0, 0, st, pl, keys, pI32(V), pI32(n), pI32(k), pI32(k), pI32(sampleSeg))
		if in != nil {
			b.freeBuf(in)
		}
		in, n, st = next, parts*k, 0
	}
	if in != nil {
		b.freeBuf(in)
	}
}

// sampleSortRows is SampleReduce for a large k: every row's keys are
// sorted in global memory (a bitonic sort, one launch per step) and the
// first k taken.
func (b *Backend) sampleSortRows(pv, pi, pst, pl uint64, R, V, k int) {
	p := 1
	for p < V {
		p <<= 1
	}
	keys := b.temp(8 * R * p)
	b.launch("k_sample_keys", b.gridFor(int64(R*p), elemThreads), d1(elemThreads), 0, keys.ptr, pst, pl, pI32(R), pI32(V), pI32(p))
	for size := 2; size <= p; size <<= 1 {
		for stride := size >> 1; stride > 0; stride >>= 1 {
			b.launch("k_bitonic_step", b.gridFor(int64(R*p/2), elemThreads), d1(elemThreads), 0,
				keys.ptr, pI32(R), pI32(p), pI32(size), pI32(stride))
		}
	}
	b.launch("k_sample_take", b.gridFor(int64(R*k), elemThreads), d1(elemThreads), 0, pv, pi, keys.ptr, pl, pI32(R), pI32(V), pI32(p), pI32(k))
	b.freeBuf(keys)
}
