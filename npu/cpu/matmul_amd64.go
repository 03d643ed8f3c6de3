package cpu

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
	"golang.org/x/sys/cpu"
)

// Assembly kernels (matmul_amd64.s). Callers guarantee the pointed-to
// memory covers what the kernel touches; the wrappers below check it.

//go:noescape
func dot4x6AVX512(kv int, xp, wp, tile *float32)

//go:noescape
func dot3x4AVX2(kv int, xp, wp, tile *float32)

//go:noescape
func packF32x16AVX512(dst *float32, stride int, src *byte, n int)

//go:noescape
func packBF16x16AVX512(dst *float32, stride int, src *byte, n int)

//go:noescape
func packF16x16AVX512(dst *float32, stride int, src *byte, n int)

//go:noescape
func packF32x8AVX2(dst *float32, stride int, src *byte, n int)

//go:noescape
func packBF16x8AVX2(dst *float32, stride int, src *byte, n int)

//go:noescape
func packF16x8AVX2(dst *float32, stride int, src *byte, n int)

//go:noescape
func gemv4F32AVX512(x *float32, w *byte, ldw int, k int, out *[4]float32)

//go:noescape
func gemv4BF16AVX512(x *float32, w *byte, ldw int, k int, out *[4]float32)

//go:noescape
func gemv4BF16PfAVX512(x *float32, w *byte, ldw int, k int, pf int, out *[4]float32)

//go:noescape
func gemv4F16AVX512(x *float32, w *byte, ldw int, k int, out *[4]float32)

//go:noescape
func gemv4F32AVX2(x *float32, w *byte, ldw int, k int, out *[4]float32)

//go:noescape
func gemv4BF16AVX2(x *float32, w *byte, ldw int, k int, out *[4]float32)

//go:noescape
func gemv4F16AVX2(x *float32, w *byte, ldw int, k int, out *[4]float32)

//go:noescape
func gemm4x4F32AVX512(x *float32, ldx int, w *byte, ldw int, k int, out *[16]float32)

//go:noescape
func gemm4x4BF16AVX512(x *float32, ldx int, w *byte, ldw int, k int, out *[16]float32)

//go:noescape
func gemm4x4F16AVX512(x *float32, ldx int, w *byte, ldw int, k int, out *[16]float32)

// prefetchLines hints that the lines consecutive 64-byte lines from p will
// be read soon (a hint: p need not be valid memory).
//
//go:noescape
func prefetchLines(p *byte, lines int)

func fmaPeakAVX512(iters int)

func fmaPeakAVX2(iters int)

// hasAVX2 and hasAVX512 say which kernel sets the CPU (and OS) support.
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F
)

// avx2Kernels: 3x4 tile of 8-float chunks (12 ymm accumulators).
var avx2Kernels = matmulKernels{
	name: "avx2", mr: 3, nr: 4, vl: 8,
	dot: func(kv int, xp, wp, tile []float32) {
		_, _, _ = xp[kv*3*8-1], wp[kv*4*8-1], tile[3*4-1]
		dot3x4AVX2(kv, &xp[0], &wp[0], &tile[0])
	},
	pack: func(dst []float32, stride int, src []byte, dt npu.DType, n int) {
		packSIMD(dst, stride, src, dt, n, 8, packF32x8AVX2, packBF16x8AVX2, packF16x8AVX2)
	},
	gemv4: func(x []float32, w []byte, dt npu.DType, ldw, k int, out *[4]float32) {
		gemv4SIMD(x, w, dt, ldw, k, 8, out, gemv4F32AVX2, gemv4BF16AVX2, gemv4F16AVX2)
	},
}

