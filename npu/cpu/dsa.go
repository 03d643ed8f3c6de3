package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/npuserve/npuserve/npu"
)

// KPool compresses complete index pools (HF Glm5NextTextIndexer
// get_pooled_states): keys and gates [P*kp, d] hold the kp consecutive tokens
// of P pools, ape [kp, d] (F32, BF16 or F16); for every pool and channel c,
//
//	out[p][c] = Σ_j π_j key[p*kp+j][c],  π = softmax_j(gate[p*kp+j][c] + ape[j][c]).
//
// The logits are fp32 sums as in the reference; the softmax and the weighted
// sum are evaluated in float64 and rounded once. out is F32 [P, d].
func (be *Backend) KPool(out, keys, gates, ape *npu.Tensor) {
	if ape.Rank() != 2 {
		panic(fmt.Sprintf("cpu: KPool ape %v, want [kp, d]", ape))
	}
	kp, d := ape.Dim(0), ape.Dim(1)
	if kp <= 0 || d <= 0 || keys.Numel()%(kp*d) != 0 || keys.Dim(-1) != d {
		panic(fmt.Sprintf("cpu: KPool keys %v with ape %v", keys, ape))
	}
	P := keys.Numel() / (kp * d)
	if !npu.SameShape(gates.Shape(), keys.Shape()) || out.Numel() != P*d || (P > 0 && out.Dim(-1) != d) {
		panic(fmt.Sprintf("cpu: KPool out %v, keys %v, gates %v", out, keys, gates))
	}
	k, g, o := F32(keys), F32(gates), F32(out)
	a := attnVector("KPool ape", ape, kp*d)
	be.parallelFor(P, max(1, 8192/(kp*d)), func(lo, hi int) {
		l := make([]float64, kp)
		for p := lo; p < hi; p++ {
			base := p * kp * d
			for c := 0; c < d; c++ {
				m := math.Inf(-1)
				for j := range l {
					l[j] = float64(g[base+j*d+c] + a[j*d+c])
					m = max(m, l[j])
				}
				var sum, acc float64
				for j, x := range l {
					e := math.Exp(x - m)
					sum += e
					acc += e * float64(k[base+j*d+c])
				}
				o[p*d+c] = float32(acc / sum)
			}
		}
	})
}

// DSAIndex work sizes: rows that share each gathered block of pooled keys
// and pools per block.
const (
	dsaRowBlock  = 8
	dsaPoolBlock = 256
)

// dsaWaveScores is the number of scores DSAIndex holds at once; rows beyond
// it are handled in further waves (a variable for tests).
var dsaWaveScores = 1 << 24

