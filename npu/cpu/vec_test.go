package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// withVec runs f with the vector helper kernels switched to on (when the
// CPU has them) and off.
func withVec(t *testing.T, f func(t *testing.T)) {
	old := vecOn
	defer func() { vecOn = old }()
	for _, on := range []bool{true, false} {
		if on && !old {
			continue // not available (or NPUSERVE_CPU_SIMD=0)
		}
		vecOn = on
		name := "go"
		if on {
			name = "vec"
		}
		t.Run(name, f)
	}
}

// withVecSet runs f with the vector helper kernels switched to on.
func withVecSet(on bool, f func()) {
	old := vecOn
	vecOn = on
	defer func() { vecOn = old }()
	f()
}

// uniformFloats are n values uniform in [-1, 1).
func uniformFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// TestVecKDA runs the KDA tests (decode recurrence included) on both the
// AVX-512 helper path and the portable one.
func TestVecKDA(t *testing.T) {
	withVec(t, func(t *testing.T) {
		TestKDA(t)
		TestKDAContinuation(t)
	})
}

// TestVecBF16ToF32 checks the widening of bf16 (all lengths to 70, odd
// offsets, special values) on both paths.
func TestVecBF16ToF32(t *testing.T) {
	withVec(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		src := make([]uint16, 80)
		for i := range src {
			src[i] = uint16(r.Uint32())
		}
		src[3], src[17], src[40] = 0x7f80, 0xff80, 0x7fc1 // +Inf, -Inf, NaN
		b := make([]byte, 2*len(src))
		for i, h := range src {
			b[2*i], b[2*i+1] = byte(h), byte(h>>8)
		}
		for off := 0; off < 3; off++ {
			for n := 0; n+off <= 70; n++ {
				d := make([]float32, n)
				toF32(d, b[2*off:], npu.BF16)
				for i := range d {
					want := math.Float32frombits(uint32(src[off+i]) << 16)
					if math.Float32bits(d[i]) != math.Float32bits(want) {
						t.Fatalf("off %d n %d: d[%d] = %g, want %g", off, n, i, d[i], want)
					}
				}
			}
		}
	})
}

// TestSiluSIMD checks the AVX-512 silu kernel against silu32, bitwise, on
// odd sizes, special values and the whole exponent range.
func TestSiluSIMD(t *testing.T) {
	if !vecAVX512() {
		t.Skip("no AVX-512 helper kernels")
	}
	r := rand.New(rand.NewPCG(7, 7))
	var xs []float32
	for _, v := range []float32{0, -0.0, 1, -1, 20, -20, 87, -87, 88.7, -88.7, 103.9, -103.9, 104, -104, 150, -150,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, 1e-40, -1e-40} {
		xs = append(xs, v)
	}
	for range 100000 {
		xs = append(xs, float32(r.NormFloat64()*30))
	}
	for range 1000 {
		xs = append(xs, math.Float32frombits(r.Uint32()))
	}
	for _, n := range []int{1, 15, 16, 17, 33, 100, len(xs)} {
		src := xs[len(xs)-n:]
		got := make([]float32, n)
		siluRow(got, src)
		for i, x := range src {
			want := silu32(x)
			if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
				t.Fatalf("n=%d: silu(%g) = %g (%#x), want %g (%#x)", n, x, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
			}
		}
	}
	// In place.
	src := append([]float32(nil), xs...)
	siluRow(src, src)
	for i, x := range xs {
		if want := silu32(x); math.Float32bits(src[i]) != math.Float32bits(want) && !(src[i] != src[i] && want != want) {
			t.Fatalf("in place: silu(%g) = %g, want %g", x, src[i], want)
		}
	}
}