// avx512Kernels: 4x6 tile of 16-float chunks (24 zmm accumulators).
var avx512Kernels = matmulKernels{
	name: "avx512", mr: 4, nr: 6, vl: 16,
	dot: func(kv int, xp, wp, tile []float32) {
		_, _, _ = xp[kv*4*16-1], wp[kv*6*16-1], tile[4*6-1]
		dot4x6AVX512(kv, &xp[0], &wp[0], &tile[0])
	},
	pack: func(dst []float32, stride int, src []byte, dt npu.DType, n int) {
		packSIMD(dst, stride, src, dt, n, 16, packF32x16AVX512, packBF16x16AVX512, packF16x16AVX512)
	},
	gemv4: func(x []float32, w []byte, dt npu.DType, ldw, k int, out *[4]float32) {
		if dt == npu.BF16 && 4*ldw*2 <= gemvGroupPrefetchMax {
			// Rows short enough that in-row prefetching never gets ahead
			// of a row's start: prefetch the next 4-row group instead (a
			// hint, so reaching past w is harmless).
			if k <= 0 || k%16 != 0 || ldw < k {
				panic(fmt.Sprintf("cpu: gemv4 k=%d ldw=%d", k, ldw))
			}
			_, _ = x[k-1], w[(3*ldw+k)*2-1]
			gemv4BF16PfAVX512(&x[0], &w[0], ldw, k, 4*ldw*2, out)
			return
		}
		gemv4SIMD(x, w, dt, ldw, k, 16, out, gemv4F32AVX512, gemv4BF16AVX512, gemv4F16AVX512)
	},
	small4x4: func(x []float32, ldx int, w []byte, dt npu.DType, ldw, k int, out *[16]float32) {
		if k <= 0 || k%16 != 0 || ldw < k || ldx < k {
			panic(fmt.Sprintf("cpu: small4x4 k=%d ldx=%d ldw=%d", k, ldx, ldw))
		}
		_, _ = x[3*ldx+k-1], w[(3*ldw+k)*dt.Size()-1]
		switch dt {
		case npu.F32:
			gemm4x4F32AVX512(&x[0], ldx, &w[0], ldw, k, out)
		case npu.BF16:
			gemm4x4BF16AVX512(&x[0], ldx, &w[0], ldw, k, out)
		case npu.F16:
			gemm4x4F16AVX512(&x[0], ldx, &w[0], ldw, k, out)
		default:
			panic(fmt.Sprintf("cpu: small4x4 of %v", dt))
		}
	},
}

// gemvGroupPrefetchMax is the largest 4-row group (bytes) whose successor
// the BF16 AVX-512 GEMV prefetches (beyond it, 512 bytes ahead in each row).
const gemvGroupPrefetchMax = 16 << 10

type packFunc func(dst *float32, stride int, src *byte, n int)

// packSIMD bounds-checks and runs a pack kernel for chunks of vl.
func packSIMD(dst []float32, stride int, src []byte, dt npu.DType, n, vl int, f32, bf16, f16 packFunc) {
	if n <= 0 {
		return
	}
	_, _ = dst[(n-1)*stride+vl-1], src[n*vl*dt.Size()-1]
	switch dt {
	case npu.F32:
		f32(&dst[0], stride, &src[0], n)
	case npu.BF16:
		bf16(&dst[0], stride, &src[0], n)
	case npu.F16:
		f16(&dst[0], stride, &src[0], n)
	default:
		panic(fmt.Sprintf("cpu: cannot pack %v", dt))
	}
}

type gemv4Func func(x *float32, w *byte, ldw int, k int, out *[4]float32)

// gemv4SIMD bounds-checks and runs a matrix-vector kernel.
func gemv4SIMD(x []float32, w []byte, dt npu.DType, ldw, k, vl int, out *[4]float32, f32, bf16, f16 gemv4Func) {
	if k <= 0 || k%vl != 0 || ldw < k {
		panic(fmt.Sprintf("cpu: gemv4 k=%d ldw=%d", k, ldw))
	}
	_, _ = x[k-1], w[(3*ldw+k)*dt.Size()-1]
	switch dt {
	case npu.F32:
		f32(&x[0], &w[0], ldw, k, out)
	case npu.BF16:
		bf16(&x[0], &w[0], ldw, k, out)
	case npu.F16:
		f16(&x[0], &w[0], ldw, k, out)
	default:
		panic(fmt.Sprintf("cpu: gemv4 of %v", dt))
	}
}

// supportedSIMDKernels lists the assembly kernel sets this CPU can run,
// best last.
func supportedSIMDKernels() []*matmulKernels {
	var ks []*matmulKernels
	if hasAVX2 {
		ks = append(ks, &avx2Kernels)
	}
	if hasAVX512 {
		ks = append(ks, &avx512Kernels)
	}
	return ks
}

// fmaPeakISAs lists the FMA peak loops this CPU can run.
func fmaPeakISAs() []fmaPeakLoop {
	var l []fmaPeakLoop
	if hasAVX2 {
		l = append(l, fmaPeakLoop{"avx2", func(iters int) int64 { fmaPeakAVX2(iters); return int64(iters) * 12 * 8 * 2 }})
	}
	if hasAVX512 {
		l = append(l, fmaPeakLoop{"avx512", func(iters int) int64 { fmaPeakAVX512(iters); return int64(iters) * 24 * 16 * 2 }})
	}
	return l
}

// fmaPeak runs iters iterations of a register-only FMA loop with the
// widest vectors available and returns the floating-point operations done
// (0 without AVX2/FMA).
func fmaPeak(iters int) int64 {
	switch {
	case hasAVX512:
		fmaPeakAVX512(iters)
		return int64(iters) * 24 * 16 * 2
	case hasAVX2:
		fmaPeakAVX2(iters)
		return int64(iters) * 12 * 8 * 2
	}
	return 0
}
