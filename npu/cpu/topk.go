package cpu

import (
	"fmt"
	"sort"

	"github.com/npuserve/npuserve/npu"
)

// better reports whether (a, ia) ranks above (b, ib): larger values first,
// ties to the lower index, NaN below every number.
func better(a float32, ia int32, b float32, ib int32) bool {
	an, bn := a != a, b != b
	switch {
	case an && bn:
		return ia < ib
	case an:
		return false
	case bn:
		return true
	case a != b:
		return a > b
	}
	return ia < ib
}

// TopK writes, for each row of x [M, N], the k largest values (vals F32
// [M, k], descending) and their column indices (idx I32 [M, k]). Ties go to
// the lower index; NaN ranks below every number.
func (be *Backend) TopK(vals, idx, x *npu.Tensor, k int) {
	if x.Rank() == 0 {
		panic(fmt.Sprintf("cpu: TopK of scalar %v", x))
	}
	n := x.Dim(-1)
	m := x.Numel() / max(1, n)
	if k < 0 || k > n {
		panic(fmt.Sprintf("cpu: TopK k=%d of rows of %d", k, n))
	}
	if vals.Numel() != m*k || idx.Numel() != m*k {
		panic(fmt.Sprintf("cpu: TopK outputs %v, %v do not hold %dx%d", vals, idx, m, k))
	}
	if k == 0 {
		return
	}
	xv, vv, iv := F32(x), F32(vals), I32(idx)
	be.parallelFor(m, max(1, (1<<14)/n), func(lo, hi int) {
		h := &topHeap{}
		for r := lo; r < hi; r++ {
			topkRow(vv[r*k:(r+1)*k], iv[r*k:(r+1)*k], xv[r*n:(r+1)*n], h)
		}
	})
}

// topHeap is a min-heap (worst on top) of candidate entries.
type topHeap struct {
	v []float32
	i []int32
}

func (h *topHeap) less(a, b int) bool { return better(h.v[b], h.i[b], h.v[a], h.i[a]) }

func (h *topHeap) swap(a, b int) {
	h.v[a], h.v[b] = h.v[b], h.v[a]
	h.i[a], h.i[b] = h.i[b], h.i[a]
}

func (h *topHeap) down(p int) {
	n := len(h.v)
	for {
		c := 2*p + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(c+1, c) {
			c++
		}
		if !h.less(c, p) {
			return
		}
		h.swap(p, c)
		p = c
	}
}

// Len, Less and Swap sort the heap's entries best first.
func (h *topHeap) Len() int           { return len(h.v) }
func (h *topHeap) Less(a, b int) bool { return better(h.v[a], h.i[a], h.v[b], h.i[b]) }
func (h *topHeap) Swap(a, b int)      { h.swap(a, b) }

// topkRow selects the len(vals) best entries of x, best first.
func topkRow(vals []float32, idx []int32, x []float32, h *topHeap) {
	k := len(vals)
	if k == 1 {
		bv, bi := x[0], int32(0)
		for i := 1; i < len(x); i++ {
			if better(x[i], int32(i), bv, bi) {
				bv, bi = x[i], int32(i)
			}
		}
		vals[0], idx[0] = bv, bi
		return
	}
	h.v = append(h.v[:0], x[:k]...)
	h.i = h.i[:0]
	for i := 0; i < k; i++ {
		h.i = append(h.i, int32(i))
	}
	for p := k/2 - 1; p >= 0; p-- {
		h.down(p)
	}
	for i := k; i < len(x); i++ {
		v := x[i]
		if better(v, int32(i), h.v[0], h.i[0]) {
			h.v[0], h.i[0] = v, int32(i)
			h.down(0)
		}
	}
	sort.Sort(h)
	copy(vals, h.v)
	copy(idx, h.i)
}
