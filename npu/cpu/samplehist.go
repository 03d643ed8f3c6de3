package cpu

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

var _ npu.SampleHistogrammer = (*Backend)(nil)

// histQueries checks SampleHist's and SampleBinMembers' common arguments
// and returns the rows' length V, the row index and the (m, invT) of each
// query.
func histQueries(op string, logits, rows, params *npu.Tensor) (V int, x []float32, idx []int32, m []float32, invT []float64) {
	if logits == nil || logits.Rank() != 2 || rows == nil || params == nil {
		panic(fmt.Sprintf("cpu: %s of logits %v, rows %v, params %v", op, logits, rows, params))
	}
	R, V := logits.Dim(0), logits.Dim(1)
	Q := rows.Numel()
	if params.Numel() != 2*Q {
		panic(fmt.Sprintf("cpu: %s params %v do not hold %dx2", op, params, Q))
	}
	idx, p := I32(rows), I64(params)
	m, invT = make([]float32, Q), make([]float64, Q)
	for j, r := range idx {
		if r < 0 || int(r) >= R {
			panic(fmt.Sprintf("cpu: %s query %d reads row %d of %d", op, j, r, R))
		}
		m[j] = float32(math.Float64frombits(uint64(p[2*j])))
		invT[j] = math.Float64frombits(uint64(p[2*j+1]))
	}
	return V, F32(logits), idx, m, invT
}

// SampleHist writes each query's histogram of q sums (hist I64
// [Q, npu.SampleHistBins]). See npu.SampleHistogrammer.
func (be *Backend) SampleHist(hist, logits, rows, params *npu.Tensor) {
	V, x, idx, m, invT := histQueries("SampleHist", logits, rows, params)
	Q := len(idx)
	if hist == nil || hist.Numel() != Q*npu.SampleHistBins {
		panic(fmt.Sprintf("cpu: SampleHist hist %v does not hold %dx%d", hist, Q, npu.SampleHistBins))
	}
	h := I64(hist)
	be.parallelFor(Q, 1, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			hj := h[j*npu.SampleHistBins : (j+1)*npu.SampleHistBins]
			clear(hj)
			mj, tj := m[j], invT[j]
			for _, v := range x[int(idx[j])*V : int(idx[j]+1)*V] {
				if b, q := npu.SampleBin(v, mj, tj); b >= 0 {
					hj[b] += int64(q)
				}
			}
		}
	})
}

// SampleBinMembers writes each query's bin members in id order and its
// counts. See npu.SampleHistogrammer.
func (be *Backend) SampleBinMembers(vals, ids, counts, logits, rows, params, bins *npu.Tensor) {
	V, x, idx, m, invT := histQueries("SampleBinMembers", logits, rows, params)
	Q := len(idx)
	if bins == nil || bins.Numel() != Q || counts == nil || counts.Numel() != 2*Q {
		panic(fmt.Sprintf("cpu: SampleBinMembers bins %v, counts %v for %d queries", bins, counts, Q))
	}
	C := 0
	var vv []float32
	var iv []int32
	if Q > 0 && vals != nil {
		C = vals.Numel() / Q
		if vals.Numel() != Q*C || ids == nil || ids.Numel() != Q*C {
			panic(fmt.Sprintf("cpu: SampleBinMembers outputs %v, %v for %d queries", vals, ids, Q))
		}
		vv, iv = F32(vals), I32(ids)
	}
	bn, cn := I32(bins), I32(counts)
	be.parallelFor(Q, 1, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			want := int(bn[j])
			var n, below int32
			if want >= 0 && want < npu.SampleHistBins {
				mj, tj := m[j], invT[j]
				for i, v := range x[int(idx[j])*V : int(idx[j]+1)*V] {
					b, _ := npu.SampleBin(v, mj, tj)
					switch {
					case b < 0 || b > want:
					case b < want:
						below++
					default:
						if int(n) < C {
							vv[j*C+int(n)], iv[j*C+int(n)] = v, int32(i)
						}
						n++
					}
				}
			}
			cn[2*j], cn[2*j+1] = n, below
		}
	})
}
