package cpu

import (
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
