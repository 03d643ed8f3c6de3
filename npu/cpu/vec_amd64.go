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
