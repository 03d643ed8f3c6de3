package cpu

import (
	"fmt"
	"math"
	"sort"

	"github.com/npuserve/npuserve/npu"
)

var _ npu.SampleReducer = (*Backend)(nil)

// reduceChunk is the shortest part of a row SampleReduce gives a thread of
// its own: below it, splitting costs more than the merge saves.
const reduceChunk = 1 << 14

// SampleReduce writes, for each row of logits [R, V] (F32), its k best
// entries in TopK's order (vals F32 [R, k], ids I32 [R, k]) and its counts
// of NaN and +Inf (stats I32 [R, 2]). See npu.SampleReducer.
//
// Rows are spread over the threads; when there are fewer rows than
// threads (decode: a handful of rows of a 150k vocabulary), each row is
// also cut into parts of at least reduceChunk entries whose top-k are
// merged afterwards. The TopK order is total (value, then id), so the
// merged top-k is exactly the row's whatever the split.
func (be *Backend) SampleReduce(vals, ids, stats, logits *npu.Tensor, k int) {
	if logits == nil || logits.Rank() == 0 || stats == nil {
		panic(fmt.Sprintf("cpu: SampleReduce of logits %v, stats %v", logits, stats))
	}
	n := logits.Dim(-1)
	m := logits.Numel() / max(1, n)
	if k < 0 || k > n {
		panic(fmt.Sprintf("cpu: SampleReduce k=%d of rows of %d", k, n))
	}
	if stats.Numel() != 2*m {
		panic(fmt.Sprintf("cpu: SampleReduce stats %v do not hold %dx2", stats, m))
	}
	x, st := F32(logits), I32(stats)
	var vv []float32
	var iv []int32
	if k > 0 {
		if vals == nil || ids == nil || vals.Numel() != m*k || ids.Numel() != m*k {
			panic(fmt.Sprintf("cpu: SampleReduce outputs %v, %v do not hold %dx%d", vals, ids, m, k))
		}
		vv, iv = F32(vals), I32(ids)
	}
	if m == 0 {
		return
	}
	parts := 1
	if m < be.threads && n >= 2*reduceChunk {
		parts = min((be.threads+m-1)/m, n/reduceChunk)
	}
	if parts == 1 {
		be.parallelFor(m, max(1, reduceChunk/max(1, n)), func(lo, hi int) {
			h := &topHeap{}
			for r := lo; r < hi; r++ {
				row := x[r*n : (r+1)*n]
				st[2*r], st[2*r+1] = countBad(row)
				reduceTop(vv[r*k:(r+1)*k], iv[r*k:(r+1)*k], row, h)
			}
		})
		return
	}

	// Each part p of row r = p/parts keeps its top min(k, len) entries
	// (ids made row-relative) and its counts; the merge takes the k best
	// of a row's parts.
	size := (n + parts - 1) / parts
	pv, pi := make([]float32, m*parts*k), make([]int32, m*parts*k)
	pn, kept := make([]int32, 2*m*parts), make([]int, m*parts)
	be.parallelFor(m*parts, 1, func(lo, hi int) {
		h := &topHeap{}
		for p := lo; p < hi; p++ {
			r, a := p/parts, (p%parts)*size
			b := min(a+size, n)
			if a >= b {
				continue
			}
			seg := x[r*n+a : r*n+b]
			pn[2*p], pn[2*p+1] = countBad(seg)
			kc := min(k, b-a)
			reduceTop(pv[p*k:p*k+kc], pi[p*k:p*k+kc], seg, h)
			for j := p * k; j < p*k+kc; j++ {
				pi[j] += int32(a)
			}
			kept[p] = kc
		}
	})
	be.parallelFor(m, 1, func(lo, hi int) {
		h := &topHeap{}
		for r := lo; r < hi; r++ {
			h.v, h.i = h.v[:0], h.i[:0]
			var nan, inf int32
			for p := r * parts; p < (r+1)*parts; p++ {
				nan += pn[2*p]
				inf += pn[2*p+1]
				h.v = append(h.v, pv[p*k:p*k+kept[p]]...)
				h.i = append(h.i, pi[p*k:p*k+kept[p]]...)
			}
			st[2*r], st[2*r+1] = nan, inf
			if k > 0 {
				sort.Sort(h) // parts*k entries, best first
				copy(vv[r*k:(r+1)*k], h.v[:k])
				copy(iv[r*k:(r+1)*k], h.i[:k])
			}
		}
	})
}

// reduceTop writes the len(vals) best entries of x in TopK's order, as
// topkRow does, with cheaper scans: k = 1 is a four-lane argmax (falling
// back to topkRow for a row with nothing above -Inf), and for larger k a
// candidate is tested against the heap's worst entry with one comparison
// (entries come in ascending index order, so an equal value never wins).
func reduceTop(vals []float32, idx []int32, x []float32, h *topHeap) {
	k := len(vals)
	switch {
	case k == 0:
		return
	case k == 1:
		if i := argmaxLanes(x); i >= 0 {
			vals[0], idx[0] = x[i], int32(i)
			return
		}
	case k < len(x):
		h.v = append(h.v[:0], x[:k]...)
		h.i = h.i[:0]
		for i := range k {
			h.i = append(h.i, int32(i))
		}
		for p := k/2 - 1; p >= 0; p-- {
			h.down(p)
		}
		thr := h.v[0]
		thrNaN := thr != thr
		for i := k; i < len(x); i++ {
			if v := x[i]; v > thr || (thrNaN && v == v) {
				h.v[0], h.i[0] = v, int32(i)
				h.down(0)
				thr = h.v[0]
				thrNaN = thr != thr
			}
		}
		sort.Sort(h)
		copy(vals, h.v)
		copy(idx, h.i)
		return
	}
	topkRow(vals, idx, x, h)
}

// argmaxLanes returns the lowest index of x's largest number above -Inf
// (NaN ignored), or -1 when there is none. Four independent lanes keep
// the comparisons pipelined.
func argmaxLanes(x []float32) int {
	ninf := float32(math.Inf(-1))
	b0, b1, b2, b3 := ninf, ninf, ninf, ninf
	i0, i1, i2, i3 := -1, -1, -1, -1
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		q := x[i : i+4 : i+4]
		if q[0] > b0 {
			b0, i0 = q[0], i
		}
		if q[1] > b1 {
			b1, i1 = q[1], i+1
		}
		if q[2] > b2 {
			b2, i2 = q[2], i+2
		}
		if q[3] > b3 {
			b3, i3 = q[3], i+3
		}
	}
	best, bv := -1, ninf
	for _, l := range [4]struct {
		v float32
		i int
	}{{b0, i0}, {b1, i1}, {b2, i2}, {b3, i3}} {
		if l.i >= 0 && (l.v > bv || (l.v == bv && l.i < best)) {
			best, bv = l.i, l.v
		}
	}
	for i := n; i < len(x); i++ {
		if x[i] > bv {
			best, bv = i, x[i]
		}
	}
	return best
}

// countBad counts the NaN and +Inf entries of x. A group of four whose sum
// is finite holds neither (a NaN makes the sum NaN, a +Inf makes it +Inf
// or NaN), so only groups with a non-finite sum (NaN, ±Inf, overflow) are
// counted element by element.
func countBad(x []float32) (nan, inf int32) {
	count := func(q []float32) {
		for _, v := range q {
			if v != v {
				nan++
			} else if v > math.MaxFloat32 {
				inf++
			}
		}
	}
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		q := x[i : i+4 : i+4]
		if s := (q[0] + q[1]) + (q[2] + q[3]); s-s != 0 {
			count(q)
		}
	}
	count(x[n:])
	return nan, inf
}
