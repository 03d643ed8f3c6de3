package cpu

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/npuserve/npuserve/npu"
)

// Small fp32 kernels shared by the attention ops (KDA, DSA indexer, sparse
// MLA). They are self-contained so that these ops do not depend on the
// generic ops of the package.

// attnNT computes the block product C = A·Bᵀ: for i < m, j < n
//
//	c[i*ldc+j] (+)= Σ_{p<k} a[i*lda+p] * B_j[p]
//
// where row j of B is b[r*ldb:], r = bidx[j] (or r = j when bidx is nil).
// With acc the sum is added to c, otherwise it replaces it. Every element is
// computed the same way whatever its place in the block, so equal inputs
// give bitwise equal outputs (the DSA indexer relies on this for its
// tie-break): with the AVX-512 kernels and k a multiple of 16, 16 lane sums
// (each a sequential fp32 FMA chain over p ≡ lane mod 16, increasing p)
// added in a fixed tree (attnDot4AVX512); otherwise one sequential fp32 sum
// over p in increasing order.
func attnNT(m, n, k int, a []float32, lda int, b []float32, ldb int, bidx []int32, c []float32, ldc int, acc bool) {
	if vecAVX512() && k > 0 && k%16 == 0 {
		attnNTSIMD(m, n, k, a, lda, b, ldb, bidx, c, ldc, acc)
		return
	}
	row := func(j int) []float32 { return attnRow(b, ldb, bidx, j, k) }
	for i := 0; i < m; i++ {
		a0 := a[i*lda : i*lda+k]
		ci := c[i*ldc : i*ldc+n]
		j := 0
		for ; j+4 <= n; j += 4 {
			b0, b1, b2, b3 := row(j), row(j+1), row(j+2), row(j+3)
			b0, b1, b2, b3 = b0[:len(a0)], b1[:len(a0)], b2[:len(a0)], b3[:len(a0)]
			var s0, s1, s2, s3 float32
			for p, x := range a0 {
				s0 += x * b0[p]
				s1 += x * b1[p]
				s2 += x * b2[p]
				s3 += x * b3[p]
			}
			cc := ci[j : j+4 : j+4]
			if acc {
				cc[0] += s0
				cc[1] += s1
				cc[2] += s2
				cc[3] += s3
			} else {
				cc[0], cc[1], cc[2], cc[3] = s0, s1, s2, s3
			}
		}
		for ; j < n; j++ {
			b0 := row(j)[:len(a0)]
			var s float32
			for p, x := range a0 {
				s += x * b0[p]
			}
			if acc {
				ci[j] += s
			} else {
				ci[j] = s
			}
		}
	}
}

// attnAccRows adds Σ_{j<n} p[j] * B_j[:k] to z, where row j of B is
// b[r*ldb:], r = bidx[j] (or j when bidx is nil): the probability-weighted
// sum of value rows.
func attnAccRows(z []float32, p []float32, n, k int, b []float32, ldb int, bidx []int32) {
	z = z[:k]
	if vecAVX512() && bidx == nil && n > 0 && k > 0 && k%16 == 0 {
		// z[i] += Σ_j p[j] b[j*ldb+i] as 16-lane fp32 FMA chains over j.
		_, _ = p[n-1], b[(n-1)*ldb+k-1]
		kdaGemmSIMD(1, k, n, p, 0, b, ldb, z, 0)
		return
	}
	row := func(j int) []float32 { return attnRow(b, ldb, bidx, j, k) }
	j := 0
	for ; j+4 <= n; j += 4 {
		b0, b1, b2, b3 := row(j), row(j+1), row(j+2), row(j+3)
		b0, b1, b2, b3 = b0[:len(z)], b1[:len(z)], b2[:len(z)], b3[:len(z)]
		p0, p1, p2, p3 := p[j], p[j+1], p[j+2], p[j+3]
		for i := range z {
			z[i] += p0*b0[i] + p1*b1[i] + p2*b2[i] + p3*b3[i]
		}
	}
	for ; j < n; j++ {
		b0 := row(j)[:len(z)]
		p0 := p[j]
		for i := range z {
			z[i] += p0 * b0[i]
		}
	}
}

// attnTranspose writes dst[j*ldd+i] = src[i*lds+j] for i < m, j < n.
func attnTranspose(m, n int, src []float32, lds int, dst []float32, ldd int) {
	for i := 0; i < m; i++ {
		s := src[i*lds : i*lds+n]
		for j, x := range s {
			dst[j*ldd+i] = x
		}
	}
}

// attnFloat panics unless t is F32, BF16 or F16.
func attnFloat(name string, t *npu.Tensor) {
	switch t.DType() {
	case npu.F32, npu.BF16, npu.F16:
	default:
		panic(fmt.Sprintf("cpu: %s must be F32, BF16 or F16, got %v", name, t))
	}
}

// attnGatherRows converts rows idx[j] (each of size n) of a float tensor into
// dst[j*n:], for every j.
func attnGatherRows(t *npu.Tensor, n int, idx []int32, dst []float32) {
	switch t.DType() {
	case npu.F32:
		src := F32(t)
		for j, r := range idx {
			copy(dst[j*n:(j+1)*n], src[int(r)*n:int(r)*n+n])
		}
	case npu.BF16:
		src := U16(t)
		for j, r := range idx {
			s, d := src[int(r)*n:int(r)*n+n], dst[j*n:(j+1)*n]
			for i, h := range s {
				d[i] = npu.BF16ToF32(h)
			}
		}
	case npu.F16:
		src := U16(t)
		for j, r := range idx {
			s, d := src[int(r)*n:int(r)*n+n], dst[j*n:(j+1)*n]
			for i, h := range s {
				d[i] = npu.F16ToF32(h)
			}
		}
	default:
		panic(fmt.Sprintf("cpu: want a float tensor, got %v", t))
	}
}

// attnVector returns the n elements of a float tensor (a bias or per-head
// parameter vector) as fp32.
func attnVector(name string, t *npu.Tensor, n int) []float32 {
	attnFloat(name, t)
	if t.Numel() != n {
		panic(fmt.Sprintf("cpu: %s has %d elements, want %d (%v)", name, t.Numel(), n, t))
	}
	return rowF32(t, 0, n, make([]float32, n))
}

// attnExp is exp in float64, rounded to fp32.
func attnExp(x float64) float32 { return float32(math.Exp(x)) }

// attnWorkers runs n work items over up to be.threads goroutines, items
// handed out dynamically in index order (callers sort items by descending
// cost). Each worker calls newWorker once for its scratch state, then work
// for each item it takes.
func attnWorkers[W any](be *Backend, n int, newWorker func() W, work func(w W, item int)) {
	if n <= 0 {
		return
	}
	workers := min(be.threads, n)
	if workers <= 1 {
		w := newWorker()
		for i := 0; i < n; i++ {
			work(w, i)
		}
		return
	}
	var next atomic.Int64
	be.parallelFor(workers, 1, func(lo, hi int) {
		w := newWorker()
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			work(w, i)
		}
	})
}

// attnRow is row j of b (row bidx[j] when bidx is set), k wide.
func attnRow(b []float32, ldb int, bidx []int32, j, k int) []float32 {
	r := j
	if bidx != nil {
		r = int(bidx[j])
	}
	return b[r*ldb : r*ldb+k]
}
