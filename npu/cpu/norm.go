package cpu

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// normGroups validates a grouped normalisation of x into out with groups of
// n elements and returns the number of groups.
func normGroups(op string, out, x *npu.Tensor, n int) int {
	if n <= 0 || x.Numel()%n != 0 {
		panic(fmt.Sprintf("cpu: %s group size %d does not divide x %v", op, n, x))
	}
	if out.Numel() != x.Numel() {
		panic(fmt.Sprintf("cpu: %s out %v does not match x %v", op, out, x))
	}
	return x.Numel() / n
}

// invRMS returns 1/sqrt(mean(x^2)+eps), with the sum of squares
// accumulated in float64.
func invRMS(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(float64(float32(ss/float64(len(x)))+eps)))
}

// RMSNorm normalises each group of n = w.Numel() elements (the last
// dimension when w is nil, unweighted): y = x * rsqrt(mean(x^2) + eps) * w.
// out may alias x.
func (be *Backend) RMSNorm(out, x, w *npu.Tensor, eps float32) {
	var n int
	var wv []float32
	if w != nil {
		n, wv = w.Numel(), weightF32(w)
	} else if x.Rank() > 0 {
		n = x.Dim(-1)
	}
	groups := normGroups("RMSNorm", out, x, n)
	o, xv := F32(out), F32(x)
	be.parallelFor(groups, max(1, elemGrain/n), func(lo, hi int) {
		for g := lo; g < hi; g++ {
			xs, os := xv[g*n:(g+1)*n], o[g*n:(g+1)*n]
			r := invRMS(xs, eps)
			if wv == nil {
				for i, v := range xs {
					os[i] = v * r
				}
				continue
			}
			for i, v := range xs {
				os[i] = v * r * wv[i]
			}
		}
	})
}

// RMSNormGated is RMSNorm over groups of n = w.Numel() elements, times
// sigmoid(gate) (gate has x's shape). out may alias x.
func (be *Backend) RMSNormGated(out, x, gate, w *npu.Tensor, eps float32) {
	if w == nil {
		panic("cpu: RMSNormGated needs a weight")
	}
	n := w.Numel()
	groups := normGroups("RMSNormGated", out, x, n)
	if gate.Numel() != x.Numel() {
		panic(fmt.Sprintf("cpu: RMSNormGated gate %v does not match x %v", gate, x))
	}
	o, xv, gv, wv := F32(out), F32(x), F32(gate), weightF32(w)
	be.parallelFor(groups, max(1, elemGrain/4/n), func(lo, hi int) {
		for g := lo; g < hi; g++ {
			xs, gs, os := xv[g*n:(g+1)*n], gv[g*n:(g+1)*n], o[g*n:(g+1)*n]
			r := invRMS(xs, eps)
			for i, v := range xs {
				os[i] = v * r * wv[i] * sigmoid32(gs[i])
			}
		}
	})
}

// LayerNorm normalises groups of n = w.Numel() elements:
// y = (x - mean) * rsqrt(var + eps) * w + b (b may be nil; var is the
// biased variance). out may alias x.
func (be *Backend) LayerNorm(out, x, w, b *npu.Tensor, eps float32) {
	if w == nil {
		panic("cpu: LayerNorm needs a weight")
	}
	n := w.Numel()
	groups := normGroups("LayerNorm", out, x, n)
	var bv []float32
	if b != nil {
		if b.Numel() != n {
			panic(fmt.Sprintf("cpu: LayerNorm bias %v does not match weight %v", b, w))
		}
		bv = weightF32(b)
	}
	o, xv, wv := F32(out), F32(x), weightF32(w)
	be.parallelFor(groups, max(1, elemGrain/n), func(lo, hi int) {
		for g := lo; g < hi; g++ {
			xs, os := xv[g*n:(g+1)*n], o[g*n:(g+1)*n]
			var s float64
			for _, v := range xs {
				s += float64(v)
			}
			mean := s / float64(n)
			var ss float64
			for _, v := range xs {
				d := float64(v) - mean
				ss += d * d
			}
			m := float32(mean)
			r := float32(1 / math.Sqrt(float64(float32(ss/float64(n))+eps)))
			for i, v := range xs {
				y := (v - m) * r * wv[i]
				if bv != nil {
					y += bv[i]
				}
				os[i] = y
			}
		}
	})
}

// L2Norm divides each group of n elements by sqrt(sum(x^2) + eps). out may
// alias x.
func (be *Backend) L2Norm(out, x *npu.Tensor, n int, eps float32) {
	groups := normGroups("L2Norm", out, x, n)
	o, xv := F32(out), F32(x)
	be.parallelFor(groups, max(1, elemGrain/n), func(lo, hi int) {
		for g := lo; g < hi; g++ {
			xs, os := xv[g*n:(g+1)*n], o[g*n:(g+1)*n]
			var ss float64
			for _, v := range xs {
				ss += float64(v) * float64(v)
			}
			r := float32(1 / math.Sqrt(float64(float32(ss))+float64(eps)))
			for i, v := range xs {
				os[i] = v * r
			}
		}
	})
}
