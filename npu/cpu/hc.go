package cpu

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// mHC (manifold-constrained hyper-connections) ops: the residual stream of
// glm5_next is n parallel copies of the hidden state; every sublayer reads a
// weighted collapse of them (HCPre) and writes back a mix (HCPost); the
// final norm reads their mean (HCMean).

// HCPre computes, per token, the mHC mixing weights from the RMS-normalised
// flattened streams and collapses the streams into the sublayer input. See
// npu.Ops.HCPre. The projection is one MatMul over all tokens (fp32
// accumulation, like the reference's F.linear); the Sinkhorn iteration
// runs in float32 in the reference's order of operations.
func (be *Backend) HCPre(collapsed, post, comb, x, fn, base, scale *npu.Tensor, p npu.HCParams) {
	n := p.Streams
	if n < 1 || x.Rank() != 3 || x.Dim(1) != n {
		panic(fmt.Sprintf("cpu: HCPre x %v with %d streams", x, n))
	}
	T, D := x.Dim(0), x.Dim(2)
	mix := (2 + n) * n
	if fn.Numel() != mix*n*D || fn.Dim(0) != mix || base.Numel() != mix || scale.Numel() != 3 {
		panic(fmt.Sprintf("cpu: HCPre fn %v base %v scale %v for %d streams of %d", fn, base, scale, n, D))
	}
	if collapsed.Numel() != T*D || post.Numel() != T*n || comb.Numel() != T*n*n {
		panic(fmt.Sprintf("cpu: HCPre outputs collapsed %v post %v comb %v for x %v", collapsed, post, comb, x))
	}
	xs, cs, ps, ms := F32(x), F32(collapsed), F32(post), F32(comb)
	bs := weightF32(base)
	sc := weightF32(scale)
	nD := n * D
	eps := p.Eps
	// The mixing logits of every token in one (SIMD) matmul; the RMS
	// normalisation is a per-token scalar applied afterwards.
	mt := temp(npu.F32, T, mix)
	defer be.Free(mt)
	be.MatMul(mt, x.Reshape(T, nD), fn.Reshape(mix, nD))
	mall := F32(mt)
	simd := vecAVX512() && D%16 == 0
	be.parallelFor(T, 4, func(lo, hi int) {
		pre := make([]float32, n)
		z := make([]float32, n*n)
		for t := lo; t < hi; t++ {
			xt := xs[t*nD : (t+1)*nD]
			ss := mdlDot64(xt, xt)
			r := float32(1 / math.Sqrt(ss/float64(nD)+float64(p.RMSEps)))
			m := mall[t*mix : (t+1)*mix]
			for k := range m {
				m[k] *= r
			}
			for i := range n {
				pre[i] = sigmoid32(m[i]*sc[0]+bs[i]) + eps
				ps[t*n+i] = 2 * sigmoid32(m[n+i]*sc[1]+bs[n+i])
			}
			for k := range n * n {
				z[k] = m[2*n+k]*sc[2] + bs[2*n+k]
			}
			hcSinkhorn(z, n, p.SinkhornIters, eps)
			copy(ms[t*n*n:(t+1)*n*n], z)
			out := cs[t*D : (t+1)*D]
			if simd {
				// out = Σ_i pre[i] x_i as 16-lane fp32 FMA chains over i.
				clear(out)
				kdaGemmSIMD(1, D, n, pre, 0, xt, D, out, 0)
				continue
			}
			x0 := xt[:D]
			for d := range out {
				out[d] = pre[0] * x0[d]
			}
			for i := 1; i < n; i++ {
				pi, xi := pre[i], xt[i*D:(i+1)*D]
				for d := range out {
					out[d] += pi * xi[d]
				}
			}
		}
	})
}

// hcSinkhorn turns the n×n logits z (row-major) in place into the mHC
// combination matrix: row softmax plus eps, then a column normalisation,
// then iters-1 rounds of row and column normalisation (each sum plus eps).
func hcSinkhorn(z []float32, n, iters int, eps float32) {
	for i := range n {
		row := z[i*n : (i+1)*n]
		mx := row[0]
		for _, v := range row[1:] {
			mx = max(mx, v)
		}
		var s float32
		for j, v := range row {
			e := float32(math.Exp(float64(v - mx)))
			row[j] = e
			s += e
		}
		for j := range row {
			row[j] = row[j]/s + eps
		}
	}
	cols := func() {
		for j := range n {
			var s float32
			for i := range n {
				s += z[i*n+j]
			}
			s += eps
			for i := range n {
				z[i*n+j] /= s
			}
		}
	}
	cols()
	for it := 1; it < iters; it++ {
		for i := range n {
			row := z[i*n : (i+1)*n]
			var s float32
			for _, v := range row {
				s += v
			}
			s += eps
			for j := range row {
				row[j] /= s
			}
		}
		cols()
	}
}

