//go:build !amd64

package cpu

// vecOn is always false: there are no vector helper kernels here.
var vecOn bool

// vecAVX512 reports false: there are no vector helper kernels here.
func vecAVX512() bool { return false }

func bf16ToF32SIMD(d []float32, s []byte) int { return 0 }

func kdaMemSIMD(S, ke, mem []float32, k, v int) { panic("cpu: no kdaMemSIMD on this architecture") }

func kdaUpdateSIMD(S, e, kn, qn, delta, o []float32, k, v int) {
	panic("cpu: no kdaUpdateSIMD on this architecture")
}

func kdaGemmSIMD(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	panic("cpu: no kdaGemmSIMD on this architecture")
}

func kdaNTSIMD(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) int {
	panic("cpu: no kdaNTSIMD on this architecture")
}

func siluSIMD(dst, src []float32) int { return 0 }

func attnNTSIMD(m, n, k int, a []float32, lda int, b []float32, ldb int, bidx []int32, c []float32, ldc int, acc bool) {
	panic("cpu: no attnNTSIMD on this architecture")
}

func dot64SIMD(a, b []float32) (float64, int) { return 0, 0 }