// DSAIndex is the k-pool indexer selection (HF Glm5NextTextIndexer.forward
// with get_pooled_states and append_visible_tail, no padding). For query row
// t of sequence b at absolute position pos = Pos[b] + t − QueryStart[b], the
// visible pools are the complete ones, i = 0 .. (pos+1)/KPool − 1, with
// pooled keys at the rows the block table gives (npu.PoolRow) of pooled [poolSlots, d] (F32, BF16 or
// F16). Each is scored
//
//	I = Σ_h w[t,h] · relu(Scale · q[t,h]·pooled[PoolRow(b, i)])
//
// (fp32, q [T, Hi*d], w [T, Hi]) and the min(TopKPools, #visible) best are
// selected: higher score first; equal scores go to the lower pool index; NaN
// ranks below every number. Row t of out (I32 [T, width], width =
// TopKPools*KPool + (KPool−1 if Tail)) lists the positions of the selected
// pools in that order, each pool's KPool positions ascending, then with Tail
// the positions of the query's incomplete pool, (pos+1) − (pos+1)%KPool ..
// pos, ascending (none when (pos+1)%KPool == 0), then −1 in every unused
// entry. A pool's score does not depend on which other pools are visible, so
// equal pooled keys give bitwise equal scores.
func (be *Backend) DSAIndex(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	attnFloat("DSAIndex pooled", pooled)
	L := readLayout("DSAIndex", seqs)
	T := L.Rows()
	Hi, d, nslots, width, err := npu.DSAIndexDims(out, q, w, pooled, T, p)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	kp, topk := p.KPool, p.TopKPools
	qs, ws, outs := F32(q), F32(w), I32(out)
	B := L.NumSeqs()
	poolRows := make([][]int32, B)
	type rowInfo struct{ b, t, vis, off int }
	rows := make([]rowInfo, 0, T)
	totalVis, maxVis := 0, 0
	for b := 0; b < B; b++ {
		r0, r1 := L.QueryStart[b], L.QueryStart[b+1]
		if r1 < r0 || L.Pos[b] < 0 {
			panic(fmt.Sprintf("cpu: DSAIndex sequence %d rows [%d, %d) at position %d", b, r0, r1, L.Pos[b]))
		}
		if r1 == r0 {
			continue
		}
		vis := (L.Pos[b] + r1 - r0) / kp // pools visible to the last row
		poolRows[b] = L.poolRows(nil, "DSAIndex", b, vis, kp, nslots)
		for t := r0; t < r1; t++ {
			v := (L.Pos[b] + t - r0 + 1) / kp
			rows = append(rows, rowInfo{b: b, t: t, vis: v})
			totalVis += v
			maxVis = max(maxVis, v)
		}
	}
	// Rows are handled in waves whose scores fit the buffer: first every
	// (block of rows, block of pools) is scored in parallel, then every row
	// selects its pools.
	scores := make([]float32, min(totalVis, max(dsaWaveScores, maxVis)))
	type item struct{ i, j, p0, p1 int } // rows[i:j] (one sequence), pools [p0, p1)
	type work struct {
		blk []float32 // gathered pooled keys [dsaPoolBlock, d] (16-bit pooled)
		tmp []float32 // q·pooled [Hi, dsaPoolBlock]
	}
	newWork := func() *work {
		wk := &work{tmp: make([]float32, Hi*dsaPoolBlock)}
		if pooled.DType() != npu.F32 {
			wk.blk = make([]float32, dsaPoolBlock*d)
		}
		return wk
	}
	var items []item
	for start := 0; start < len(rows); {
		end, off := start, 0
		for end < len(rows) && (end == start || off+rows[end].vis <= len(scores)) {
			rows[end].off = off
			off += rows[end].vis
			end++
		}
		items = items[:0]
		for i := start; i < end; {
			j := i + 1
			for j < end && j-i < dsaRowBlock && rows[j].b == rows[i].b {
				j++
			}
			for p0 := 0; p0 < rows[j-1].vis; p0 += dsaPoolBlock {
				items = append(items, item{i, j, p0, min(p0+dsaPoolBlock, rows[j-1].vis)})
			}
			i = j
		}
		attnWorkers(be, len(items), newWork, func(wk *work, it int) {
			x := items[it]
			idx := poolRows[rows[x.i].b][x.p0:x.p1]
			var src []float32
			if wk.blk != nil {
				attnGatherRows(pooled, d, idx, wk.blk)
				src, idx = wk.blk, nil
			} else {
				src = F32(pooled)
			}
			for _, r := range rows[x.i:x.j] {
				if r.vis <= x.p0 {
					continue
				}
				n := min(x.p1, r.vis) - x.p0
				attnNT(Hi, n, d, qs[r.t*Hi*d:], d, src, d, idx, wk.tmp, dsaPoolBlock, false)
				wt := ws[r.t*Hi : (r.t+1)*Hi]
				sc := scores[r.off+x.p0 : r.off+x.p0+n]
				for j := range sc {
					var s float32
					for h, wh := range wt {
						v := p.Scale * wk.tmp[h*dsaPoolBlock+j]
						if v < 0 {
							v = 0
						}
						s += wh * v
					}
					sc[j] = s
				}
			}
		})
		be.parallelFor(end-start, 4, func(lo, hi int) {
			order := make([]int32, 0, min(topk, maxVis))
			for _, r := range rows[start+lo : start+hi] {
				pos := L.Pos[r.b] + r.t - L.QueryStart[r.b]
				sel := dsaTopK(order[:0], scores[r.off:r.off+r.vis], min(topk, r.vis))
				row := outs[r.t*width : (r.t+1)*width]
				n := 0
				for _, i := range sel {
					for j := 0; j < kp; j++ {
						row[n] = i*int32(kp) + int32(j)
						n++
					}
				}
				if p.Tail {
					for s := r.vis * kp; s <= pos; s++ {
						row[n] = int32(s)
						n++
					}
				}
				for ; n < width; n++ {
					row[n] = -1
				}
			}
		})
		start = end
	}
}

// dsaBetter reports whether pool i (score si) ranks before pool j (score
// sj): higher score first, NaN below every number, ties to the lower index.
func dsaBetter(si, sj float32, i, j int32) bool {
	ni, nj := si != si, sj != sj
	switch {
	case ni != nj:
		return nj
	case !ni && si != sj:
		return si > sj
	}
	return i < j
}

// dsaTopK appends to dst the indices of the k best scores in rank order
// (dsaBetter) and returns it.
func dsaTopK(dst []int32, sc []float32, k int) []int32 {
	if k <= 0 {
		return dst
	}
	less := func(a, b int32) int { // rank order: better first
		if dsaBetter(sc[a], sc[b], a, b) {
			return -1
		}
		if a == b {
			return 0
		}
		return 1
	}
	if k >= len(sc) {
		for i := range sc {
			dst = append(dst, int32(i))
		}
		slices.SortFunc(dst, less)
		return dst
	}
	// Min-heap (worst at the root) of the best k seen so far.
	h := dst
	for i := range k {
		h = append(h, int32(i))
	}
	worse := func(a, b int32) bool { return dsaBetter(sc[b], sc[a], b, a) }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= k {
				return
			}
			c := l
			if r := l + 1; r < k && worse(h[r], h[l]) {
				c = r
			}
			if !worse(h[c], h[i]) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for i := k; i < len(sc); i++ {
		if dsaBetter(sc[i], sc[h[0]], int32(i), h[0]) {
			h[0] = int32(i)
			down(0)
		}
	}
	slices.SortFunc(h, less)
	return h
}