// HCPost writes the next streams: out[t, j] = post[t, j]*y[t] +
// sum_i comb[t, i, j]*x[t, i]. See npu.Ops.HCPost.
func (be *Backend) HCPost(out, y, post, comb, x *npu.Tensor) {
	if x.Rank() != 3 {
		panic(fmt.Sprintf("cpu: HCPost x %v is not [T, n, D]", x))
	}
	T, n, D := x.Dim(0), x.Dim(1), x.Dim(2)
	if out.Numel() != T*n*D || y.Numel() != T*D || post.Numel() != T*n || comb.Numel() != T*n*n {
		panic(fmt.Sprintf("cpu: HCPost out %v y %v post %v comb %v for x %v", out, y, post, comb, x))
	}
	os, ys, ps, cs, xs := F32(out), F32(y), F32(post), F32(comb), F32(x)
	if vecAVX512() && D%16 == 0 {
		// out[t] = combᵀ x[t] + post ⊗ y[t]: two small GEMMs per token with
		// the AVX-512 kernels (fp32 FMA chains over i, then + post·y).
		be.parallelFor(T, 8, func(lo, hi int) {
			cT := make([]float32, n*n)
			for t := lo; t < hi; t++ {
				ct := cs[t*n*n : (t+1)*n*n]
				for i := range n {
					for j := range n {
						cT[j*n+i] = ct[i*n+j]
					}
				}
				ot := os[t*n*D : (t+1)*n*D]
				clear(ot)
				kdaGemmSIMD(n, D, n, cT, n, xs[t*n*D:(t+1)*n*D], D, ot, D)
				kdaGemmSIMD(n, D, 1, ps[t*n:(t+1)*n], 1, ys[t*D:(t+1)*D], D, ot, D)
			}
		})
		return
	}
	be.parallelFor(T, 8, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			yt := ys[t*D : (t+1)*D]
			xt := xs[t*n*D : (t+1)*n*D]
			ct := cs[t*n*n : (t+1)*n*n]
			for j := range n {
				o := os[(t*n+j)*D : (t*n+j+1)*D]
				c0, x0 := ct[j], xt[:D]
				for d := range o {
					o[d] = c0 * x0[d]
				}
				for i := 1; i < n; i++ {
					ci, xi := ct[i*n+j], xt[i*D:(i+1)*D]
					for d := range o {
						o[d] += ci * xi[d]
					}
				}
				pj := ps[t*n+j]
				for d := range o {
					o[d] += pj * yt[d]
				}
			}
		}
	})
}

// HCMean writes out[t] = mean of the n streams of x[t] (the final collapse
// of glm5_next, an unweighted mean). See npu.Ops.HCMean.
func (be *Backend) HCMean(out, x *npu.Tensor) {
	if x.Rank() != 3 {
		panic(fmt.Sprintf("cpu: HCMean x %v is not [T, n, D]", x))
	}
	T, n, D := x.Dim(0), x.Dim(1), x.Dim(2)
	if out.Numel() != T*D {
		panic(fmt.Sprintf("cpu: HCMean out %v for x %v", out, x))
	}
	os, xs := F32(out), F32(x)
	inv := float32(n)
	be.parallelFor(T, 16, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o := os[t*D : (t+1)*D]
			xt := xs[t*n*D : (t+1)*n*D]
			copy(o, xt[:D])
			for i := 1; i < n; i++ {
				xi := xt[i*D : (i+1)*D]
				for d := range o {
					o[d] += xi[d]
				}
			}
			for d := range o {
				o[d] /= inv
			}
		}
	})
}

// mdlDot64 is the dot product of a and b accumulated in float64, for the small
// projections whose results feed discrete choices (mHC mixing, routing).
func mdlDot64(a, b []float32) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	if vecAVX512() {
		// The first len(a) &^ 31 elements in 8-lane float64 FMA chains.
		s0, i = dot64SIMD(a, b)
	}
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}
