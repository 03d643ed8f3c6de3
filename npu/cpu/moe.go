package cpu

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// Router computes noaux_tc MoE routing (sigmoid scores, optional
// group-limited selection on bias-corrected scores, weights from the
// unbiased scores). See npu.Ops.Router. Logits are accumulated in float64 so
// that near-ties are decided by the true scores rather than by rounding.
// Selected experts are written in descending order of biased score, ties to
// the lower expert index.
func (be *Backend) Router(weights, ids, x, gate, bias *npu.Tensor, p npu.RouterParams) {
	if x.Rank() != 2 || gate.Rank() != 2 || gate.Dim(1) != x.Dim(1) {
		panic(fmt.Sprintf("cpu: Router x %v gate %v", x, gate))
	}
	T, D, E, k := x.Dim(0), x.Dim(1), gate.Dim(0), p.TopK
	ng := max(p.NGroup, 1)
	if k < 1 || k > E || bias.Numel() != E || E%ng != 0 || (ng > 1 && (p.TopKGroup < 1 || p.TopKGroup > ng)) {
		panic(fmt.Sprintf("cpu: Router %d experts, bias %v, params %+v", E, bias, p))
	}
	if weights.DType() != npu.F32 || ids.DType() != npu.I32 || weights.Numel() != T*k || ids.Numel() != T*k {
		panic(fmt.Sprintf("cpu: Router outputs weights %v ids %v for %d tokens top-%d", weights, ids, T, k))
	}
	xs, ws, is := F32(x), F32(weights), I32(ids)
	gw := weightF32(gate)
	bs := weightF32(bias)
	per := E / ng
	be.parallelFor(T, 8, func(lo, hi int) {
		s := make([]float32, E)
		sb := make([]float32, E)
		order := make([]int, k)
		gscore := make([]float32, ng)
		gorder := make([]int, ng)
		for t := lo; t < hi; t++ {
			xt := xs[t*D : (t+1)*D]
			for e := range E {
				s[e] = sigmoid32(float32(mdlDot64(gw[e*D:(e+1)*D], xt)))
				sb[e] = s[e] + bs[e]
			}
			if ng > 1 && p.TopKGroup < ng {
				// Group score: sum of the two best biased scores of the group.
				for g := range ng {
					grp := sb[g*per : (g+1)*per]
					b1, b2 := float32(math.Inf(-1)), float32(math.Inf(-1))
					for _, v := range grp {
						if v > b1 {
							b1, b2 = v, b1
						} else if v > b2 {
							b2 = v
						}
					}
					if per == 1 {
						b2 = 0
					}
					gscore[g] = b1 + b2
					gorder[g] = g
				}
				topDesc(gorder, gscore)
				for _, g := range gorder[p.TopKGroup:] {
					for e := g * per; e < (g+1)*per; e++ {
						sb[e] = float32(math.Inf(-1))
					}
				}
			}
			topDesc(order, sb)
			w, id := ws[t*k:(t+1)*k], is[t*k:(t+1)*k]
			var sum float32
			for j := range k {
				e := order[j]
				id[j] = int32(e)
				w[j] = s[e]
				sum += s[e]
			}
			if p.Normalize {
				sum += 1e-20
				for j := range w {
					w[j] /= sum
				}
			}
			for j := range w {
				w[j] *= p.Scale
			}
		}
	})
}

// topDesc fills idx with the indices of the len(idx) largest values of v in
// descending order, ties to the lower index, NaN below every number.
func topDesc(idx []int, v []float32) {
	// ranks reports whether a ranks before b.
	ranks := func(a, b int) bool {
		va, vb := v[a], v[b]
		if va != va {
			return vb != vb && a < b
		}
		if vb != vb || va > vb {
			return true
		}
		return va == vb && a < b
	}
	cnt := 0
	for e := range v {
		if cnt == len(idx) && !ranks(e, idx[cnt-1]) {
			continue
		}
		i := min(cnt, len(idx)-1)
		for i > 0 && ranks(e, idx[i-1]) {
			idx[i] = idx[i-1]
			i--
		}
		idx[i] = e
		cnt = min(cnt+1, len(idx))
	}
}

// moeChunk bounds the tokens whose per-expert intermediates are held at
// once.
const moeChunk = 256

