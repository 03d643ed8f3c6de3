package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// Row gathers and scatters (kernels/gather.cu). The indices live on the
// device: one outside the table is reported by the kernel (a DeviceError
// at the next Sync) and its row skipped, where the CPU backend panics.

func rowsOperands(op string, batch, table, idx *npu.Tensor) int {
	if idx.DType() != npu.I32 {
		panic(fmt.Sprintf("cuda: %s indices %v: want I32", op, idx))
	}
	if table.Rank() == 0 {
		panic(fmt.Sprintf("cuda: %s table %v has no rows", op, table))
	}
	d := table.RowSize()
	if batch.Numel() != idx.Numel()*d {
		panic(fmt.Sprintf("cuda: %s rows %v do not match %d indices into %v", op, batch, idx.Numel(), table))
	}
	if batch.DType() != table.DType() {
		checkConvertible(op, batch.DType(), table.DType())
	}
	return d
}

// kernelDT is the dtype code for a row copy: only read when the two
// dtypes differ (then both are convertible).
func kernelDT(dt npu.DType) int {
	if dt == npu.F32 || dt == npu.BF16 || dt == npu.F16 || dt == npu.I32 || dt == npu.F8E4M3 {
		return dtypeCode(dt)
	}
	return -1
}

func (b *Backend) rows(kernel string, op, code int, batch, table, idx *npu.Tensor) {
	d := rowsOperands(opNames[op], batch, table, idx)
	m := idx.Numel()
	if m == 0 || d == 0 {
		return
	}
	threads := min(256, max(32, (d+31)/32*32))
	b.launchChecked(kernel, d1(min(m, 1<<20)), d1(threads), 0,
		b.ptr(batch), pI32(kernelDT(batch.DType())), b.ptr(table), pI32(kernelDT(table.DType())), b.ptr(idx),
		pI64(m), pI64(table.Dim(0)), pI64(d), pI32(table.DType().Size()), b.errWord, pI32(code))
}

// Gather copies rows: out[i] = src[idx[i]] (idx I32 [M]; src [N, ...]),
// converting src's dtype to out's.
func (b *Backend) Gather(out, src, idx *npu.Tensor) {
	b.rows("k_gather", opGather, opGather, out, src, idx)
}

// Embedding looks up ids (I32 [M]) in table [V, D]: out [M, D].
func (b *Backend) Embedding(out, table, ids *npu.Tensor) {
	b.rows("k_gather", opEmbedding, opEmbedding, out, table, ids)
}

// Scatter writes rows: dst[idx[i]] = src[i], converting dtype; when an
// index repeats, the last row wins.
func (b *Backend) Scatter(dst, src, idx *npu.Tensor) {
	d := rowsOperands("Scatter", src, dst, idx)
	m := idx.Numel()
	if m == 0 || d == 0 {
		return
	}
	threads := min(256, max(32, (d+31)/32*32))
	b.launchChecked("k_scatter", d1(min(m, 1<<20)), d1(threads), 0,
		b.ptr(dst), pI32(kernelDT(dst.DType())), b.ptr(src), pI32(kernelDT(src.DType())), b.ptr(idx),
		pI64(m), pI64(dst.Dim(0)), pI64(d), pI32(src.DType().Size()), b.errWord, pI32(opScatter))
}
