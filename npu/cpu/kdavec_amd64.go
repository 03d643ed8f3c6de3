package cpu

//go:noescape
func kdaGemm4AVX512(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, n int)

//go:noescape
func kdaGemm1AVX512(a *float32, b *float32, ldb int, c *float32, k, n int)

//go:noescape
func kdaDotNT4AVX512(a *float32, b *float32, ldb int, k int, c *float32)

// kdaGemmSIMD is c[i*ldc+j] += Σ_{p<k} a[i*lda+p] b[p*ldb+j] for i < m,
// j < n with the AVX-512 kernels; m, k > 0, n a positive multiple of 16.
// The caller checks the bounds.
func kdaGemmSIMD(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	i := 0
	for ; i+4 <= m; i += 4 {
		kdaGemm4AVX512(&a[i*lda], lda, &b[0], ldb, &c[i*ldc], ldc, k, n)
	}
	for ; i < m; i++ {
		kdaGemm1AVX512(&a[i*lda], &b[0], ldb, &c[i*ldc], k, n)
	}
}

// kdaNTSIMD is c[i*ldc+j] = Σ_{p<k} a[i*lda+p] b[j*ldb+p] for i < m,
// j < n&^3 (the first whole groups of 4 columns) with the AVX-512 kernel;
// k a positive multiple of 16. It returns the number of columns done. The
// caller checks the bounds.
func kdaNTSIMD(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) int {
	n4 := n &^ 3
	for i := 0; i < m; i++ {
		for j := 0; j < n4; j += 4 {
			kdaDotNT4AVX512(&a[i*lda], &b[j*ldb], ldb, k, &c[i*ldc+j])
		}
	}
	return n4
}