// MoE adds the routed experts' weighted outputs to out. See npu.Ops.MoE.
// Assignments are grouped by expert so each expert is one MatMul over its
// tokens (its weights are read once per chunk of tokens, through the
// blocked SIMD kernels); each token's expert outputs are then summed in
// ascending expert order (as transformers' index_add_ loop does) before
// being added to out. A limit <= 0 disables the SwiGLU clamp.
func (be *Backend) MoE(out, x, gateUp, down, weights, ids *npu.Tensor, limit float32) {
	if x.Rank() != 2 || gateUp.Rank() != 3 || down.Rank() != 3 {
		panic(fmt.Sprintf("cpu: MoE x %v gateUp %v down %v", x, gateUp, down))
	}
	D := x.Dim(1)
	E, I := gateUp.Dim(0), gateUp.Dim(1)/2
	if gateUp.Dim(1) != 2*I || gateUp.Dim(2) != D || down.Dim(0) != E || down.Dim(1) != D || down.Dim(2) != I {
		panic(fmt.Sprintf("cpu: MoE gateUp %v down %v for x %v", gateUp, down, x))
	}
	k := moeRouting("MoE", out, x, weights, ids)
	if k == 0 {
		return
	}
	be.moeDispatch("MoE", out, x, weights, ids, k, E, I, limit,
		func(e int, in, o *npu.Tensor) { be.MatMul(o, in, gateUp.Rows(e, e+1).Reshape(2*I, D)) },
		func(e int, in, o *npu.Tensor) { be.MatMul(o, in, down.Rows(e, e+1).Reshape(D, I)) })
}

// moeRouting checks out, weights and ids for x (op names the caller in
// panics) and returns the experts per token, 0 when there is nothing to
// route.
func moeRouting(op string, out, x, weights, ids *npu.Tensor) int {
	T, D := x.Dim(0), x.Dim(1)
	if out.Numel() != T*D || x.DType() != npu.F32 || weights.DType() != npu.F32 || ids.DType() != npu.I32 ||
		weights.Numel() != ids.Numel() || T > 0 && ids.Numel()%T != 0 {
		panic(fmt.Sprintf("cpu: %s out %v weights %v ids %v for x %v", op, out, weights, ids, x))
	}
	if T == 0 || ids.Numel() == 0 {
		return 0
	}
	return ids.Numel() / T
}

// moeDispatch is the expert-grouped dispatch MoE and MoEQ share, for k
// experts per token out of E with intermediate size I. Per chunk of
// tokens, the assignments are counting-sorted by expert (stable in token
// order) and the inputs gathered into consecutive rows; gateUp projects
// expert e's gathered inputs in into its gate | up rows o, the clamped
// SwiGLU follows, and down projects its SwiGLU rows in into its output
// rows o. Each token's expert outputs are then summed in ascending expert
// order and added to out. A limit <= 0 disables the clamp.
func (be *Backend) moeDispatch(op string, out, x, weights, ids *npu.Tensor, k, E, I int, limit float32,
	gateUp, down func(e int, in, o *npu.Tensor)) {
	T, D := x.Dim(0), x.Dim(1)
	lim := float32(math.Inf(1))
	if limit > 0 {
		lim = limit
	}
	os, xs, ws, is := F32(out), F32(x), F32(weights), I32(ids)
	for _, e := range is {
		if e < 0 || int(e) >= E {
			panic(fmt.Sprintf("cpu: %s expert id %d out of [0, %d)", op, e, E))
		}
	}
	rows := min(T, moeChunk) * k
	xg := temp(npu.F32, rows, D)   // inputs gathered by expert
	gu := temp(npu.F32, rows, 2*I) // gate | up projections
	h := temp(npu.F32, rows, I)    // clamped SwiGLU
	y := temp(npu.F32, rows, D)    // expert outputs
	xgs, gus, hs, ys := F32(xg), F32(gu), F32(h), F32(y)
	start := make([]int, E+1)
	row := make([]int32, rows) // assignment (token-in-chunk*k + j) -> row of xg
	for c0 := 0; c0 < T; c0 += moeChunk {
		c1 := min(c0+moeChunk, T)
		n := (c1 - c0) * k
		// Counting sort of the chunk's assignments by expert, stable in
		// token order.
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
		be.parallelFor(n, 16, func(lo, hi int) {
			for a := lo; a < hi; a++ {
				t := c0 + a/k
				copy(xgs[int(row[a])*D:int(row[a]+1)*D], xs[t*D:(t+1)*D])
			}
		})
		for e := range E {
			if r0, r1 := start[e], start[e+1]; r0 < r1 {
				gateUp(e, xg.Rows(r0, r1), gu.Rows(r0, r1))
			}
		}
		be.parallelFor(n, 8, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				g, u, o := gus[r*2*I:r*2*I+I], gus[r*2*I+I:(r+1)*2*I], hs[r*I:(r+1)*I]
				for i, gv := range g {
					o[i] = min(gv, lim)
				}
				siluRow(o, o)
				for i, uv := range u {
					o[i] *= max(min(uv, lim), -lim)
				}
			}
		})
		for e := range E {
			if r0, r1 := start[e], start[e+1]; r0 < r1 {
				down(e, h.Rows(r0, r1), y.Rows(r0, r1))
			}
		}
		// Per token: sum in ascending expert order, then add to out.
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
					yr := ys[r*D : (r+1)*D]
					for d := range acc {
						acc[d] += yr[d] * w
					}
				}
				o := os[t*D : (t+1)*D]
				for d := range o {
					o[d] += acc[d]
				}
			}
		})
	}
	for _, t := range []*npu.Tensor{xg, gu, h, y} {
		be.Free(t)
	}
}
