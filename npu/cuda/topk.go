package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// topkSortMax is the longest row TopK sorts in shared memory (8-byte keys:
// 32 KiB, within the default 48 KiB); longer rows and small k select in
// k passes instead.
const topkSortMax = 4096

// TopK writes, for each row of x [M, N], the k largest values (vals F32
// [M, k], descending) and their column indices (idx I32 [M, k]). Ties go
// to the lower index; NaN ranks below every number.
func (b *Backend) TopK(vals, idx, x *npu.Tensor, k int) {
	if x.Rank() == 0 {
		panic(fmt.Sprintf("cuda: TopK of scalar %v", x))
	}
	n := x.Dim(-1)
	m := x.Numel() / max(1, n)
	if k < 0 || k > n {
		panic(fmt.Sprintf("cuda: TopK k=%d of rows of %d", k, n))
	}
	if vals.Numel() != m*k || idx.Numel() != m*k {
		panic(fmt.Sprintf("cuda: TopK outputs %v, %v do not hold %dx%d", vals, idx, m, k))
	}
	wantF32("TopK", vals, x)
	if idx.DType() != npu.I32 {
		panic(fmt.Sprintf("cuda: TopK indices %v: want I32", idx))
	}
	if k == 0 || m == 0 {
		return
	}
	p := 1
	for p < n {
		p <<= 1
	}
	if k <= 16 || p > topkSortMax {
		b.launch("k_topk_rounds", d1(m), d1(rowThreads(n)), 0, b.ptr(vals), b.ptr(idx), b.ptr(x), pI32(n), pI32(k))
		return
	}
	b.launch("k_topk_sort", d1(m), d1(min(512, max(32, p/2))), 8*p, b.ptr(vals), b.ptr(idx), b.ptr(x), pI32(n), pI32(k), pI32(p))
}
