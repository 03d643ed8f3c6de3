package cpu

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// MoEQ is MoE with quantized experts (W8A8_DYNAMIC or W8A8_MXFP8, as
// vllm-ascend's fused MoE methods): assignments are grouped by expert,
// each expert's tokens go through its gate/up projection (activations
// quantized per token or per MX block), the clamped SwiGLU, and its down
// projection (the SwiGLU output quantized again), and each token's
// expert outputs are summed in ascending expert order and added to out.
// See npu.Ops.MoEQ.
func (be *Backend) MoEQ(out, x *npu.Tensor, gateUp, down *npu.QuantWeight, weights, ids *npu.Tensor, limit float32) {
	if x.Rank() != 2 || gateUp.Experts() == 0 || down.Experts() != gateUp.Experts() {
		panic(fmt.Sprintf("cpu: MoEQ x %v gateUp %v down %v", x, gateUp, down))
	}
	T, D := x.Dim(0), x.Dim(1)
	E, I := gateUp.Experts(), gateUp.N()/2
	if gateUp.N() != 2*I || gateUp.K() != D || down.N() != D || down.K() != I {
		panic(fmt.Sprintf("cpu: MoEQ gateUp %v down %v for x %v", gateUp, down, x))
	}
	for _, w := range []*npu.QuantWeight{gateUp, down} {
		if w.Scheme != npu.QW8A8Dynamic && w.Scheme != npu.QMXFP8 {
			panic(fmt.Sprintf("cpu: MoEQ expert weights %v: want W8A8_DYNAMIC or W8A8_MXFP8", w))
		}
	}
	if out.Numel() != T*D || x.DType() != npu.F32 || weights.DType() != npu.F32 || ids.DType() != npu.I32 ||
		weights.Numel() != ids.Numel() || T > 0 && ids.Numel()%T != 0 {
		panic(fmt.Sprintf("cpu: MoEQ out %v weights %v ids %v for x %v", out, weights, ids, x))
	}
	if T == 0 || ids.Numel() == 0 {
		return
	}
	pg, pd := be.prepared(gateUp), be.prepared(down)
	k := ids.Numel() / T
	lim := float32(math.Inf(1))
	if limit > 0 {
		lim = limit
	}
	os, xs, ws, is := F32(out), F32(x), F32(weights), I32(ids)
	for _, e := range is {
		if e < 0 || int(e) >= E {
			panic(fmt.Sprintf("cpu: MoEQ expert id %d out of [0, %d)", e, E))
		}
	}
	rows := min(T, moeChunk) * k
	xgs := make([]float32, rows*D) // inputs gathered by expert
	gus := make([]float32, rows*2*I)
	hs := make([]float32, rows*I)
	ys := make([]float32, rows*D)
	start := make([]int, E+1)
	row := make([]int32, rows)
	for c0 := 0; c0 < T; c0 += moeChunk {
		c1 := min(c0+moeChunk, T)
		n := (c1 - c0) * k
		clear(start)
		for a := range n {
			start[is[c0*k+a]+1]++
		}
		for e := range E {
			start[e+1] += start[e]
		}
		next := append([]int(nil), start[:E]...)
		for a := range n {
			e := is[c0*k+a]
			row[a] = int32(next[e])
			next[e]++
		}
		for a := range n {
			t := c0 + a/k
			copy(xgs[int(row[a])*D:int(row[a]+1)*D], xs[t*D:(t+1)*D])
		}
		for e := range E {
			r0, r1 := start[e], start[e+1]
			if r0 < r1 {
				be.matMulQ(pg, e, gateUp, gus[r0*2*I:r1*2*I], xgs[r0*D:r1*D], r1-r0)
			}
		}
		be.parallelFor(n, 8, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				g, u, o := gus[r*2*I:r*2*I+I], gus[r*2*I+I:(r+1)*2*I], hs[r*I:(r+1)*I]
				for i := range o {
					gv := min(g[i], lim)
					uv := max(min(u[i], lim), -lim)
					o[i] = gv * mdlSigmoid(gv) * uv
				}
			}
		})
		for e := range E {
			r0, r1 := start[e], start[e+1]
			if r0 < r1 {
				be.matMulQ(pd, e, down, ys[r0*D:r1*D], hs[r0*I:r1*I], r1-r0)
			}
		}
		be.parallelFor(c1-c0, 8, func(lo, hi int) {
			acc := make([]float32, D)
			order := make([]int, k)
			for tc := lo; tc < hi; tc++ {
				t := c0 + tc
				for j := range order {
					e, i := is[t*k+j], j
					for i > 0 && is[t*k+order[i-1]] > e {
						order[i] = order[i-1]
						i--
					}
					order[i] = j
				}
				clear(acc)
				for _, j := range order {
					w := ws[t*k+j]
					r := int(row[tc*k+j])
					for d, v := range ys[r*D : (r+1)*D] {
						acc[d] += v * w
					}
				}
				o := os[t*D : (t+1)*D]
				for d := range o {
					o[d] += acc[d]
				}
			}
		})
	}
}
