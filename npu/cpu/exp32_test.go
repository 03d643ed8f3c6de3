package cpu

import (
	"math"
	"testing"
)

// ulpDiff is the distance between two finite non-negative float32 values in
// units in the last place (counting representable values between them).
func ulpDiff(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	if d < 0 {
		d = -d
	}
	return d
}

// sweep32 calls f on every stride-th float32 between lo and hi (both
// signs handled by walking the bit patterns) plus the endpoints.
func sweep32(lo, hi float32, stride uint32, f func(x float32)) {
	walk := func(a, b float32) { // 0 <= a <= b, or b <= a <= 0 by magnitude
		ua, ub := math.Float32bits(a), math.Float32bits(b)
		if ua > ub {
			ua, ub = ub, ua
		}
		for u := uint64(ua); u <= uint64(ub); u += uint64(stride) {
			f(math.Float32frombits(uint32(u)))
		}
		f(b)
	}
	if lo < 0 {
		walk(float32(math.Copysign(0, -1)), lo)
	}
	if hi > 0 {
		walk(0, hi)
	}
}

// TestExp32Accuracy checks exp32 against the correctly rounded float32 of
// math.Exp: at most 2 ulp for normal results, at most 1 ulp of the
// subnormal spacing for subnormal results, plus the special values.
func TestExp32Accuracy(t *testing.T) {
	const maxULP = 2
	var worst int64
	var worstX float32
	check := func(x float32) {
		want := float32(math.Exp(float64(x)))
		got := exp32(x)
		if math.IsInf(float64(want), 1) {
			if !math.IsInf(float64(got), 1) {
				t.Fatalf("exp32(%g) = %g, want +Inf", x, got)
			}
			return
		}
		d := ulpDiff(got, want)
		lim := int64(maxULP)
		if want < math.SmallestNonzeroFloat32*(1<<23) { // subnormal (or 0)
			lim = 1
		}
		if d > lim {
			t.Fatalf("exp32(%g) = %g (%#x), want %g (%#x): %d ulp", x, got, math.Float32bits(got), want, math.Float32bits(want), d)
		}
		if d > worst {
			worst, worstX = d, x
		}
	}
	stride := uint32(101)
	if testing.Short() {
		stride = 997
	}
	sweep32(-110, 90, stride, check)
	// Dense around the ends of the range and around 0.
	for _, c := range []float32{exp32Max, exp32Min, -87.33654, 0, 1, -1, 88, -88, 88.7, -88.7, 89, -104} {
		u := math.Float32bits(c)
		for d := uint32(0); d < 4096; d++ {
			check(math.Float32frombits(u + d))
			check(math.Float32frombits(u - d))
		}
	}
	t.Logf("worst: %d ulp at x=%g", worst, worstX)
	for _, tc := range []struct{ x, want float32 }{
		{float32(math.Inf(1)), float32(math.Inf(1))},
		{float32(math.Inf(-1)), 0},
		{1000, float32(math.Inf(1))},
		{-1000, 0},
		{0, 1},
	} {
		if got := exp32(tc.x); got != tc.want {
			t.Errorf("exp32(%g) = %g, want %g", tc.x, got, tc.want)
		}
	}
	if got := exp32(float32(math.NaN())); got == got {
		t.Errorf("exp32(NaN) = %g, want NaN", got)
	}
}

// TestSigmoid32Accuracy checks sigmoid32 and silu32 against float64
// references: within 4 ulp (sigmoid, subnormal results included) and 5 ulp
// (silu, where sigmoid(x) is a normal float32), exact limits at ±Inf.
func TestSigmoid32Accuracy(t *testing.T) {
	var worstS, worstL int64
	stride := uint32(127)
	if testing.Short() {
		stride = 4099
	}
	sweep32(-120, 120, stride, func(x float32) {
		s64 := 1 / (1 + math.Exp(-float64(x)))
		want := float32(s64)
		got := sigmoid32(x)
		if d := ulpDiff(got, want); d > 4 {
			t.Fatalf("sigmoid32(%g) = %g, want %g: %d ulp", x, got, want, d)
		} else if d > worstS {
			worstS = d
		}
		wantL := float32(float64(x) * s64)
		gotL := silu32(x)
		if s64 < 0x1p-126 {
			return // sigmoid is subnormal: silu keeps only its few bits (as before exp32)
		}
		if d := ulpDiff(float32(math.Abs(float64(gotL))), float32(math.Abs(float64(wantL)))); d > 5 || math.Signbit(float64(gotL)) != math.Signbit(float64(wantL)) && wantL != 0 {
			t.Fatalf("silu32(%g) = %g, want %g: %d ulp", x, gotL, wantL, d)
		} else if d > worstL {
			worstL = d
		}
	})
	t.Logf("worst: sigmoid %d ulp, silu %d ulp", worstS, worstL)
	if got := sigmoid32(float32(math.Inf(1))); got != 1 {
		t.Errorf("sigmoid32(+Inf) = %g", got)
	}
	if got := sigmoid32(float32(math.Inf(-1))); got != 0 {
		t.Errorf("sigmoid32(-Inf) = %g", got)
	}
}
