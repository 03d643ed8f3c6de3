package cpu

import "fmt"

// Vector helper kernels (vec_amd64.s), used when the AVX-512 MatMul
// kernels are active (so NPUSERVE_CPU_SIMD=0 keeps the portable Go paths).

//go:noescape
func cvtBF16F32AVX512(dst *float32, src *byte, n int)

//go:noescape
func siluAVX512(dst, src *float32, n int)

//go:noescape
func kdaMemAVX512(s *float32, ke *float32, k int, v int, mem *float32)

//go:noescape
func kdaUpdateAVX512(s, e, kn, qn, delta, o *float32, k, v int)

// vecOn says whether the AVX-512 helper kernels are in use: set once from
// the MatMul kernel choice (tests flip it to cover both paths).
var vecOn bool

func init() { vecOn = activeKernels == &avx512Kernels }

// vecAVX512 reports whether the AVX-512 helper kernels are in use.
func vecAVX512() bool { return vecOn }

// bf16ToF32SIMD widens the first len(d) &^ 15 bf16 values of s (2 bytes
// each) into d with AVX-512 and returns how many it converted.
func bf16ToF32SIMD(d []float32, s []byte) int {
	n := len(d) &^ 15
	if n == 0 {
		return 0
	}
	_ = s[2*n-1]
	cvtBF16F32AVX512(&d[0], &s[0], n)
	return n
}

// kdaMemSIMD is mem[:v] = Σ_d ke[d] S[d, :v] for S [k, v].
func kdaMemSIMD(S, ke, mem []float32, k, v int) {
	if k <= 0 || v <= 0 || v%16 != 0 {
		panic(fmt.Sprintf("cpu: kdaMemSIMD k=%d v=%d", k, v))
	}
	_, _, _ = S[k*v-1], ke[k-1], mem[v-1]
	kdaMemAVX512(&S[0], &ke[0], k, v, &mem[0])
}

// kdaUpdateSIMD is S[d,:] = S[d,:] e[d] + kn[d] delta, o = Σ_d qn[d] S[d,:].
func kdaUpdateSIMD(S, e, kn, qn, delta, o []float32, k, v int) {
	if k <= 0 || v <= 0 || v%16 != 0 {
		panic(fmt.Sprintf("cpu: kdaUpdateSIMD k=%d v=%d", k, v))
	}
	_, _, _, _, _, _ = S[k*v-1], e[k-1], kn[k-1], qn[k-1], delta[v-1], o[v-1]
	kdaUpdateAVX512(&S[0], &e[0], &kn[0], &qn[0], &delta[0], &o[0], k, v)
}

// siluSIMD writes dst[i] = silu32(src[i]) (bitwise equal) for the first
// len(dst) &^ 15 elements with AVX-512 and returns how many it did; dst may
// alias src.
func siluSIMD(dst, src []float32) int {
	n := len(dst) &^ 15
	if n == 0 {
		return 0
	}
	_ = src[n-1]
	siluAVX512(&dst[0], &src[0], n)
	return n
}

//go:noescape
func attnDot4AVX512(a, b0, b1, b2, b3 *float32, k int, c *float32)

//go:noescape
func dot64AVX512(a, b *float32, n int) float64

// attnNTSIMD is attnNT with the AVX-512 dot kernel; k a positive multiple
// of 16. A lone last column goes through the same kernel (its row in all
// four slots), so every element is computed the same way.
func attnNTSIMD(m, n, k int, a []float32, lda int, b []float32, ldb int, bidx []int32, c []float32, ldc int, acc bool) {
	if k <= 0 || k%16 != 0 {
		panic(fmt.Sprintf("cpu: attnNTSIMD k=%d", k))
	}
	row := func(j int) *float32 {
		r := j
		if bidx != nil {
			r = int(bidx[j])
		}
		return &b[r*ldb : r*ldb+k][0]
	}
	var s [4]float32
	for i := 0; i < m; i++ {
		a0 := &a[i*lda : i*lda+k][0]
		ci := c[i*ldc : i*ldc+n]
		j := 0
		for ; j+4 <= n; j += 4 {
			attnDot4AVX512(a0, row(j), row(j+1), row(j+2), row(j+3), k, &s[0])
			cc := ci[j : j+4 : j+4]
			if acc {
				cc[0] += s[0]
				cc[1] += s[1]
				cc[2] += s[2]
				cc[3] += s[3]
			} else {
				cc[0], cc[1], cc[2], cc[3] = s[0], s[1], s[2], s[3]
			}
		}
		for ; j < n; j++ {
			r := row(j)
			attnDot4AVX512(a0, r, r, r, r, k, &s[0])
			if acc {
				ci[j] += s[0]
			} else {
				ci[j] = s[0]
			}
		}
	}
}

// dot64SIMD is Σ a[i]·b[i] over the first len(a) &^ 31 elements,
// accumulated in float64, and how many elements it covered.
func dot64SIMD(a, b []float32) (float64, int) {
	n := len(a) &^ 31
	if n == 0 {
		return 0, 0
	}
	_ = b[n-1]
	return dot64AVX512(&a[0], &b[0], n), n
}
