package npu

import (
	"math"
	"testing"
)

// TestEncodeDecodeFloats round-trips values through each float dtype; the
// 16-bit ones round to nearest even.
func TestEncodeDecodeFloats(t *testing.T) {
	in := []float32{0, 1, -2.5, 1.0 / 3, 65504, float32(math.Inf(-1))}
	for _, tc := range []struct {
		dt    DType
		round func(float32) float32
	}{
		{F32, func(f float32) float32 { return f }},
		{BF16, func(f float32) float32 { return BF16ToF32(F32ToBF16(f)) }},
		{F16, func(f float32) float32 { return F16ToF32(F32ToF16(f)) }},
	} {
		b := EncodeFloats(in, tc.dt)
		if len(b) != len(in)*tc.dt.Size() {
			t.Fatalf("%v: %d bytes", tc.dt, len(b))
		}
		out, err := DecodeFloats(b, tc.dt)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range in {
			if out[i] != tc.round(v) {
				t.Errorf("%v: element %d = %v, want %v", tc.dt, i, out[i], tc.round(v))
			}
		}
	}
	if _, err := DecodeFloats([]byte{1, 2, 3}, F32); err == nil {
		t.Error("3 bytes decoded as F32")
	}
	if _, err := DecodeFloats([]byte{1}, I8); err == nil {
		t.Error("I8 decoded as floats")
	}
}
