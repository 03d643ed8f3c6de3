package cpu

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// rowsOperands validates a row copy between a table of `n` rows and a
// batch of len(idx) rows, both with the same row size, and returns the row
// size in elements.
func rowsOperands(op string, batch, table, idx *npu.Tensor) int {
	if idx.DType() != npu.I32 {
		panic(fmt.Sprintf("cpu: %s indices %v: want I32", op, idx))
	}
	if table.Rank() == 0 {
		panic(fmt.Sprintf("cpu: %s table %v has no rows", op, table))
	}
	d := table.RowSize()
	if batch.Numel() != idx.Numel()*d {
		panic(fmt.Sprintf("cpu: %s rows %v do not match %d indices into %v", op, batch, idx.Numel(), table))
	}
	if batch.DType() != table.DType() {
		checkConvertible(op, batch.DType(), table.DType())
	}
	return d
}

// Gather copies rows: out[i] = src[idx[i]] (idx I32 [M]; src [N, ...]),
// converting src's dtype to out's.
func (be *Backend) Gather(out, src, idx *npu.Tensor) {
	be.gather("Gather", out, src, idx)
}

// Embedding looks up ids (I32 [M]) in table [V, D]: out [M, D], converting
// the table's dtype to out's.
func (be *Backend) Embedding(out, table, ids *npu.Tensor) {
	be.gather("Embedding", out, table, ids)
}

func (be *Backend) gather(op string, out, src, idx *npu.Tensor) {
	d := rowsOperands(op, out, src, idx)
	ids, rows := I32(idx), src.Dim(0)
	for _, r := range ids {
		if r < 0 || int(r) >= rows {
			panic(fmt.Sprintf("cpu: %s index %d out of range for %v", op, r, src))
		}
	}
	ob, sb := bytesOf(out), bytesOf(src)
	osz, ssz := out.DType().Size()*d, src.DType().Size()*d
	be.parallelFor(len(ids), max(1, (1<<15)/max(1, osz)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			r := int(ids[i])
			convertBytes(ob[i*osz:(i+1)*osz], out.DType(), sb[r*ssz:(r+1)*ssz], src.DType())
		}
	})
}

// Scatter writes rows: dst[idx[i]] = src[i], converting dtype. When an
// index repeats, the last row wins.
func (be *Backend) Scatter(dst, src, idx *npu.Tensor) {
	d := rowsOperands("Scatter", src, dst, idx)
	ids, rows := I32(idx), dst.Dim(0)
	for _, r := range ids {
		if r < 0 || int(r) >= rows {
			panic(fmt.Sprintf("cpu: Scatter index %d out of range for %v", r, dst))
		}
	}
	db, sb := bytesOf(dst), bytesOf(src)
	dsz, ssz := dst.DType().Size(), src.DType().Size()
	// Split columns rather than rows so that repeated indices resolve in
	// order (last wins) whatever the thread count.
	be.parallelFor(d, max(1, (1<<15)/max(1, len(ids))), func(lo, hi int) {
		for i, r := range ids {
			ro, ri := int(r)*d, i*d
			convertBytes(db[(ro+lo)*dsz:(ro+hi)*dsz], dst.DType(), sb[(ri+lo)*ssz:(ri+hi)*ssz], src.DType())
		}
	})
}