// TestKDAGemmSIMD compares the AVX-512 kernels of kdaGemm and kdaNT with
// the Go loops on odd sizes and strides.
func TestKDAGemmSIMD(t *testing.T) {
	if !vecAVX512() {
		t.Skip("no AVX-512 helper kernels")
	}
	r := rand.New(rand.NewPCG(3, 3))
	fill := func(n int) []float32 { return uniformFloats(r, n) }
	run := withVecSet
	near := func(t *testing.T, got, want []float32, what string) {
		t.Helper()
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s: element %d = %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	for _, m := range []int{1, 3, 4, 5, 9} {
		for _, n := range []int{16, 48, 80, 144} {
			for _, k := range []int{1, 3, 17, 64} {
				for _, acc := range []bool{false, true} {
					lda, ldb, ldc := k+3, n+5, n+7
					a, b, c0 := fill(m*lda), fill(k*ldb), fill(m*ldc)
					want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
					run(false, func() { kdaGemm(m, n, k, a, lda, b, ldb, want, ldc, acc) })
					run(true, func() { kdaGemm(m, n, k, a, lda, b, ldb, got, ldc, acc) })
					near(t, got, want, fmt.Sprintf("gemm m=%d n=%d k=%d acc=%v", m, n, k, acc))
				}
			}
		}
	}
	for _, m := range []int{1, 3, 8} {
		for _, n := range []int{1, 4, 5, 8, 11} {
			for _, k := range []int{16, 48, 128} {
				lda, ldb, ldc := k+1, k+2, n+3
				a, b, c0 := fill(m*lda), fill(n*ldb), fill(m*ldc)
				want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
				run(false, func() { kdaNT(m, n, k, a, lda, b, ldb, want, ldc) })
				run(true, func() { kdaNT(m, n, k, a, lda, b, ldb, got, ldc) })
				near(t, got, want, fmt.Sprintf("nt m=%d n=%d k=%d", m, n, k))
			}
		}
	}
}

// TestVecHC runs the mHC tests (widths that are and are not multiples of
// 16, stream counts that are and are not multiples of 4) on both paths.
func TestVecHC(t *testing.T) {
	withVec(t, func(t *testing.T) {
		TestHCPre(t)
		TestHCPostMean(t)
	})
}

// TestAttnNTSIMD compares attnNT and attnAccRows on the AVX-512 path with
// the Go loops on odd sizes, with and without row indices, and checks that
// equal rows give bitwise equal scores in every column slot (lone last
// columns included).
func TestAttnNTSIMD(t *testing.T) {
	if !vecAVX512() {
		t.Skip("no AVX-512 helper kernels")
	}
	r := rand.New(rand.NewPCG(9, 4))
	fill := func(n int) []float32 { return uniformFloats(r, n) }
	run := withVecSet
	for _, m := range []int{1, 3} {
		for _, n := range []int{1, 2, 3, 4, 5, 7, 9, 13} {
			for _, k := range []int{16, 48, 256} {
				for _, indexed := range []bool{false, true} {
					for _, acc := range []bool{false, true} {
						lda, ldb, ldc := k+3, k+5, n+2
						rows := n + 4
						a, b, c0 := fill(m*lda), fill(rows*ldb), fill(m*ldc)
						var bidx []int32
						if indexed {
							bidx = make([]int32, n)
							for j := range bidx {
								bidx[j] = int32(r.IntN(rows))
							}
							bidx[n-1] = bidx[0] // a duplicate, in the tail when n%4 != 0
						}
						got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
						run(true, func() { attnNT(m, n, k, a, lda, b, ldb, bidx, got, ldc, acc) })
						run(false, func() { attnNT(m, n, k, a, lda, b, ldb, bidx, want, ldc, acc) })
						for i := range want {
							if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
								t.Fatalf("m %d n %d k %d indexed %v acc %v: c[%d] = %g, want %g", m, n, k, indexed, acc, i, got[i], want[i])
							}
						}
						if indexed && !acc {
							for i := range m {
								if x, y := got[i*ldc], got[i*ldc+n-1]; math.Float32bits(x) != math.Float32bits(y) {
									t.Fatalf("m %d n %d k %d: equal rows score %g and %g", m, n, k, x, y)
								}
							}
						}
					}
				}
			}
		}
	}
	for _, n := range []int{1, 3, 4, 7, 13} {
		for _, k := range []int{16, 48, 256} {
			ldb := k + 5
			p, b, z0 := fill(n), fill(n*ldb), fill(k)
			got, want := append([]float32(nil), z0...), append([]float32(nil), z0...)
			run(true, func() { attnAccRows(got, p, n, k, b, ldb, nil) })
			run(false, func() { attnAccRows(want, p, n, k, b, ldb, nil) })
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("attnAccRows n %d k %d: z[%d] = %g, want %g", n, k, i, got[i], want[i])
				}
			}
		}
	}
}

// TestDot64SIMD compares mdlDot64 on the AVX-512 path with a sequential
// float64 sum for all lengths to 100.
func TestDot64SIMD(t *testing.T) {
	withVec(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(2, 8))
		a, b := make([]float32, 100), make([]float32, 103)
		for i := range a {
			a[i] = r.Float32()*2 - 1
		}
		for i := range b {
			b[i] = r.Float32()*2 - 1
		}
		for n := 0; n <= len(a); n++ {
			var want, mag float64
			for i := range n {
				want += float64(a[i]) * float64(b[3+i])
				mag += math.Abs(float64(a[i]) * float64(b[3+i]))
			}
			if got := mdlDot64(a[:n], b[3:3+n]); math.Abs(got-want) > 1e-14*(1+mag) {
				t.Fatalf("n %d: %g, want %g", n, got, want)
			}
		}
	})
}
