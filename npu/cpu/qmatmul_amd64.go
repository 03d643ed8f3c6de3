package cpu

import (
	"fmt"

	"golang.org/x/sys/cpu"
)

// Int8 GEMM kernels (qmatmul_{vnni,avx512,avx2}_amd64.s). The wrappers
// below check that the slices cover what the kernels touch.

//go:noescape
func i8dotVNNI6x64(steps int, x, w *byte, c *int32, ldc int, acc int)

//go:noescape
func i8dotAVX512BW6x64(steps int, x, w *byte, c *int32, ldc int, acc int)

//go:noescape
func i8dotAVX2x6x16(steps int, x, w *byte, c *int32, ldc int, acc int)

func vnniPeak(iters int)

// CPU support for the int8 kernel sets.
var (
	hasAVX512BW = hasAVX512 && cpu.X86.HasAVX512BW
	hasVNNI     = hasAVX512BW && cpu.X86.HasAVX512VNNI
)

// i8Asm wraps an assembly kernel with bounds checks.
func i8Asm(name string, mr, nr, kg int, unsignedW, wideX bool, f func(steps int, x, w *byte, c *int32, ldc int, acc int)) *i8Kernels {
	xes := 1
	if wideX {
		xes = 2
	}
	return &i8Kernels{
		name: name, mr: mr, nr: nr, kg: kg, unsignedW: unsignedW, wideX: wideX,
		kernel: func(steps int, x, w []byte, c []int32, ldc int, acc bool) {
			if steps <= 0 || ldc < nr || len(x) < steps*mr*kg*xes || len(w) < steps*nr*kg || len(c) < (mr-1)*ldc+nr {
				panic(fmt.Sprintf("cpu: int8 kernel %s: %d steps, x %d, w %d, c %d (ldc %d)", name, steps, len(x), len(w), len(c), ldc))
			}
			a := 0
			if acc {
				a = 1
			}
			f(steps, &x[0], &w[0], &c[0], ldc, a)
		},
	}
}

var (
	i8VNNI   = i8Asm("vnni", 6, 64, 4, true, false, i8dotVNNI6x64)
	i8AVX512 = i8Asm("avx512", 6, 64, 2, false, true, i8dotAVX512BW6x64)
	i8AVX2   = i8Asm("avx2", 6, 16, 2, false, true, i8dotAVX2x6x16)
)

// supportedI8Kernels lists the int8 kernel sets this CPU can run, best
// last.
func supportedI8Kernels() []*i8Kernels {
	var ks []*i8Kernels
	if hasAVX2 {
		ks = append(ks, i8AVX2)
	}
	if hasAVX512BW {
		ks = append(ks, i8AVX512)
	}
	if hasVNNI {
		ks = append(ks, i8VNNI)
	}
	return ks
}

// int8Peak runs iters iterations of a register-only VPDPBUSD loop and
// returns the integer operations done (2 per multiply-add), 0 without
// VNNI.
func int8Peak(iters int) int64 {
	if !hasVNNI {
		return 0
	}
	vnniPeak(iters)
	return int64(iters) * 24 * 64 * 2
}
